"""Worker of test_faults.py: one scenario per job, run under weftrun. Every rank that gets to
the end writes OUT/rank<r>.json with {"results": {scenario: "ok" | "FAIL: ..."}}.

Scenarios:
  abort       rank 1 aborts: its own calls fail with WEFT_ERR_ABORTED, rank 0's next collective
              with WEFT_ERR_PEER_LOST, well before the timeout; both can still destroy.
  raise       rank 1 raises inside `with weft.init() as comm:`; the context manager aborts, so
              rank 0, waiting in a barrier, sees WEFT_ERR_PEER_LOST at once.
  exit        rank 1 leaves the process (os._exit(3)) after init; rank 0 sees
              WEFT_ERR_PEER_LOST.
  destroyed   every call on a destroyed communicator raises ValueError; destroy is idempotent
              and warns when arrays from empty() outlive it.
  abort_race  a thread calls abort(), stats() and empty() in a loop while the main thread
              destroys: each call lands or raises ValueError (stats() and empty() once
              destroy() has begun, abort() once it has returned), never touches the freed
              communicator (repeated on fresh communicators).
  abort_during_destroy
              rank 0's destroy() waits for rank 1, which does not come; abort() on another
              thread ends it at once with WEFT_ERR_ABORTED.
  destroy_interrupted
              rank 1 destroys with a MoE handle alive, its free interrupted: destroy() raises
              that exception after destroying the communicator, and frees no handle twice.
  init_fails  rank 0's Comm constructor raises after the C communicator exists: init() aborts
              and frees it, so rank 1's barrier on it fails at once (WEFT_ERR_PEER_LOST).
  config      weft.init() keyword overrides reach the library (registration="staged": no
              zero-copy operation); bad values raise ValueError without making a communicator.
  init_retry  rank 1's init() raises ValueError (a bad backend), then TypeError (timeout_s a
              string), while rank 0's calls time out (1 s) waiting for it; then both init()
              again and all-reduce: each failed call took one rendezvous number on both ranks,
              so the retries meet.
"""

import argparse
import json
import os
import sys
import threading
import time
import warnings

import numpy as np

import weft
import weft._comm
import weft._lib

ABORT_RACES = 20  # fresh communicators in scenario_abort_race
PROMPT_S = 10.0  # a failure must be seen this fast (the jobs run with WEFT_TIMEOUT_S=60)
OUT = None  # the job's output directory (--out), also for flags between ranks


class Checks:
    def __init__(self):
        self.failures = []

    def expect(self, cond, message):
        if not cond:
            self.failures.append(message)

    def expect_error(self, fn, statuses, what):
        t0 = time.monotonic()
        try:
            fn()
        except weft.WeftError as exc:
            took = time.monotonic() - t0
            self.expect(exc.status in statuses, f"{what}: status {exc.status}, expected one of "
                                                f"{statuses} ({exc.message})")
            self.expect(took < PROMPT_S, f"{what}: the error took {took:.1f} s")
            return
        except Exception as exc:  # noqa: BLE001 - the wrong exception is the failure
            self.expect(False, f"{what}: raised {type(exc).__name__}: {exc}")
            return
        self.expect(False, f"{what}: raised nothing")


def scenario_abort(c):
    comm = weft.init()
    if comm.rank == 1:
        comm.abort()
        c.expect_error(lambda: comm.all_reduce(np.ones(4)), ("WEFT_ERR_ABORTED",),
                       "own collective after abort")
    else:
        time.sleep(0.2)
        c.expect_error(lambda: comm.all_reduce(np.ones(4)), ("WEFT_ERR_PEER_LOST",),
                       "collective after the peer aborted")
        c.expect_error(lambda: comm.barrier(), ("WEFT_ERR_PEER_LOST", "WEFT_ERR_ABORTED"),
                       "the communicator stays unusable")
    comm.destroy()
    return comm.rank


