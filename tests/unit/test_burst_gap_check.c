/*
 * test_burst_gap_check.c - the parts of the Burst-Gap model that weft-calibrate's held-out check
 * rests on: the stall times (golden values; bit-identity with the capacity-free equations where
 * the capacity holds; agreement with a fluid simulation of the drain, which checks the
 * derivation in burst_gap.h independently), the row fit (golden tables with pooled violators
 * and skipped samples; invalid arguments with the output left untouched), and a held-out check
 * in miniature: fit a synthetic platform on two volumes in three, predict the third. The seed is
 * printed; pass one as argv[1] to replay a run.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/burst_gap.h"
#include "burst_gap_test.h"
#include "check.h"

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void test_golden_stall(void)
{
    static const struct {
        int k;
        uint64_t bytes;
        double gap_us, issue_us, period_us;
    } rows[] = {
        /* K=4, V=17000: T_iss0 = 3.0 (last segment extended), V/R = 8.5, (V - Q)/R = 6.5. */
        {4, 17000, 0.0, 8.5, 8.5},   /* drain-bound: V/R - G */
        {4, 17000, 1.5, 7.0, 8.5},   /* still V/R - G = 7.0 > 6.5 */
        {4, 17000, 2.5, 6.5, 9.0},   /* the stall binds: 6.5 > V/R - G = 6.0 */
        {4, 17000, 10.0, 6.5, 16.5}, /* isolated: the stall, where T_iss would say 3.0 */
        /* K=4, V=5000: the capacity holds ((V - Q)/R = 0.5 < T_iss0 = 1.5): as T_iss, P. */
        {4, 5000, 0.5, 2.0, 2.5},
        {4, 5000, 3.0, 1.5, 4.5},
        /* K=8, V=17000: T_iss0 = 0.5 + 16000/16000 = 1.5, Q = 8000, stall 4.5. */
        {8, 17000, 10.0, 4.5, 14.5},
        /* K=6 halfway: T_iss0 = 2.25, Q = 6000, stall (17000 - 6000)/2000 = 5.5. */
        {6, 17000, 10.0, 5.5, 15.5},
        /* Below the capacity at V = 0: T_iss0 clamped to the first point. */
        {4, 0, 0.0, 1.0, 1.0},
    };
    weft_bg_params_t p = golden_params();
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        double iss = POISON, per = POISON;
        CHECK(weft_bg_stall_times(&p, rows[i].k, rows[i].bytes, rows[i].gap_us, &iss, &per) ==
                  WEFT_SUCCESS,
              "row %zu: stall times failed: %s", i, weft_last_error());
        CHECK(iss == rows[i].issue_us && per == rows[i].period_us,
              "row %zu: T_stall %.17g, P_stall %.17g, expected %.17g, %.17g", i, iss, per,
              rows[i].issue_us, rows[i].period_us);
    }
}

static void test_random_stall(uint64_t seed)
{
    uint64_t rng = seed ^ 0x5157A11ull;
    int binding = 0;
    for (int iter = 0; iter < 4000; iter++) {
        weft_bg_params_t p = random_params(&rng, true);
        int kmin = p.row[0].producers, kmax = p.row[p.nrows - 1].producers;
        int k = kmin + (int)(next_u64(&rng) % (uint64_t)(kmax - kmin + 1));
        uint64_t v1 = next_u64(&rng) % (16u << 20), v2 = v1 + next_u64(&rng) % (16u << 20);
        double g1 = 100.0 * uniform(&rng), g2 = g1 + 100.0 * uniform(&rng);
        double si11, sp11, si21, sp21, si12, sp12, iss, per, t0, q;
        weft_status_t st = weft_bg_stall_times(&p, k, v1, g1, &si11, &sp11);
        st |= weft_bg_stall_times(&p, k, v2, g1, &si21, &sp21);
        st |= weft_bg_stall_times(&p, k, v1, g2, &si12, &sp12);
        st |= weft_bg_issue_time(&p, k, v1, g1, &iss);
        st |= weft_bg_period(&p, k, v1, g1, &per);
        st |= weft_bg_t_iss0(&p, k, v1, &t0);
        st |= weft_bg_capacity(&p, k, &q);
        if (st != WEFT_SUCCESS) {
            CHECK(0, "seed %" PRIu64 " iter %d: evaluation failed: %s", seed, iter,
                  weft_last_error());
            continue;
        }
        /* The stall as the model computes it: the same expression, so the same rounding. */
        double stall = ((double)v1 - q) / (p.drain_gbps * 1e3);
        if (stall <= t0) {
            CHECK(si11 == iss && sp11 == per,
                  "seed %" PRIu64 " iter %d: capacity holds but T %.17g vs %.17g, P %.17g vs "
                  "%.17g",
                  seed, iter, si11, iss, sp11, per);
        } else {
            binding++;
            CHECK(si11 == fmax(iss, stall) && si11 >= iss && sp11 >= per,
                  "seed %" PRIu64 " iter %d: stall %.17g binds: T %.17g (T_iss %.17g), P %.17g "
                  "(P %.17g)",
                  seed, iter, stall, si11, iss, sp11, per);
        }
        CHECK(si21 >= si11 && sp21 >= sp11 && si12 <= si11,
              "seed %" PRIu64 " iter %d: not monotone: V %" PRIu64 " -> %" PRIu64 ": T %g -> %g, "
              "P %g -> %g; G %g -> %g: T %g -> %g",
              seed, iter, v1, v2, si11, si21, sp11, sp21, g1, g2, si11, si12);
        CHECK(close_to(sp11, si11 + g1, 1e-12), "seed %" PRIu64 " iter %d: P %.17g != T + G %.17g",
              seed, iter, sp11, si11 + g1);
    }
    /* The draw makes the stall bind in about 60% of the cases; both branches must run. */
    CHECK(binding > 400 && binding < 3600, "seed %" PRIu64 ": the stall bound %d times in 4000",
          seed, binding);
}

