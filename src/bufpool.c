/*
 * bufpool.c — see bufpool.h.
 */
#include <malloc.h>
#include <stdint.h>

#include "bufpool.h"
#include "log.h"
#include "util.h"

/* Bytes freed after which their memory is handed back to the system
 * (malloc_trim), at most once a TRIM_EVERY_MS. */
#define TRIM_FREED_MIN (4 * 1024 * 1024)
#define TRIM_EVERY_MS 1000
/* A full pool is told once, then at most once per this while it goes on. */
#define REFUSED_LOG_EVERY_MS 10000

static int64_t pool_bytes;
static int64_t freed_since_trim;
static int64_t last_trim_ms;
static uint64_t refused_unlogged;
static int64_t last_refused_log_ms; /* 0: never */

size_t
bufpool_next_cap(size_t cap, size_t need, size_t most)
{
    size_t next = cap * 2;

    if (most > 0 && next > most)
        next = most;
    return next < need ? need : next;
}

int
bufpool_take(int64_t n, int64_t max)
{
    if (__atomic_add_fetch(&pool_bytes, n, __ATOMIC_RELAXED) <= max)
        return RL_OK;
    __atomic_sub_fetch(&pool_bytes, n, __ATOMIC_RELAXED);
    return RL_ERR;
}

void
bufpool_give(int64_t n)
{
    __atomic_sub_fetch(&pool_bytes, n, __ATOMIC_RELAXED);
    __atomic_add_fetch(&freed_since_trim, n, __ATOMIC_RELAXED);
}

void
bufpool_freed(int64_t n)
{
    __atomic_add_fetch(&freed_since_trim, n, __ATOMIC_RELAXED);
}

int64_t
bufpool_bytes(void)
{
    return __atomic_load_n(&pool_bytes, __ATOMIC_RELAXED);
}

/*
 * glibc keeps freed memory in its arenas (one per worker thread), where RSS
 * grew round after round (146 -> 255 MB over ten floods of 2,000 slow
 * bodies).  At most once a TRIM_EVERY_MS, after TRIM_FREED_MIN freed, or
 * once the flood is over (nothing buffered any more) whatever was freed
 * since the last trim: keep-alive checks of a few hundred bytes never trim.
 */
void
bufpool_trim(int64_t now_ms)
{
    int64_t last = __atomic_load_n(&last_trim_ms, __ATOMIC_RELAXED);
    int64_t freed = __atomic_load_n(&freed_since_trim, __ATOMIC_RELAXED);

    if (freed == 0 || (freed < TRIM_FREED_MIN && bufpool_bytes() > 0) ||
        now_ms - last < TRIM_EVERY_MS ||
        !__atomic_compare_exchange_n(&last_trim_ms, &last, now_ms, 0, __ATOMIC_RELAXED,
                                     __ATOMIC_RELAXED))
        return; /* not worth it yet, or another worker does it */
    __atomic_store_n(&freed_since_trim, 0, __ATOMIC_RELAXED);
    malloc_trim(0);
}

void
bufpool_refused(const char *listener, int64_t max)
{
    int64_t now = now_coarse_ms(), last;
    uint64_t n;

    __atomic_add_fetch(&refused_unlogged, 1, __ATOMIC_RELAXED);
    last = __atomic_load_n(&last_refused_log_ms, __ATOMIC_RELAXED);
    if ((last != 0 && now - last < REFUSED_LOG_EVERY_MS) ||
        !__atomic_compare_exchange_n(&last_refused_log_ms, &last, now, 0, __ATOMIC_RELAXED,
                                     __ATOMIC_RELAXED))
        return; /* told recently, or another worker tells it now */
    n = __atomic_exchange_n(&refused_unlogged, 0, __ATOMIC_RELAXED);
    log_warn(LOG_MSG("request buffers full (http.max_buffered): refusing requests"),
             LOG_S("listener", listener), LOG_I("max_buffered", max),
             LOG_I("buffered", bufpool_bytes()), LOG_U("refused", n));
}