def scenario_raise(c):
    rank = None
    try:
        with weft.init() as comm:
            rank = comm.rank
            if rank == 1:
                raise KeyError("raised by rank 1 on purpose")
            c.expect_error(comm.barrier, ("WEFT_ERR_PEER_LOST",), "barrier with a dead peer")
    except KeyError:
        c.expect(rank == 1, "KeyError on the wrong rank")
    except weft.WeftError as exc:
        c.expect(False, f"the context manager raised {exc} instead of the user's exception")
    c.expect(comm._handle is None, "the context manager did not destroy the communicator")
    return rank


def scenario_exit(c):
    comm = weft.init()
    if comm.rank == 1:
        os._exit(3)
    c.expect_error(lambda: comm.all_reduce(np.ones(4)), ("WEFT_ERR_PEER_LOST",),
                   "collective after the peer exited")
    comm.destroy()
    return comm.rank


def scenario_destroyed(c):
    with weft.init() as comm:
        rank = comm.rank
        stale = comm.empty(16)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            comm.destroy()
        texts = [str(w.message) for w in caught if w.category is RuntimeWarning]
        c.expect(len(texts) == 1 and "1 array(s) from empty() are still alive" in texts[0],
                 f"destroy with an array alive warned {texts}")
        del stale
    comm.destroy()
    for what, fn in (
        ("all_reduce", lambda: comm.all_reduce(np.ones(4))),
        ("barrier", comm.barrier),
        ("stats", comm.stats),
        ("abort", comm.abort),
        ("empty", lambda: comm.empty(4)),
    ):
        try:
            fn()
            c.expect(False, f"{what} on a destroyed communicator raised nothing")
        except ValueError as exc:
            c.expect("destroyed" in str(exc), f"{what}: {exc}")
    try:
        weft.all_reduce(np.ones(4))
        c.expect(False, "weft.all_reduce without a communicator raised nothing")
    except RuntimeError as exc:
        c.expect("weft.init()" in str(exc), f"module function: {exc}")
    return rank


def scenario_abort_race(c):
    rank = None
    for i in range(ABORT_RACES):
        comm = weft.init()
        rank = comm.rank
        arrays = []  # freed after destroy (their __del__)
        try:
            arrays += [comm.empty(64) for _ in range(4)]
        except weft.WeftError as exc:  # a peer that raced ahead aborted: this rank lost it
            c.expect(exc.status == "WEFT_ERR_PEER_LOST",
                     f"race {i}: empty() raised {exc.status}: {exc.message}")
        go, ended = threading.Event(), []

        def race():
            go.wait()
            while True:
                try:
                    comm.abort()
                    comm.stats()
                    arrays.append(comm.empty(16))
                except weft.WeftError:
                    pass  # empty() on the aborted communicator
                except ValueError as exc:
                    ended.append(str(exc))
                    return

        thread = threading.Thread(target=race)
        thread.start()
        go.set()
        try:
            comm.destroy()
        except weft.WeftError as exc:
            c.expect(exc.status in ("WEFT_ERR_PEER_LOST", "WEFT_ERR_ABORTED"),
                     f"race {i}: destroy raised {exc.status}: {exc.message}")
        thread.join(PROMPT_S)
        c.expect(not thread.is_alive(), f"race {i}: the aborting thread did not end")
        c.expect(ended and "destroyed" in ended[0], f"race {i}: the thread ended with {ended}")
        del arrays
    return rank


def scenario_config(c):
    for kwargs, text in (
        ({"backend": "gpu"}, "backend"),
        ({"registration": "eager"}, "registration"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"timeout_s": float("inf")}, "timeout_s"),
        ({"host_workers": 0}, "host_workers"),
        ({"host_workers": 2**32 + 1}, "host_workers 4294967297 is outside the range of a C int"),
    ):
        try:
            weft.init(**kwargs)
            c.expect(False, f"init({kwargs}) raised nothing")
        except ValueError as exc:
            c.expect(text in str(exc), f"init({kwargs}): {exc}")
    with weft.init(backend="host", registration="staged", timeout_s=7, host_workers=1) as comm:
        a = comm.empty(4099, np.float32)
        a[:] = comm.rank
        time.sleep(0.05)
        before = comm.stats()
        comm.all_reduce(a)
        after = comm.stats()
        c.expect(np.all(a == comm.size * (comm.size - 1) / 2), f"all_reduce gave {a[:4]}")
        c.expect(after["zero_copy_ops"] == before["zero_copy_ops"],
                 "registration='staged' was not applied: an operation was zero-copy")
        c.expect(after["staged_ops"] == before["staged_ops"] + 1, f"stats {before} -> {after}")
        c.expect(comm.backend == "host", f"backend {comm.backend}")
        rank = comm.rank
    return rank