/*
 * A fluid model of the drain, independent of the closed form: the issuer emits V bytes at the
 * rate a = V/T_iss0 while fewer than Q bytes are outstanding and at the drain's rate R when Q
 * are; the drain removes R bytes per us while any are outstanding. Bursts of V bytes each
 * followed by G us of compute, from an empty drain, until the backlog at the start of a burst
 * repeats exactly (it moves by a fixed step per burst until it is capped at Q or at 0): the
 * steady-state issue time into *t_out. False if that takes more than max_bursts.
 */
static bool simulate_issue_us(double v, double t0, double r, double q, double g, long max_bursts,
                              double *t_out)
{
    double a = v / t0, start = 0.0;
    for (long n = 0; n < max_bursts; n++) {
        double backlog = start, t;
        if (a > r) {
            /* Outstanding bytes grow at a - R until they reach Q, then the issuer stalls. */
            double t_full = fmax(0.0, (q - backlog) / (a - r));
            if (a * t_full >= v) {
                t = t0;
                backlog += (a - r) * t;
            } else {
                t = t_full + (v - a * t_full) / r;
                backlog = q;
            }
        } else {
            t = t0;
            backlog = fmax(0.0, backlog - (r - a) * t);
        }
        double next = fmax(0.0, backlog - r * g);
        if (next == start) {
            *t_out = t;
            return true;
        }
        start = next;
    }
    return false;
}

static void test_fluid(uint64_t seed)
{
    uint64_t rng = seed ^ 0xF1D1Dull;
    int stalled = 0;
    for (int iter = 0; iter < 2000; iter++) {
        /* One point per row: T_iss0 constant, so the issuer's rate is V/T_iss0 exactly. */
        weft_bg_params_t p;
        memset(&p, 0, sizeof p);
        p.drain_gbps = 10.0 + 200.0 * uniform(&rng);
        p.nrows = 1;
        p.row[0].producers = 1;
        p.row[0].npoints = 1;
        p.row[0].bytes[0] = 1;
        /* T_iss0 from a quarter of V/R (the issuer outpaces the drain) to 1.75 V/R (it does
         * not), Q from 0 to V: the stall binds in about a quarter of the draws. */
        uint64_t v = 4096 + next_u64(&rng) % (32u << 20);
        double r = p.drain_gbps * 1e3, t0 = (double)v / r * (0.25 + 1.5 * uniform(&rng)), g;
        p.row[0].t_iss0_us[0] = t0;
        p.row[0].capacity_bytes = iter % 10 == 0 ? 0.0 : (double)v * uniform(&rng);
        /* A gap with V/R - G - T_iss0 (the backlog's step per burst, over R) not within 1% of
         * T_iss0 of 0, so the simulation reaches its fixed point in at most
         * Q / (0.01 R T_iss0) < 400 bursts. */
        do
            g = (double)v / r * 2.0 * uniform(&rng);
        while (fabs((double)v / r - g - t0) < 0.01 * t0);
        double iss, per, sim;
        if (weft_bg_stall_times(&p, 1, v, g, &iss, &per) != WEFT_SUCCESS) {
            CHECK(0, "seed %" PRIu64 " iter %d: stall times failed: %s", seed, iter,
                  weft_last_error());
            continue;
        }
        if (!simulate_issue_us((double)v, t0, r, p.row[0].capacity_bytes, g, 100000, &sim)) {
            CHECK(0, "seed %" PRIu64 " iter %d: the simulation did not settle", seed, iter);
            continue;
        }
        stalled += iss > t0;
        CHECK(close_to(iss, sim, 1e-9),
              "seed %" PRIu64 " iter %d: V %" PRIu64 " G %g T_iss0 %g Q %g R %g: T_stall %.17g, "
              "simulated %.17g",
              seed, iter, v, g, t0, p.row[0].capacity_bytes, r, iss, sim);
    }
    CHECK(stalled > 200 && stalled < 1800, "seed %" PRIu64 ": %d of 2000 draws stalled", seed,
          stalled);
}

