/*
 * moe_ref.c - the reference model of MoE dispatch and combine (contracts in moe_ref.h).
 *
 * Design. moe_ref_create draws every rank's routing once (expert ids, weights and the bit mask
 * of destination ranks of every token) so that the checks, which walk every received row, look
 * the destinations up instead of drawing them again; the token rows themselves are never stored
 * but recomputed element by element from the hash (x_of), which keeps a case with thousands of
 * rows of 7168 elements cheap in memory. Zipf draws search the cumulative weights of the case.
 * The 16-bit conversions are written here, not taken from the library under test.
 *
 * Thread safety: none needed (see moe_ref.h).
 */
#include "moe_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Salts of the streams of random numbers a case draws (expert ids use the rank itself). */
#define SALT_WEIGHT 1000u
#define SALT_X 2000u
#define SALT_SCALE 3000u

/* Wrong values printed per check before the check only counts them. */
#define MAX_PRINTED 3

const char *moe_route_name(moe_route_t route)
{
    static const char *const names[MOE_NUM_ROUTES] = {"uniform", "zipf", "all_to_one", "masked"};
    return (unsigned)route < MOE_NUM_ROUTES ? names[route] : "route?";
}

/* ---------------------------------------------------------------------------------------------
 * Elements
 * ------------------------------------------------------------------------------------------- */
void moe_ref_store(void *buf, size_t i, weft_dtype_t dt, float v)
{
    if (dt == WEFT_FLOAT32) {
        memcpy((unsigned char *)buf + i * 4, &v, 4);
        return;
    }
    uint16_t b = dt == WEFT_BFLOAT16 ? mp_f32_to_bf16(v) : mp_f32_to_f16(v);
    memcpy((unsigned char *)buf + i * 2, &b, 2);
}

float moe_ref_fetch(const void *buf, size_t i, weft_dtype_t dt)
{
    if (dt == WEFT_FLOAT32) {
        float v;
        memcpy(&v, (const unsigned char *)buf + i * 4, 4);
        return v;
    }
    uint16_t b;
    memcpy(&b, (const unsigned char *)buf + i * 2, 2);
    return dt == WEFT_BFLOAT16 ? mp_bf16_to_f32(b) : mp_f16_to_f32(b);
}

/* v rounded to the dtype and back: what a buffer of that dtype holds after moe_ref_store. */
static float in_dtype(weft_dtype_t dt, float v)
{
    unsigned char b[4];
    moe_ref_store(b, 0, dt, v);
    return moe_ref_fetch(b, 0, dt);
}

static int64_t get_i64(const void *buf, size_t i)
{
    int64_t v;
    memcpy(&v, (const unsigned char *)buf + i * 8, 8);
    return v;
}

static float get_f32(const void *buf, size_t i)
{
    float v;
    memcpy(&v, (const unsigned char *)buf + i * 4, 4);
    return v;
}

/* ---------------------------------------------------------------------------------------------
 * Routing
 * ------------------------------------------------------------------------------------------- */

/* Expert of slot j of token t of rank r; cum: the cumulative Zipf weights (zipf routing). */
static int64_t draw_expert(const moe_ref_t *ref, const double *cum, int r, size_t t, int j)
{
    const moe_shape_t *s = &ref->shape;
    uint64_t h = mp_hash(ref->seed, ref->case_id, (uint64_t)r, t * (uint64_t)s->topk + (uint64_t)j);
    int E = s->experts;
    switch (s->route) {
    case MOE_ROUTE_ZIPF: {
        double u = (double)(h >> 11) / 9007199254740992.0 * cum[E - 1];
        int lo = 0, hi = E - 1; /* the first e with u < cum[e] */
        while (lo < hi) {
            int mid = lo + (hi - lo) / 2;
            if (u < cum[mid])
                hi = mid;
            else
                lo = mid + 1;
        }
        return lo;
    }
    case MOE_ROUTE_ALL_TO_ONE:
        return (int64_t)(ref->case_id % (uint64_t)ref->nranks) * ref->epr +
               (int64_t)(h % (uint64_t)ref->epr);
    case MOE_ROUTE_MASKED:
        if (t % 5 == 0 || h % 3 == 0)
            return -1;
        return (int64_t)((h >> 8) % (uint64_t)E);
    case MOE_ROUTE_UNIFORM:
        break;
    }
    return (int64_t)(h % (uint64_t)E);
}

static float draw_weight(const moe_ref_t *ref, int r, size_t t, int j)
{
    uint64_t h = mp_hash(ref->seed, ref->case_id, SALT_WEIGHT + (uint64_t)r, t * 64 + (uint64_t)j);
    return (float)(h % 16) / 8.0f;
}

