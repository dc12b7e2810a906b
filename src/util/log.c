/*
 * log.c - logging and weft_last_error().
 *
 * Thread safety: the last-error buffer is thread-local; the rank prefix is an atomic; each log
 * line is written with one fprintf call so lines from threads do not interleave.
 */
#include "util/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "util/config.h"

/* The number of statuses (they are 0, 1, ... in the order of WEFT_STATUS_MAP). */
#define WEFT_STATUS_ONE_(name, text) +1
enum { STATUS_COUNT = 0 WEFT_STATUS_MAP(WEFT_STATUS_ONE_) };
#undef WEFT_STATUS_ONE_

static _Thread_local char last_error[WEFT_ERROR_TEXT_BYTES];
static _Thread_local int quiet[STATUS_COUNT]; /* weft_error_quiet_begin depth, per status */
static atomic_int log_rank = -1;

const char *weft_status_string(weft_status_t s)
{
    switch (s) {
#define WEFT_STATUS_CASE_(name, text)                                                              \
    case name:                                                                                     \
        return text;
        WEFT_STATUS_MAP(WEFT_STATUS_CASE_)
#undef WEFT_STATUS_CASE_
    }
    return "unknown status";
}

const char *weft_last_error(void)
{
    return last_error;
}

void weft_error_clear(void)
{
    last_error[0] = '\0';
}

void weft_error_restore(const char *text)
{
    snprintf(last_error, sizeof last_error, "%s", text);
}

void weft_error_quiet_begin(weft_status_t expected)
{
    if ((unsigned)expected < STATUS_COUNT)
        quiet[expected]++;
}

void weft_error_quiet_end(weft_status_t expected)
{
    if ((unsigned)expected < STATUS_COUNT)
        quiet[expected]--;
}

void weft_log_set_rank(int rank)
{
    atomic_store(&log_rank, rank);
}

static void log_line(weft_log_level_t level, const char *msg)
{
    static const char *const names[] = {"", "ERROR", "WARN", "INFO", "DEBUG"};
    if ((int)level > weft_config_get()->log_level)
        return;
    int rank = atomic_load(&log_rank);
    if (rank >= 0)
        fprintf(stderr, "weft[%d] %s: %s\n", rank, names[level], msg);
    else
        fprintf(stderr, "weft %s: %s\n", names[level], msg);
}

void weft_log(weft_log_level_t level, const char *fmt, ...)
{
    char msg[WEFT_ERROR_TEXT_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_line(level, msg);
}

static weft_status_t record(weft_status_t status, int err, const char *fmt, va_list ap)
{
    int n = vsnprintf(last_error, sizeof last_error, fmt, ap);
    if (err != 0 && n >= 0 && (size_t)n < sizeof last_error)
        snprintf(last_error + n, sizeof last_error - (size_t)n, ": %s", strerror(err));
    int expected = (unsigned)status < STATUS_COUNT && quiet[status] > 0;
    log_line(expected                              ? WEFT_LOG_DEBUG
             : status == WEFT_ERR_INVALID_ARGUMENT ? WEFT_LOG_INFO
                                                   : WEFT_LOG_ERROR,
             last_error);
    return status;
}

weft_status_t weft_error(weft_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(status, 0, fmt, ap);
    va_end(ap);
    return status;
}

weft_status_t weft_error_prefix(weft_status_t status, const char *call)
{
    size_t n = strlen(call), len = strlen(last_error);
    if (strncmp(last_error, call, n) == 0 && last_error[n] == ':')
        return status;
    if (len == 0) {
        snprintf(last_error, sizeof last_error, "%s: %s", call, weft_status_string(status));
        return status;
    }
    size_t head = n + 2; /* "<call>: " */
    if (head >= sizeof last_error)
        return status;
    size_t keep = len < sizeof last_error - 1 - head ? len : sizeof last_error - 1 - head;
    memmove(last_error + head, last_error, keep);
    last_error[head + keep] = '\0';
    memcpy(last_error, call, n);
    last_error[n] = ':';
    last_error[n + 1] = ' ';
    return status;
}

weft_status_t weft_error_errno(weft_status_t status, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(status, err, fmt, ap);
    va_end(ap);
    return status;
}
