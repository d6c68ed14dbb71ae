/*
 * util.h — allocation with one failure policy (log and abort: a rate limiter
 * that cannot allocate a few bytes cannot do anything useful), and small
 * string helpers.
 */
#ifndef RL_UTIL_H
#define RL_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "rl.h"

void *xmalloc(size_t n) __attribute__((malloc));
void *xcalloc(size_t n, size_t size) __attribute__((malloc));
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s) __attribute__((malloc));
char *xstrndup(const char *s, size_t n) __attribute__((malloc));
char *xasprintf(const char *fmt, ...) RL_PRINTF(1, 2) __attribute__((malloc));
char *xvasprintf(const char *fmt, va_list ap) RL_PRINTF(1, 0);

/* CLOCK_MONOTONIC in microseconds. */
int64_t now_monotonic_us(void);

/* Case-insensitive ASCII comparison of the first n bytes. */
int str_ieq(const char *a, const char *b);

#endif