float moe_ref_x(const moe_ref_t *ref, int r, size_t t, size_t e)
{
    uint64_t h = mp_hash(ref->seed ^ ref->x_round * 0x9e3779b97f4a7c15ull, ref->case_id,
                         SALT_X + (uint64_t)r, (t << 20) + e);
    return (float)(int)(h % 17) - 8.0f;
}

void moe_ref_create(mp_ctx_t *ctx, const moe_shape_t *shape, moe_ref_t *ref)
{
    int n = ctx->nranks;
    memset(ref, 0, sizeof *ref);
    if (n > MOE_MAX_RANKS || shape->experts < n || shape->experts % n != 0 || shape->topk < 1 ||
        shape->topk > shape->experts || shape->topk > 64 ||
        (shape->dt != WEFT_FLOAT32 && shape->dt != WEFT_FLOAT16 && shape->dt != WEFT_BFLOAT16))
        mp_fatal(ctx, "moe_ref_create: n=%d E=%d k=%d dtype %d is outside the model", n,
                 shape->experts, shape->topk, (int)shape->dt);
    ref->shape = *shape;
    ref->rank = ctx->rank;
    ref->nranks = n;
    ref->epr = shape->experts / n;
    ref->seed = ctx->seed;
    ref->case_id = ctx->case_id;
    int E = shape->experts, k = shape->topk;
    double *cum = malloc((size_t)E * sizeof *cum);
    if (!cum)
        mp_fatal(ctx, "moe_ref_create: out of memory");
    double total = 0;
    for (int e = 0; e < E; e++) {
        total += 1.0 / (e + 1);
        cum[e] = total;
    }
    for (int r = 0; r < n; r++) {
        size_t T = shape->tokens[r];
        /* One element more than needed, so that a rank without tokens has non-NULL arrays. */
        ref->idx[r] = malloc((T * (size_t)k + 1) * sizeof(int64_t));
        ref->w[r] = malloc((T * (size_t)k + 1) * sizeof(float));
        ref->dest[r] = calloc(T + 1, sizeof(uint64_t));
        if (!ref->idx[r] || !ref->w[r] || !ref->dest[r])
            mp_fatal(ctx, "moe_ref_create: out of memory");
        for (size_t t = 0; t < T; t++) {
            for (int j = 0; j < k; j++) {
                int64_t e = draw_expert(ref, cum, r, t, j);
                ref->idx[r][t * (size_t)k + (size_t)j] = e;
                ref->w[r][t * (size_t)k + (size_t)j] = draw_weight(ref, r, t, j);
                if (e >= 0)
                    ref->dest[r][t] |= (uint64_t)1 << (e / ref->epr);
            }
            for (int d = 0; d < n; d++)
                ref->recv[d] += (size_t)((ref->dest[r][t] >> d) & 1u);
        }
    }
    for (int d = 0; d < n; d++) {
        if (ref->recv[d] > ref->most || d == 0) {
            ref->most = ref->recv[d];
            ref->most_rank = d;
        }
    }
    free(cum);
}

void moe_ref_destroy(moe_ref_t *ref)
{
    for (int r = 0; r < MOE_MAX_RANKS; r++) {
        free(ref->idx[r]);
        free(ref->w[r]);
        free(ref->dest[r]);
    }
    memset(ref, 0, sizeof *ref);
}

int moe_ref_goes_to(const moe_ref_t *ref, int r, size_t t, int d)
{
    return (int)((ref->dest[r][t] >> d) & 1u);
}

/* ---------------------------------------------------------------------------------------------
 * Inputs
 * ------------------------------------------------------------------------------------------- */
void moe_ref_fill_inputs(const moe_ref_t *ref, void *x, void *topk_idx, void *topk_weights)
{
    const moe_shape_t *s = &ref->shape;
    int me = ref->rank;
    size_t T = s->tokens[me], H = s->hidden, slots = T * (size_t)s->topk;
    for (size_t t = 0; t < T; t++)
        for (size_t e = 0; e < H; e++)
            moe_ref_store(x, t * H + e, s->dt, moe_ref_x(ref, me, t, e));
    if (slots > 0 && topk_idx)
        memcpy(topk_idx, ref->idx[me], slots * sizeof(int64_t));
    if (slots > 0 && topk_weights)
        memcpy(topk_weights, ref->w[me], slots * sizeof(float));
}

