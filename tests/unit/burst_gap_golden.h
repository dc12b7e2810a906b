/*
 * burst_gap_golden.h - the golden Burst-Gap parameters shared by the model's unit tests
 * (test_burst_gap.c, test_burst_gap_check.c).
 *
 * R = 2 GB/s = 2000 bytes/us. Row K=4: T_iss0 goes 1.0 us at 1000 bytes to 2.0 us at 9000 bytes
 * (1/8000 us per byte), Q = 4000 bytes. Row K=8: half those times (0.5 -> 1.0 us), Q = 8000
 * bytes. K=6 sits halfway: T_iss0 the mean of the two rows, Q 6000.
 */
#ifndef WEFT_TESTS_UNIT_BURST_GAP_GOLDEN_H
#define WEFT_TESTS_UNIT_BURST_GAP_GOLDEN_H

#include <string.h>

#include "model/burst_gap.h"

static inline weft_bg_params_t golden_params(void)
{
    weft_bg_params_t p;
    memset(&p, 0, sizeof p);
    p.drain_gbps = 2.0;
    p.nrows = 2;
    p.row[0] = (weft_bg_row_t){.producers = 4, .npoints = 2, .capacity_bytes = 4000.0};
    p.row[0].bytes[0] = 1000;
    p.row[0].bytes[1] = 9000;
    p.row[0].t_iss0_us[0] = 1.0;
    p.row[0].t_iss0_us[1] = 2.0;
    p.row[1] = (weft_bg_row_t){.producers = 8, .npoints = 2, .capacity_bytes = 8000.0};
    p.row[1].bytes[0] = 1000;
    p.row[1].bytes[1] = 9000;
    p.row[1].t_iss0_us[0] = 0.5;
    p.row[1].t_iss0_us[1] = 1.0;
    return p;
}

#endif /* WEFT_TESTS_UNIT_BURST_GAP_GOLDEN_H */