static void test_fit_row(void)
{
    /* R = 1 GB/s = 1000 bytes/us; knee at 5000 bytes, Q = 1234 bytes. Medians 2.0 (1000),
     * 4.5 (2000, an even count), 3.0 (3000): a violator, pooled with 2000 as
     * (2 * 4.5 + 3 * 3.0) / 5 = 3.6; 5.0 (4000, gap exactly V/R = 4 us qualifies). Skipped: a
     * 3000-byte sample with a 1 us gap (< V/R = 3 us) and a 6000-byte one above the knee. */
    static const weft_bg_sample_t s[] = {
        {1000, 10.0, 2.0},  {2000, 10.0, 5.0}, {3000, 10.0, 3.5}, {1000, 10.0, 3.0},
        {3000, 1.0, 100.0}, {2000, 10.0, 4.0}, {3000, 10.0, 2.5}, {1000, 10.0, 1.0},
        {6000, 100.0, 0.5}, {4000, 4.0, 5.0},  {3000, 10.0, 3.0},
    };
    size_t n = sizeof s / sizeof s[0];
    weft_bg_knee_fit_t knee;
    memset(&knee, 0, sizeof knee);
    knee.knee_bytes = 5000.0;
    knee.capacity_bytes = 1234.0;
    weft_bg_row_t row;
    memset(&row, 0x5a, sizeof row);
    static const uint64_t want_bytes[] = {1000, 2000, 3000, 4000};
    static const double want_t[] = {2.0, 3.6, 3.6, 5.0};
    CHECK(weft_bg_fit_row(s, n, 1.0, 7, &knee, &row) == WEFT_SUCCESS, "golden row failed: %s",
          weft_last_error());
    CHECK(row.producers == 7 && row.npoints == 4 && row.capacity_bytes == 1234.0,
          "golden row: K %d, %d points, Q %g; expected 7, 4, 1234", row.producers, row.npoints,
          row.capacity_bytes);
    for (int i = 0; i < 4 && i < row.npoints; i++)
        CHECK(row.bytes[i] == want_bytes[i] && row.t_iss0_us[i] == want_t[i],
              "golden row point %d: (%" PRIu64 ", %.17g), expected (%" PRIu64 ", %.17g)", i,
              row.bytes[i], row.t_iss0_us[i], want_bytes[i], want_t[i]);

    /* A chain of violators: medians 5, 1, 3, 2 (two samples) pool into one block, the mean
     * of all five samples' medians weighted by their counts: 13/5 = 2.6. */
    static const weft_bg_sample_t c[] = {
        {1000, 50.0, 5.0}, {2000, 50.0, 1.0}, {3000, 50.0, 3.0},
        {4000, 50.0, 2.0}, {4000, 50.0, 2.0},
    };
    CHECK(weft_bg_fit_row(c, 5, 1.0, 1, &knee, &row) == WEFT_SUCCESS && row.npoints == 4,
          "chained row failed: %s", weft_last_error());
    for (int i = 0; i < row.npoints; i++)
        CHECK(close_to(row.t_iss0_us[i], 2.6, 1e-15), "chained row point %d: %.17g, expected 2.6",
              i, row.t_iss0_us[i]);
    weft_bg_params_t p;
    memset(&p, 0, sizeof p);
    p.drain_gbps = 1.0;
    p.nrows = 1;
    p.row[0] = row;
    CHECK(weft_bg_params_check(&p) == WEFT_SUCCESS, "fitted row rejected: %s", weft_last_error());

    /* Invalid arguments; the row untouched. */
    weft_bg_row_t before;
    memset(&row, 0x5a, sizeof row);
    before = row;
    CHECK(weft_bg_fit_row(NULL, n, 1.0, 7, &knee, &row) == WEFT_ERR_INVALID_ARGUMENT,
          "NULL samples accepted");
    CHECK(weft_bg_fit_row(s, 0, 1.0, 7, &knee, &row) == WEFT_ERR_INVALID_ARGUMENT,
          "no samples accepted");
    CHECK(weft_bg_fit_row(s, n, 1.0, 7, NULL, &row) == WEFT_ERR_INVALID_ARGUMENT,
          "NULL knee accepted");
    CHECK(weft_bg_fit_row(s, n, 1.0, 7, &knee, NULL) == WEFT_ERR_INVALID_ARGUMENT,
          "NULL row accepted");
    CHECK(weft_bg_fit_row(s, n, 0.0, 7, &knee, &row) == WEFT_ERR_INVALID_ARGUMENT,
          "R = 0 accepted");
    CHECK(weft_bg_fit_row(s, n, 1.0, 0, &knee, &row) == WEFT_ERR_INVALID_ARGUMENT,
          "producers 0 accepted");
    weft_bg_knee_fit_t bad = knee;
    bad.knee_bytes = NAN;
    CHECK(weft_bg_fit_row(s, n, 1.0, 7, &bad, &row) == WEFT_ERR_INVALID_ARGUMENT,
          "NaN knee accepted");
    bad = knee;
    bad.capacity_bytes = -1.0;
    CHECK(weft_bg_fit_row(s, n, 1.0, 7, &bad, &row) == WEFT_ERR_INVALID_ARGUMENT,
          "negative capacity accepted");
    bad = knee;
    bad.knee_bytes = 999.0;
    CHECK(weft_bg_fit_row(s, n, 1.0, 7, &bad, &row) == WEFT_ERR_INVALID_ARGUMENT,
          "a knee below every sample accepted");
    weft_bg_sample_t z[3] = {{1000, 10.0, 1.0}, {2000, 10.0, 0.0}, {3000, 10.0, 1.0}};
    CHECK(weft_bg_fit_row(z, 3, 1.0, 7, &knee, &row) == WEFT_ERR_INVALID_ARGUMENT,
          "a zero time accepted");
    weft_bg_sample_t many[WEFT_BG_MAX_POINTS + 1];
    for (int i = 0; i <= WEFT_BG_MAX_POINTS; i++)
        many[i] = (weft_bg_sample_t){(uint64_t)(100 + i), 10.0, 1.0};
    CHECK(weft_bg_fit_row(many, WEFT_BG_MAX_POINTS + 1, 1.0, 7, &knee, &row) ==
              WEFT_ERR_INVALID_ARGUMENT,
          "%d volumes accepted", WEFT_BG_MAX_POINTS + 1);
    CHECK(memcmp(&row, &before, sizeof row) == 0, "row written on failure");
    CHECK(weft_bg_fit_row(many, WEFT_BG_MAX_POINTS, 1.0, 7, &knee, &row) == WEFT_SUCCESS &&
              row.npoints == WEFT_BG_MAX_POINTS,
          "%d volumes rejected: %s", WEFT_BG_MAX_POINTS, weft_last_error());
    double iss = POISON, per = POISON;
    CHECK(weft_bg_stall_times(&p, 1, 100, 0.0, &iss, NULL) == WEFT_ERR_INVALID_ARGUMENT &&
              iss == POISON,
          "NULL period_us_out accepted");
    CHECK(weft_bg_stall_times(&p, 1, 100, -1.0, &iss, &per) == WEFT_ERR_INVALID_ARGUMENT &&
              iss == POISON && per == POISON,
          "negative gap accepted");
    CHECK(weft_bg_stall_times(&p, 2, 100, 0.0, &iss, &per) == WEFT_ERR_INVALID_ARGUMENT &&
              iss == POISON && per == POISON,
          "K out of range accepted");
}