void moe_ref_check_inputs(mp_ctx_t *ctx, const moe_ref_t *ref, const void *x, const void *topk_idx,
                          const void *topk_weights)
{
    const moe_shape_t *s = &ref->shape;
    int me = ref->rank;
    size_t T = s->tokens[me], H = s->hidden, slots = T * (size_t)s->topk, bad = 0;
    for (size_t i = 0; i < T * H; i++) {
        float want = in_dtype(s->dt, moe_ref_x(ref, me, i / H, i % H));
        float got = moe_ref_fetch(x, i, s->dt);
        if (got != want && bad++ == 0)
            mp_fail(ctx, "input x[%zu][%zu] changed to %g (was %g)", i / H, i % H, (double)got,
                    (double)want);
    }
    for (size_t i = 0; i < slots; i++) {
        int64_t got = get_i64(topk_idx, i);
        if (got != ref->idx[me][i] && bad++ == 0)
            mp_fail(ctx, "input topk_idx[%zu] changed to %lld (was %lld)", i, (long long)got,
                    (long long)ref->idx[me][i]);
        float gw = get_f32(topk_weights, i);
        if (gw != ref->w[me][i] && bad++ == 0)
            mp_fail(ctx, "input topk_weights[%zu] changed to %g (was %g)", i, (double)gw,
                    (double)ref->w[me][i]);
    }
    mp_check(ctx, bad == 0, "%zu input elements changed", bad);
}

/* The offset of rank d's y in a spread case (moe_ref.h). */
static float spread_offset(weft_dtype_t dt, int d)
{
    float L = dt == WEFT_FLOAT32 ? 1048576.0f : dt == WEFT_BFLOAT16 ? 65536.0f : 16384.0f;
    return d == 0 ? L : d == 2 ? -L : 0.0f;
}

float moe_ref_y(const moe_ref_t *ref, int d, int r, size_t t, size_t e)
{
    const moe_shape_t *s = &ref->shape;
    float v = moe_ref_x(ref, r, t, e) * (float)(d + 1);
    if (s->spread) {
        uint64_t h = mp_hash(ref->seed ^ ref->x_round, ref->case_id, SALT_SCALE + (uint64_t)r,
                             (t << 20) + e);
        v = v * ldexpf(1.0f, -(int)(2 + h % 11)) + spread_offset(s->dt, d);
    }
    return in_dtype(s->dt, v);
}

void moe_ref_fill_y(const moe_ref_t *ref, void *y)
{
    const moe_shape_t *s = &ref->shape;
    int me = ref->rank;
    size_t H = s->hidden, i = 0;
    for (int r = 0; r < ref->nranks; r++)
        for (size_t t = 0; t < s->tokens[r]; t++) {
            if (!moe_ref_goes_to(ref, r, t, me))
                continue;
            for (size_t e = 0; e < H; e++)
                moe_ref_store(y, i * H + e, s->dt, moe_ref_y(ref, me, r, t, e));
            i++;
        }
}

/* out[t][e] of this rank as combine must compute it: the y of the ranks that received the
 * token, summed in float32 in increasing rank order (decreasing with reversed), each partial
 * sum rounded to the dtype with stepwise (wrong but for float32), then rounded once. */
static float combined(const moe_ref_t *ref, size_t t, size_t e, int reversed, int stepwise)
{
    int me = ref->rank, n = ref->nranks;
    weft_dtype_t dt = ref->shape.dt;
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        int d = reversed ? n - 1 - i : i;
        if (!moe_ref_goes_to(ref, me, t, d))
            continue;
        sum += moe_ref_y(ref, d, me, t, e);
        if (stepwise)
            sum = in_dtype(dt, sum);
    }
    return in_dtype(dt, sum);
}

void moe_ref_spread_misses(const moe_ref_t *ref, size_t *reversed_out, size_t *stepwise_out)
{
    const moe_shape_t *s = &ref->shape;
    size_t T = s->tokens[ref->rank], H = s->hidden, rev = 0, step = 0;
    for (size_t t = 0; t < T; t++) {
        for (size_t e = 0; e < H; e++) {
            float want = combined(ref, t, e, 0, 0);
            rev += combined(ref, t, e, 1, 0) != want;
            step += combined(ref, t, e, 0, 1) != want;
        }
    }
    *reversed_out = rev;
    *stepwise_out = step;
}

/* ---------------------------------------------------------------------------------------------
 * Checks
 * ------------------------------------------------------------------------------------------- */
