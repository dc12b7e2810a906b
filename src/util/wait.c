/*
 * wait.c - spin, yield, then futex sleep on shared flag words (see wait.h for the protocol).
 */
#include "util/wait.h"

#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/config.h"

#define SLEEP_SLICE_NS 10000000ull /* 10 ms: the longest a sleeper goes without a check */
#define SPIN_CHECK_EVERY 1024      /* polls between two clock reads while spinning */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* The futex word of a flag: the low half of its value (futexes are 32 bits wide). A store
 * changes it unless the value moves by a multiple of 2^32 at once; a sleeper would then sleep
 * through that one store until its slice ends, and check again, or, in a wait without a check
 * (no slices), until the next store: such flags (the host executor's) move by 1 at a time. */
static uint32_t *futex_word(weft_flag_t *flag)
{
    uint32_t *word = (uint32_t *)&flag->value;
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    word++;
#endif
    return word;
}

/* ns 0: until woken. */
static void futex_wait(weft_flag_t *flag, uint32_t expected, uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                          .tv_nsec = (long)(ns % 1000000000ull)};
    /* Shared futex (no FUTEX_PRIVATE_FLAG): the word may live in another process's mapping. */
    (void)syscall(SYS_futex, futex_word(flag), FUTEX_WAIT, expected, ns ? &ts : NULL, NULL, 0);
}

static void futex_wake_all(weft_flag_t *flag)
{
    (void)syscall(SYS_futex, futex_word(flag), FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

void weft_flag_set(weft_flag_t *flag, uint64_t v)
{
    atomic_store_explicit(&flag->value, v, memory_order_seq_cst);
    if (atomic_load_explicit(&flag->sleepers, memory_order_seq_cst) != 0)
        futex_wake_all(flag);
}

/* Sleep on flag for at most one slice (sliced) or until woken, unless it has reached target
 * meanwhile. */
static void sleep_on(weft_flag_t *flag, uint64_t target, int sliced)
{
    atomic_fetch_add_explicit(&flag->sleepers, 1, memory_order_seq_cst);
    uint64_t v = atomic_load_explicit(&flag->value, memory_order_seq_cst);
    if (v < target)
        futex_wait(flag, (uint32_t)v, sliced ? SLEEP_SLICE_NS : 0);
    atomic_fetch_sub_explicit(&flag->sleepers, 1, memory_order_seq_cst);
}

static weft_flag_t *flag_at(weft_flag_t *first, size_t stride_bytes, int i)
{
    return (weft_flag_t *)((char *)first + (size_t)i * stride_bytes);
}

/* Whether flags from..count-1 (but skip_index) have all reached target. */
static int reached_from(weft_flag_t *first, size_t stride_bytes, int from, int count,
                        int skip_index, uint64_t target)
{
    for (int i = from; i < count; i++) {
        if (i != skip_index && atomic_load_explicit(&flag_at(first, stride_bytes, i)->value,
                                                    memory_order_acquire) < target)
            return 0;
    }
    return 1;
}

weft_status_t weft_flag_wait_all(weft_flag_t *first, size_t stride_bytes, int count, int skip_index,
                                 uint64_t target, const weft_wait_policy_t *policy,
                                 weft_wait_check_fn check, void *arg)
{
    uint64_t start = 0;
    unsigned polls = 0;
    for (int i = 0; i < count; i++) {
        if (i == skip_index)
            continue;
        weft_flag_t *flag = flag_at(first, stride_bytes, i);
        while (atomic_load_explicit(&flag->value, memory_order_acquire) < target) {
            if (++polls % SPIN_CHECK_EVERY != 0) {
                cpu_relax();
                continue;
            }
            uint64_t now = weft_now_ns();
            if (start == 0)
                start = now;
            weft_status_t st = check ? check(arg) : WEFT_SUCCESS;
            /* The flags may have arrived since they were read: a peer that set its flag and then
             * failed (its failure being what check reports) did its part, so the wait is over. */
            if (st != WEFT_SUCCESS &&
                !reached_from(first, stride_bytes, i, count, skip_index, target))
                return st;
            uint64_t waited = now - start;
            if (waited < policy->spin_ns)
                continue;
            if (waited < policy->spin_ns + policy->yield_ns) {
                sched_yield();
                polls = SPIN_CHECK_EVERY - 8; /* check again after a few polls */
                continue;
            }
            sleep_on(flag, target, check != NULL);
            polls = SPIN_CHECK_EVERY - 1;
        }
    }
    return WEFT_SUCCESS;
}

weft_status_t weft_flag_wait(weft_flag_t *flag, uint64_t target, const weft_wait_policy_t *policy,
                             weft_wait_check_fn check, void *arg)
{
    return weft_flag_wait_all(flag, 0, 1, -1, target, policy, check, arg);
}

weft_wait_policy_t weft_wait_policy(int threads, int cpus)
{
    const weft_env_t *cfg = weft_config_get();
    weft_wait_policy_t p = {cfg->wait_spin_ns, cfg->wait_yield_ns};
    if (threads > cpus)
        p.spin_ns = 0;
    return p;
}
