/*
 * steal.h - dynamic completion of a static plan by work stealing (model/partition.h).
 *
 * The partitioner balances the predicted cost of each worker's units; per-run noise (memory
 * contention, scheduling) still leaves some workers finishing early. A weft_steal_t lets the
 * workers of one run claim the plan's units so that every unit runs exactly once, on whichever
 * worker gets to it first:
 *   - each worker first claims its own units from the front of its range, in the plan's order
 *     (LPT: largest first), so a run without delays follows the plan unit for unit;
 *   - a worker whose range is empty becomes a thief: it picks the worker with the most units
 *     left and claims one unit from the back of that range (the victim's smallest unit), runs it,
 *     and picks again, until no worker has a unit left.
 * Each range is one 64-bit atomic word, so owner and thieves agree on every claim by
 * compare-and-swap: lock-free, no allocation, no system call during a run.
 *
 * Stealing ignores the partitioner's per-peer fan-out cap (H_t): a stolen unit may make more than
 * H_t workers read one peer at once. The cap spreads the bulk of the traffic, while every worker
 * is busy and each peer's link and memory are shared with the other peers' streams. A worker
 * steals only after its own range ran out, so at the tail thieves take the place of finished
 * workers (never more than nworkers workers move data at once), they take the victims' smallest
 * units, and the other peers' streams have mostly ended. Keeping the cap there would leave the
 * thieves idle exactly where the imbalance is: the slowest worker usually holds a peer whose
 * cap is already reached.
 *
 * Thread safety: weft_steal_prepare, weft_steal_init and weft_steal_fini must not run
 * concurrently with anything else on the same weft_steal_t. Between one weft_steal_prepare and
 * the next, weft_steal_run may be called concurrently by distinct workers; whatever starts those
 * workers must order prepare before their runs (the executor's generation flag, a barrier,
 * pthread_create), and whatever waits for them orders their work before the caller's next step.
 * The plan must stay unchanged from prepare until every run of that round has returned.
 */
#ifndef WEFT_EXEC_STEAL_H
#define WEFT_EXEC_STEAL_H

#include <stddef.h>

#include "model/partition.h"
#include "weft.h"

struct weft_steal_range; /* one worker's unclaimed units, on a cache line of its own */

typedef struct weft_steal {
    const weft_plan_t *plan;         /* the plan of the current round (not owned) */
    struct weft_steal_range *ranges; /* nworkers used, ranges_cap allocated */
    int nworkers;
    int ranges_cap;
} weft_steal_t;

/* The function that runs one unit. unit points into the plan's units; unit->worker is the worker
 * the plan chose, which is not the caller when the unit was stolen. */
typedef void (*weft_steal_fn)(void *ctx, const weft_unit_t *unit);

/* A weft_steal_t with no arrays (as is a zeroed one); free with weft_steal_fini. */
void weft_steal_init(weft_steal_t *s);
void weft_steal_fini(weft_steal_t *s);

/* Start a round over plan: every unit of plan becomes claimable, worker w's own range being
 * plan->units[worker_begin[w] .. worker_begin[w + 1]). Grows s's array to plan->nworkers ranges
 * when it is smaller (geometrically; no allocation once warm). Does not block. Returns
 * WEFT_ERR_INVALID_ARGUMENT if plan is NULL, has no workers (plan->nworkers < 1) or more than
 * UINT32_MAX units, WEFT_ERR_NO_MEMORY if the array cannot grow; on failure s holds no round (a
 * later weft_steal_prepare may succeed). */
weft_status_t weft_steal_prepare(weft_steal_t *s, const weft_plan_t *plan);

/* Run worker's share of the round: claim and run (fn(ctx, unit)) its own units in plan order,
 * then steal units of other workers one at a time as described above. Returns when no unit of
 * the round is left to claim (units claimed by other workers may still be running: their
 * completion is the caller's to wait for), with the number of units this call stole. worker is
 * in [0, plan->nworkers); at most one call per worker per round. fn must not call into s. */
size_t weft_steal_run(weft_steal_t *s, int worker, weft_steal_fn fn, void *ctx);

#endif /* WEFT_EXEC_STEAL_H */
