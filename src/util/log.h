/*
 * log.h - logging and the thread-local last-error text.
 *
 * Errors are logged once, where they are first seen, by weft_error(), which also fills
 * weft_last_error() for the calling thread. Callers only propagate the returned status.
 * Logging goes to stderr, prefixed with "weft[rank]", filtered by WEFT_LOG_LEVEL.
 */
#ifndef WEFT_UTIL_LOG_H
#define WEFT_UTIL_LOG_H

#include "weft.h"

typedef enum {
    WEFT_LOG_NONE = 0,
    WEFT_LOG_ERROR = 1,
    WEFT_LOG_WARN = 2,
    WEFT_LOG_INFO = 3,
    WEFT_LOG_DEBUG = 4
} weft_log_level_t;

#define WEFT_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* Set the rank printed in log prefixes of this process (-1: none). Thread-safe. */
void weft_log_set_rank(int rank);

/* Print a message at the given level if WEFT_LOG_LEVEL admits it. Thread-safe. */
void weft_log(weft_log_level_t level, const char *fmt, ...) WEFT_PRINTF(2, 3);

/* Record an error: format the message into this thread's weft_last_error() buffer, log it at
 * ERROR level (INFO for WEFT_ERR_INVALID_ARGUMENT, which the caller handles), and return status.
 * The message should name the call and the argument, e.g. "weft_all_reduce: dtype 42 is unknown".
 */
weft_status_t weft_error(weft_status_t status, const char *fmt, ...) WEFT_PRINTF(2, 3);

/* Like weft_error, appending ": <strerror(err)>" to the message. */
weft_status_t weft_error_errno(weft_status_t status, int err, const char *fmt, ...)
    WEFT_PRINTF(3, 4);

/* Make this thread's last-error text start with "<call>: ", keeping the text that was there (an
 * inner function's message, e.g. "weft_partition: cannot allocate 512 units") after it, truncated
 * to fit. For the public call, where an error raised by an internal function that does not know
 * it reaches it. A text that already starts with "<call>:" is left as it is; an empty one becomes
 * "<call>: <weft_status_string(status)>". Logs nothing (the error was logged where it was first
 * seen). Returns status. (weft_error(status, "%s: %s", call, weft_last_error()) would format the
 * buffer into itself.) */
weft_status_t weft_error_prefix(weft_status_t status, const char *call);

/* The size of this thread's last-error text, its terminating NUL included. */
#define WEFT_ERROR_TEXT_BYTES 512

/* Clear this thread's last-error text (called at the start of every public call). */
void weft_error_clear(void);

/* Set this thread's last-error text back to text (saved from weft_last_error() before an
 * attempt whose expected failure a fallback made good), truncated to fit. Logs nothing. */
void weft_error_restore(const char *text);

/* Errors the calling thread expects and recovers from (a first attempt that has a fallback for
 * one kind of failure): between weft_error_quiet_begin(expected) and the matching
 * weft_error_quiet_end(expected), weft_error (and weft_error_errno) with status `expected` still
 * fills weft_last_error() but logs at DEBUG. Any other status is logged as usual: the fallback
 * does not cover it, and the caller returns it. Pairs nest, also with different statuses. */
void weft_error_quiet_begin(weft_status_t expected);
void weft_error_quiet_end(weft_status_t expected);

#define WEFT_LOG_ERR(...) weft_log(WEFT_LOG_ERROR, __VA_ARGS__)
#define WEFT_LOG_WARN(...) weft_log(WEFT_LOG_WARN, __VA_ARGS__)
#define WEFT_LOG_INFO(...) weft_log(WEFT_LOG_INFO, __VA_ARGS__)
#define WEFT_LOG_DEBUG(...) weft_log(WEFT_LOG_DEBUG, __VA_ARGS__)

#endif /* WEFT_UTIL_LOG_H */
