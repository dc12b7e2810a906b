/*
 * mp_invalid.c - argument checking at the API boundary.
 *
 * The table of bad calls of cases.h (mp_args_run_invalid), made by all ranks in lockstep: each
 * must return WEFT_ERR_INVALID_ARGUMENT at once with a weft_last_error() text that names the
 * function, write nothing (before each row the fixture's output buffer is poisoned and its input
 * buffer filled with fresh random bytes; after it the output must still be all poison and the
 * input unchanged, every byte of both), and leave the communicator usable: a valid all_reduce
 * right after each row must give the exact result. On the host backend the table includes the rows
 * that pass a stream (it must be NULL here), and its foreign pointer is malloc'd memory. Valid edge
 * cases must succeed (count 0 with NULL buffers, a 0-byte weft_malloc, weft_free(NULL)). Also the
 * local helpers: weft_comm_rank/size of NULL, weft_dtype_size, weft_status_string. Under each
 * registration mode.
 */
#include "cases.h"
#include "harness.h"

#include <stdint.h>
#include <string.h>

/* A valid all_reduce (int32 SUM) on the fixture buffers; checks the result exactly. */
static void valid_all_reduce(mp_ctx_t *ctx, const mp_args_fixture_t *f, const char *after)
{
    mp_case(ctx, "valid all_reduce after: %s", after);
    memset(f->reg2, 0xA5, MP_ARGS_ELEMS * 4);
    mp_red_fill(ctx, WEFT_INT32, WEFT_SUM, ctx->rank, 0, MP_ARGS_ELEMS, f->reg);
    weft_status_t st =
        weft_all_reduce(ctx->comm, f->reg, f->reg2, MP_ARGS_ELEMS, WEFT_INT32, WEFT_SUM, NULL);
    if (mp_ok(ctx, st, "weft_all_reduce"))
        mp_red_check_result(ctx, "recvbuf", f->reg2, WEFT_INT32, WEFT_SUM, 0, MP_ARGS_ELEMS);
}

/* Bytes of each of the fixture's weft_malloc buffers (cases.h). */
#define FIXTURE_BYTES (2 * MP_ARGS_ELEMS * 8)

/* What a row may not change: f->reg as the row found it. */
typedef struct rows_state {
    mp_ctx_t *ctx;
    unsigned char input[FIXTURE_BYTES];
} rows_state_t;

/* Before a row: fresh random bytes in f->reg (the rows' input, and their output where the
 * buffers overlap), kept in st->input, and poison in all of f->reg2 (the rows' output). */
static void arm_row(rows_state_t *st, const mp_args_fixture_t *f)
{
    mp_raw_fill(st->ctx, WEFT_UINT64, st->ctx->rank, 0, FIXTURE_BYTES / 8, f->reg);
    memcpy(st->input, f->reg, FIXTURE_BYTES);
    memset(f->reg2, 0xA5, FIXTURE_BYTES);
}

/* After a row: it wrote nothing, then the communicator still works; then arm the next row. */
static void after_row(void *arg, const mp_args_fixture_t *f, const char *what)
{
    rows_state_t *st = arg;
    mp_ctx_t *ctx = st->ctx;
    mp_check_poison(ctx, "f->reg2 (output) after the rejected call", f->reg2, FIXTURE_BYTES);
    const unsigned char *in = f->reg;
    size_t first = 0;
    while (first < FIXTURE_BYTES && in[first] == st->input[first])
        first++;
    mp_check(ctx, first == FIXTURE_BYTES,
             "f->reg (input) changed by the rejected call: byte %zu is 0x%02x, was 0x%02x", first,
             first < FIXTURE_BYTES ? in[first] : 0, first < FIXTURE_BYTES ? st->input[first] : 0);
    valid_all_reduce(ctx, f, what);
    arm_row(st, f);
}

/* Helpers that need no communicator. */
static void local_helpers(mp_ctx_t *ctx)
{
    mp_case(ctx, "local helpers");
    mp_check(ctx, weft_comm_rank(NULL) == -1, "weft_comm_rank(NULL) = %d, expected -1",
             weft_comm_rank(NULL));
    mp_check(ctx, weft_comm_size(NULL) == -1, "weft_comm_size(NULL) = %d, expected -1",
             weft_comm_size(NULL));
    for (int dt = 0; dt < WEFT_NUM_DTYPES; dt++)
        mp_check(ctx, weft_dtype_size((weft_dtype_t)dt) == mp_dtype_bytes((weft_dtype_t)dt),
                 "weft_dtype_size(%s) = %zu, expected %zu", mp_dtype_name((weft_dtype_t)dt),
                 weft_dtype_size((weft_dtype_t)dt), mp_dtype_bytes((weft_dtype_t)dt));
    mp_check(ctx, weft_dtype_size(MP_ARGS_BAD_DTYPE) == 0, "weft_dtype_size(42) = %zu, expected 0",
             weft_dtype_size(MP_ARGS_BAD_DTYPE));
    for (int s = WEFT_SUCCESS; s <= WEFT_ERR_INTERNAL; s++) {
        const char *text = weft_status_string((weft_status_t)s);
        mp_check(ctx, text && text[0] && strcmp(text, "unknown status") != 0,
                 "weft_status_string(%d) = \"%s\"", s, text ? text : "(null)");
        for (int t = WEFT_SUCCESS; t < s && text; t++)
            mp_check(ctx, strcmp(text, weft_status_string((weft_status_t)t)) != 0,
                     "weft_status_string(%d) == weft_status_string(%d) = \"%s\"", s, t, text);
    }
    const char *unknown = weft_status_string((weft_status_t)999);
    mp_check(ctx, unknown && strcmp(unknown, "unknown status") == 0,
             "weft_status_string(999) = \"%s\", expected \"unknown status\"",
             unknown ? unknown : "(null)");
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_invalid");
    local_helpers(&ctx);
    for (int reg = 0; reg < MP_NUM_REG_MODES; reg++) {
        mp_comm_open(&ctx, (weft_registration_t)reg);
        mp_args_fixture_t f;
        mp_args_fixture_create(&ctx, &f, NULL, (void *)(uintptr_t)0x1000);
        f.foreign[f.nforeign++] = (mp_args_foreign_t){f.plain, "weft_free of malloc'd memory"};
        valid_all_reduce(&ctx, &f, "communicator creation");
        rows_state_t st = {.ctx = &ctx};
        arm_row(&st, &f);
        mp_args_run_invalid(&ctx, &f, after_row, &st);
        mp_args_run_zero_counts(&ctx, &f);
        valid_all_reduce(&ctx, &f, "count 0 calls");
        mp_args_run_zero_malloc(&ctx);
        mp_args_fixture_destroy(&ctx, &f);
        mp_comm_close(&ctx);
    }
    return mp_finish(&ctx);
}
