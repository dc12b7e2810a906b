/*
 * cost_model.c - the linear per-tier transfer cost tau(s) = alpha_t + s / beta_t.
 *
 * Design: the model is plain data (weft_cost_model_t); these functions only evaluate and check
 * it. Bandwidth is in GB/s (1e9 bytes per second), so one byte costs 1 / (bw_gbps * 1e3)
 * microseconds.
 *
 * Thread safety: pure functions of their arguments; callable from any thread.
 */
#include "model/cost_model.h"

#include <assert.h>
#include <math.h>
#include <stddef.h>

double weft_cost_us(const weft_cost_model_t *model, weft_tier_t tier, uint64_t bytes)
{
    assert(model != NULL && (unsigned)tier < WEFT_NUM_TIERS);
    const weft_tier_params_t *p = &model->tier[tier];
    return p->lat_us + (double)bytes / (p->bw_gbps * 1e3);
}

int weft_cost_model_check(const weft_cost_model_t *model)
{
    if (model == NULL)
        return -1;
    for (int t = 0; t < WEFT_NUM_TIERS; t++) {
        const weft_tier_params_t *p = &model->tier[t];
        /* Written so that NaN fails every comparison; infinities are out of range too, since a
         * cost must stay finite for the partitioner's ordering and sums. */
        if (!(p->lat_us >= 0.0) || !isfinite(p->lat_us))
            return -1;
        if (!(p->bw_gbps > 0.0) || !isfinite(p->bw_gbps))
            return -1;
        if (p->unit_bytes == 0 || p->fanout < 1)
            return -1;
    }
    return 0;
}