def _wait_for_file(path, timeout_s):
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def scenario_abort_during_destroy(c):
    """Rank 0's destroy() waits for rank 1, which does not come; a watchdog thread's abort()
    ends that wait at once (weft.h allows abort during weft_comm_destroy): destroy() raises
    WEFT_ERR_ABORTED with the library's message (read before a later weft call clears it) and
    the communicator is gone. Rank 1 waits (for a file rank 0 writes
    after its destroy() returned), then sees rank 0 lost."""
    comm = weft.init()
    flag = os.path.join(OUT, "rank0-destroyed")
    if comm.rank != 0:
        c.expect(_wait_for_file(flag, 100), "rank 0 never finished its destroy()")
        c.expect_error(comm.barrier, ("WEFT_ERR_PEER_LOST",), "barrier after rank 0 left")
        comm.destroy()
        return comm.rank
    lib = weft._lib.library()
    real = lib.weft_comm_destroy
    in_destroy = threading.Event()
    wait_s = 1.0  # for the library to reach its wait for rank 1 after the call began
    aborted = []

    def destroy_hook(handle):
        in_destroy.set()
        status = real(handle)
        # A MoE handle garbage-collected during the teardown, freed after weft_comm_destroy
        # (NULL stands in for it: freeing any handle clears this thread's error message).
        comm._doomed.append(None)
        return status

    def watchdog():
        if not in_destroy.wait(PROMPT_S):
            return
        time.sleep(wait_s)
        c.expect(repr(comm).endswith("being destroyed>"), f"during destroy: {comm!r}")
        try:
            comm.abort()
            aborted.append(time.monotonic())
        except Exception as exc:  # noqa: BLE001 - the wrong exception is the failure
            c.expect(False, f"abort() during destroy() raised {type(exc).__name__}: {exc}")

    thread = threading.Thread(target=watchdog)
    thread.start()
    lib.weft_comm_destroy = destroy_hook
    t0 = time.monotonic()
    try:
        comm.destroy()
        c.expect(False, "destroy() with an absent peer, aborted, raised nothing")
    except weft.WeftError as exc:
        c.expect(exc.status == "WEFT_ERR_ABORTED", f"destroy() raised {exc.status}: "
                                                   f"{exc.message}")
        c.expect("weft_comm_destroy" in exc.message,
                 f"destroy() raised without the library's message: {exc.message}")
    finally:
        lib.weft_comm_destroy = real
        ended = time.monotonic()
        thread.join(PROMPT_S)
    c.expect(in_destroy.is_set(), "destroy() never called weft_comm_destroy")
    c.expect(bool(aborted), "the watchdog did not abort")
    if aborted:
        c.expect(ended - t0 >= wait_s, f"destroy() returned after {ended - t0:.2f} s, before "
                                       "the abort: it did not wait for rank 1")
        c.expect(ended - aborted[0] < PROMPT_S,
                 f"destroy() ended {ended - aborted[0]:.1f} s after the abort")
    c.expect(repr(comm).endswith(", destroyed>"), f"after destroy: {comm!r}")
    try:
        comm.abort()
        c.expect(False, "abort() after destroy() returned raised nothing")
    except ValueError as exc:
        c.expect("was destroyed" in str(exc), f"abort() after destroy(): {exc}")
    with open(flag, "w"):
        pass
    return comm.rank


class Interrupted(Exception):
    """Raised into destroy() by scenario_destroy_interrupted."""