void moe_ref_check_dispatch(mp_ctx_t *ctx, const moe_ref_t *ref, int64_t num_recv,
                            const void *recv_x, const void *recv_topk_idx,
                            const void *recv_topk_weights, const void *recv_expert_counts,
                            size_t cap)
{
    const moe_shape_t *s = &ref->shape;
    int me = ref->rank, k = s->topk, epr = ref->epr;
    size_t H = s->hidden, need = ref->recv[me], es = mp_dtype_bytes(s->dt);
    mp_check(ctx, num_recv == (int64_t)need, "num_recv_tokens %lld, expected %zu",
             (long long)num_recv, need);
    /* Rows beyond what the call reported are not read (they are checked as poison below). */
    size_t rows = num_recv >= 0 && (uint64_t)num_recv < need ? (size_t)num_recv : need;
    int64_t *counts = calloc((size_t)epr, sizeof *counts);
    if (!counts)
        mp_fatal(ctx, "moe_ref_check_dispatch: out of memory");
    size_t i = 0, bad_x = 0, bad_slot = 0;
    for (int r = 0; r < ref->nranks; r++) {
        for (size_t t = 0; t < s->tokens[r]; t++) {
            if (!moe_ref_goes_to(ref, r, t, me))
                continue;
            for (size_t e = 0; e < H && i < rows; e++) {
                float want = in_dtype(s->dt, moe_ref_x(ref, r, t, e));
                float got = moe_ref_fetch(recv_x, i * H + e, s->dt);
                if (got != want && bad_x++ < MAX_PRINTED)
                    mp_fail(ctx, "recv_x[%zu][%zu] from rank %d token %zu: %g, expected %g", i, e,
                            r, t, (double)got, (double)want);
            }
            for (int j = 0; j < k; j++) {
                int64_t ex = ref->idx[r][t * (size_t)k + (size_t)j];
                int local = ex >= 0 && ex / epr == me;
                int64_t want_e = local ? ex - (int64_t)me * epr : -1;
                float want_w = local ? ref->w[r][t * (size_t)k + (size_t)j] : 0.0f;
                if (local)
                    counts[want_e]++;
                if (i >= rows || !recv_topk_idx || !recv_topk_weights)
                    continue;
                int64_t got_e = get_i64(recv_topk_idx, i * (size_t)k + (size_t)j);
                float got_w = get_f32(recv_topk_weights, i * (size_t)k + (size_t)j);
                if ((got_e != want_e || got_w != want_w) && bad_slot++ < MAX_PRINTED)
                    mp_fail(ctx,
                            "recv slot [%zu][%d] from rank %d token %zu: (%lld, %g), "
                            "expected (%lld, %g)",
                            i, j, r, t, (long long)got_e, (double)got_w, (long long)want_e,
                            (double)want_w);
            }
            i++;
        }
    }
    mp_check(ctx, bad_x == 0, "%zu wrong elements in recv_x", bad_x);
    mp_check(ctx, bad_slot == 0, "%zu wrong slots in recv_topk_idx / recv_topk_weights", bad_slot);
    for (int e = 0; e < epr && recv_expert_counts; e++) {
        int64_t got = get_i64(recv_expert_counts, (size_t)e);
        mp_check(ctx, got == counts[e], "recv_expert_counts[%d] = %lld, expected %lld", e,
                 (long long)got, (long long)counts[e]);
    }
    free(counts);
    if (cap > need) {
        size_t spare = cap - need;
        mp_check_poison(ctx, "recv_x past the received rows",
                        (const unsigned char *)recv_x + need * H * es, spare * H * es);
        if (recv_topk_idx)
            mp_check_poison(ctx, "recv_topk_idx past the received rows",
                            (const unsigned char *)recv_topk_idx + need * (size_t)k * 8,
                            spare * (size_t)k * 8);
        if (recv_topk_weights)
            mp_check_poison(ctx, "recv_topk_weights past the received rows",
                            (const unsigned char *)recv_topk_weights + need * (size_t)k * 4,
                            spare * (size_t)k * 4);
    }
}

void moe_ref_check_combine(mp_ctx_t *ctx, const moe_ref_t *ref, const void *out)
{
    const moe_shape_t *s = &ref->shape;
    int me = ref->rank;
    size_t T = s->tokens[me], H = s->hidden, bad = 0;
    for (size_t t = 0; t < T; t++) {
        for (size_t e = 0; e < H; e++) {
            float want = combined(ref, t, e, 0, 0), got = moe_ref_fetch(out, t * H + e, s->dt);
            if (got != want && bad++ < MAX_PRINTED)
                mp_fail(ctx, "out[%zu][%zu] = %.9g, expected %.9g (token sent to ranks 0x%llx)", t,
                        e, (double)got, (double)want, (unsigned long long)ref->dest[me][t]);
        }
    }
    mp_check(ctx, bad == 0, "%zu wrong combined values", bad);
}

/* ---- handles destroyed on another thread ----------------------------------------------------- */

static void *race_destroyer(void *arg)
{
    moe_race_t *race = arg;
    for (int i = 0; i < MOE_RACE_HANDLES; i++)
        race->st[i] = weft_moe_handle_destroy(race->h[i]);
    return NULL;
}

void moe_race_start(mp_ctx_t *ctx, moe_race_t *race)
{
    if (pthread_create(&race->thread, NULL, race_destroyer, race) != 0)
        mp_fatal(ctx, "pthread_create failed");
}

void moe_race_join(mp_ctx_t *ctx, moe_race_t *race)
{
    pthread_join(race->thread, NULL);
    for (int i = 0; i < MOE_RACE_HANDLES; i++)
        mp_check(ctx, race->st[i] == WEFT_SUCCESS, "weft_moe_handle_destroy %d on the thread: %s",
                 i, weft_status_string(race->st[i]));
}
