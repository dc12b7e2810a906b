"""Shared pieces of the Python tests: where weft and weftrun are, the seed, and running a
multi-rank job of worker.py.

weft is imported from the installed package if there is one, else from the source tree
(python/), which then needs WEFT_LIBRARY (`make test-python` sets it). weftrun is found as
weft.launcher_path() finds it (WEFT_WEFTRUN, the bundled copy, or next to WEFT_LIBRARY).

The seed of the random inputs is printed in pytest's header; WEFT_TEST_SEED repeats a run.
"""

import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_PACKAGE_ROOT = os.path.dirname(HERE)  # python/
REPO_ROOT = os.path.dirname(SOURCE_PACKAGE_ROOT)

if importlib.util.find_spec("weft") is None:
    sys.path.insert(0, SOURCE_PACKAGE_ROOT)

import weft  # noqa: E402

SEED = int(os.environ.get("WEFT_TEST_SEED") or random.SystemRandom().randrange(1, 2**31))
JOB_TIMEOUT_S = 120


def pytest_report_header(config):
    return [
        f"weft test seed: {SEED} (WEFT_TEST_SEED={SEED} repeats this run)",
        f"weft package: {os.path.dirname(weft.__file__)}",
    ]


def package_root():
    """The directory whose weft/ the workers import (the one this process imported)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(weft.__file__)))


def worker_env(extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (package_root(), HERE, env.get("PYTHONPATH")) if p
    )
    env.setdefault("WEFT_TIMEOUT_S", "20")
    env["WEFT_BACKEND"] = "host"  # on a GPU machine "auto" would pick CUDA; GPU tests say so
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update(extra)
    return env


class JobResult:
    """A finished weftrun job: exit status, output, and each rank's JSON results (None for a
    rank that wrote none)."""

    def __init__(self, cmd, returncode, output, ranks):
        self.cmd = cmd
        self.returncode = returncode
        self.output = output
        self.ranks = ranks

    def describe(self):
        return (
            f"$ {' '.join(self.cmd)}\nexit status {self.returncode}, seed {SEED}\n"
            f"--- output (last 4000 characters) ---\n{self.output[-4000:]}"
        )


def run_job(nranks, args, extra_env=None, timeout=JOB_TIMEOUT_S, script="worker.py"):
    """Run `weftrun -n nranks python tests/<script> --out DIR args...`; return a JobResult."""
    with tempfile.TemporaryDirectory(prefix="weft-pytest-") as out:
        cmd = [
            weft.launcher_path(),
            "--grace",
            "10",
            "-n",
            str(nranks),
            sys.executable,
            os.path.join(HERE, script),
            "--out",
            out,
        ] + [str(a) for a in args]
        try:
            proc = subprocess.run(
                cmd,
                env=worker_env(extra_env),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                text=True,
            )
            returncode, output = proc.returncode, proc.stdout
        except subprocess.TimeoutExpired as exc:
            text = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
            returncode, output = "timeout", (text or "") + f"\n[timed out after {timeout} s]"
        ranks = []
        for r in range(nranks):
            path = os.path.join(out, f"rank{r}.json")
            if os.path.exists(path):
                with open(path) as f:
                    ranks.append(json.load(f))
            else:
                ranks.append(None)
        return JobResult(cmd, returncode, output, ranks)


def check_case(job, case):
    """Assert that every rank of job ran case and passed it."""
    problems = []
    for r, res in enumerate(job.ranks):
        if res is None:
            problems.append(f"rank {r}: wrote no results")
            continue
        outcome = res["results"].get(case)
        if outcome is None:
            problems.append(f"rank {r}: case did not run")
        elif outcome != "ok":
            problems.append(f"rank {r}: {outcome}")
    if problems:
        raise AssertionError(f"{case}: " + "\n".join(problems) + "\n" + job.describe())