def scenario_destroy_interrupted(c):
    """Rank 1 destroys with a MoE handle alive, its free interrupted: destroy() raises that
    exception and still destroys the communicator; the handle is not freed again (it may have
    been freed when the exception came: a leak, never a double free)."""
    comm = weft.init()
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    routed = comm.moe_dispatch(x, np.array([[0], [1]], dtype=np.int64),
                               np.ones((2, 1), dtype=np.float32), comm.size)
    if comm.rank == 0:
        comm.destroy()
        return comm.rank
    real = weft._comm._destroy_moe_handle
    calls = []

    def interrupted(handle):
        calls.append(handle)
        if len(calls) == 1:
            raise Interrupted("the first free")
        real(handle)

    weft._comm._destroy_moe_handle = interrupted
    try:
        comm.destroy()
        c.expect(False, "destroy() raised nothing")
    except Interrupted as exc:
        c.expect(not hasattr(exc, "weft_destroy_error"), "weft_comm_destroy failed: "
                                                         f"{getattr(exc, 'weft_destroy_error', '')}")
    finally:
        weft._comm._destroy_moe_handle = real
    c.expect(len(calls) == 1, f"the handle was freed {len(calls) - 1} more times after the "
                              "interrupted free")
    c.expect(repr(comm).endswith(", destroyed>"), f"after destroy: {comm!r}")
    del routed
    return comm.rank


def scenario_init_fails(c):
    """Comm's constructor fails on rank 0 after the C communicator was made: init() aborts
    and frees it before raising, so rank 1, waiting in a barrier on it, fails at once; then both
    make and use a fresh communicator."""
    import weft._comm as weft_comm

    real = weft_comm.Comm

    class Failing(real):
        def __init__(self, handle):
            super().__init__(handle)
            raise RuntimeError("injected by the test")

    if os.environ.get("WEFT_RANK", os.environ.get("RANK")) == "0":
        weft_comm.Comm = Failing
        try:
            weft.init()
            c.expect(False, "init() with a failing constructor raised nothing")
        except RuntimeError as exc:
            c.expect("injected" in str(exc), f"init() raised {exc!r}")
        finally:
            weft_comm.Comm = real
        c.expect(weft_comm._default is None, "the failed communicator became the default")
    else:
        comm = weft.init()
        c.expect_error(comm.barrier, ("WEFT_ERR_PEER_LOST",), "barrier with rank 0's failed init")
        comm.destroy()
    with weft.init() as comm:
        a = np.full(4, comm.rank + 1.0)
        comm.all_reduce(a)
        c.expect(np.all(a == 3.0), f"all_reduce on the fresh communicator gave {a}")
        return comm.rank


def scenario_init_retry(c):
    rank = int(os.environ.get("WEFT_RANK", os.environ.get("RANK", "0")))
    for kwargs, error in (({"backend": "gpu"}, ValueError), ({"timeout_s": "1"}, TypeError)):
        if rank == 1:
            try:
                weft.init(**kwargs)
                c.expect(False, f"init({kwargs}) raised nothing")
            except error:
                pass
            except Exception as exc:  # noqa: BLE001 - the wrong exception is the failure
                c.expect(False, f"init({kwargs}) raised {type(exc).__name__}: {exc}")
        else:
            c.expect_error(lambda: weft.init(timeout_s=1), ("WEFT_ERR_TIMEOUT",),
                           f"init while rank 1's init({kwargs}) was refused")
    with weft.init(timeout_s=20) as comm:
        a = np.full(4, comm.rank + 1.0)
        comm.all_reduce(a)
        c.expect(np.all(a == 3.0), f"all_reduce after the retry gave {a}")
        return comm.rank


SCENARIOS = {
    "abort": scenario_abort,
    "raise": scenario_raise,
    "exit": scenario_exit,
    "destroyed": scenario_destroyed,
    "abort_race": scenario_abort_race,
    "config": scenario_config,
    "init_fails": scenario_init_fails,
    "init_retry": scenario_init_retry,
    "abort_during_destroy": scenario_abort_during_destroy,
    "destroy_interrupted": scenario_destroy_interrupted,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("scenario", choices=sorted(SCENARIOS))
    args = ap.parse_args()
    global OUT
    OUT = args.out
    c = Checks()
    rank = SCENARIOS[args.scenario](c)
    result = "ok" if not c.failures else "FAIL: " + "; ".join(c.failures)
    sys.stdout.write(f"rank {rank}: {args.scenario}: {result}\n")  # one write: shared stdout
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
        json.dump({"results": {args.scenario: result}}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