/*
 * The held-out check in miniature, as weft-calibrate does it. Platform: R = 150 GB/s, isolated
 * issue time 2 us + V/(600 GB/s) until Q = 2 MiB stalls the issuer (knee near 3.2 MB). Three
 * ranks measure isolated bursts of 4 KiB .. 64 MiB (doubling) with 1% noise, and zero-gap
 * periodic bursts of 4 .. 64 MiB. Every third volume from the second (never the last) is held
 * out of the knee and row fits; R comes from the periodic bursts. The held-out issue times are
 * predicted with weft_bg_stall_times from the fitted row.
 */
static void test_holdout(uint64_t seed)
{
    const double r = 150000.0, peak = 600000.0, t0 = 2.0, q = 2097152.0;
    uint64_t rng = seed ^ 0x401Dull;
    weft_bg_sample_t fit[3 * 15], rate[3 * 5];
    weft_bg_sample_t held[3 * 15]; /* the held-out measurements */
    size_t nfit = 0, nrate = 0, nheld = 0;
    for (int rank = 0; rank < 3; rank++) {
        for (int i = 0; i < 15; i++) {
            uint64_t v = 4096ull << i;
            double gap = fmax(10.0, 2.0 * (double)v / r);
            double t = fmax(t0 + (double)v / peak, ((double)v - q) / r);
            t *= 1.0 + 0.01 * normal(&rng);
            if (i % 3 == 1 && i < 14)
                held[nheld++] = (weft_bg_sample_t){v, gap, t};
            else
                fit[nfit++] = (weft_bg_sample_t){v, gap, t};
        }
        for (int i = 0; i < 5; i++) {
            uint64_t v = (4ull << 20) << i;
            rate[nrate++] = (weft_bg_sample_t){v, 0.0, (double)v / r * (1.0 + 0.01 * normal(&rng))};
        }
    }
    weft_bg_rate_fit_t rf;
    weft_bg_knee_fit_t kf;
    weft_bg_params_t p;
    memset(&p, 0, sizeof p);
    p.nrows = 1;
    if (weft_bg_fit_rate(rate, nrate, &rf) != WEFT_SUCCESS ||
        weft_bg_fit_knee(fit, nfit, rf.drain_gbps, &kf) != WEFT_SUCCESS ||
        weft_bg_fit_row(fit, nfit, rf.drain_gbps, 32, &kf, &p.row[0]) != WEFT_SUCCESS) {
        CHECK(0, "seed %" PRIu64 ": held-out fits failed: %s", seed, weft_last_error());
        return;
    }
    p.drain_gbps = rf.drain_gbps;
    double err[3 * 15], worst = 0.0, worst_free = 0.0;
    for (size_t i = 0; i < nheld; i++) {
        double iss = POISON, per = POISON, free_iss = POISON;
        if (weft_bg_stall_times(&p, 32, held[i].bytes, held[i].gap_us, &iss, &per) !=
                WEFT_SUCCESS ||
            weft_bg_issue_time(&p, 32, held[i].bytes, held[i].gap_us, &free_iss) != WEFT_SUCCESS) {
            CHECK(0, "seed %" PRIu64 ": prediction %zu failed: %s", seed, i, weft_last_error());
            return;
        }
        err[i] = fabs(iss - held[i].time_us) / held[i].time_us;
        worst = fmax(worst, err[i]);
        worst_free = fmax(worst_free, fabs(free_iss - held[i].time_us) / held[i].time_us);
    }
    qsort(err, nheld, sizeof err[0], compare_double);
    double median = err[nheld / 2];
    /* 1% noise on each measurement: most held-out points lie within 3% of their prediction.
     * The worst is the 4 MiB one, next to the knee (3.2 MB): with doubling volumes and 4 MiB held
     * out, the fit sees the knee only between 2 and 8 MiB, and its V_k and Q move by up to ~12%
     * (seen over 300 seeds; the bound leaves room). Without the stall term the model misses
     * the bursts above the knee by 35% (4 MiB) to 70% (32 MiB): the check tells them apart. */
    CHECK(nheld == 15 && median <= 0.03 && worst <= 0.2 && worst_free >= 0.3,
          "seed %" PRIu64 ": %zu held-out points, relative error median %.4f (at most 0.03), "
          "worst %.4f (at most 0.2), capacity-free worst %.4f (at least 0.3)",
          seed, nheld, median, worst, worst_free);
    printf("test_burst_gap_check: %zu held-out points, relative error median %.4f, worst %.4f "
           "(capacity-free worst %.4f)\n",
           nheld, median, worst, worst_free);
}

int main(int argc, char **argv)
{
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : (uint64_t)time(NULL);
    printf("test_burst_gap_check: seed %" PRIu64 "\n", seed);
    test_golden_stall();
    test_random_stall(seed);
    test_fluid(seed);
    test_fit_row();
    test_holdout(seed);
    if (failures != 0)
        printf("test_burst_gap_check: %d checks failed\n", failures);
    return failures != 0;
}
