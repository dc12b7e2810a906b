/*
 * check.h - the failure counter and CHECK of the unit tests.
 *
 * Each test is one translation unit and includes this once: `failures` is that test's own, and
 * its main returns failures != 0. A failed CHECK(cond, fmt, ...) prints
 * "FAIL <prefix><file>:<line>: <cond>: <message><trailer>" and flushes stdout (a test that dies
 * later still shows it); past CHECK_MAX_REPORTS failures they are only counted. A test may
 * define before the include:
 *   CHECK_PREFIX     a string expression printed first (e.g. which process of the test failed)
 *   CHECK_TRAILER()  what ends the line (default "\n"; e.g. weft's last error, then "\n")
 * Compiles as C and as C++. Single-threaded: only the test's main thread may CHECK.
 */
#ifndef WEFT_TESTS_UNIT_CHECK_H
#define WEFT_TESTS_UNIT_CHECK_H

#include <stdio.h>

#define CHECK_MAX_REPORTS 100

#ifndef CHECK_PREFIX
#define CHECK_PREFIX ""
#endif
#ifndef CHECK_TRAILER
#define CHECK_TRAILER() printf("\n")
#endif

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond) && ++failures <= CHECK_MAX_REPORTS) {                                          \
            printf("FAIL %s%s:%d: %s: ", CHECK_PREFIX, __FILE__, __LINE__, #cond);                 \
            printf(__VA_ARGS__);                                                                   \
            CHECK_TRAILER();                                                                       \
            fflush(stdout);                                                                        \
        }                                                                                          \
    } while (0)

#endif /* WEFT_TESTS_UNIT_CHECK_H */
