/*
 * bufpool.h — the daemon-wide pool of request bytes: what both listeners
 * buffer for requests still coming in, every worker together, bounded by
 * http.max_buffered.  The HTTP/1.1 layer (http.c) counts a connection's
 * buffer past its first 4 KiB, the gRPC listener (grpc.c) a message's
 * buffer past the 512 bytes its call holds inline.
 *
 * A request buffer grows as bytes arrive (bufpool_next_cap), never to a
 * length the client only announced; what it grows by is taken from the
 * pool first, and a buffer the pool cannot grow refuses its request (HTTP
 * 503, gRPC RESOURCE_EXHAUSTED) instead of allocating past the bound.
 *
 * Relaxed atomics: any thread, no lock.  The count never passes the bound
 * (a take that would is undone).
 */
#ifndef RL_BUFPOOL_H
#define RL_BUFPOOL_H

#include <stddef.h>
#include <stdint.h>

#include "rl.h"

/*
 * The next capacity of a buffer of `cap` bytes (> 0) that must hold `need`:
 * double, but never past `most` (what the request needs in all when it is
 * known, 0 when not) and never below `need`.  Pure.
 */
size_t bufpool_next_cap(size_t cap, size_t need, size_t most);

/* n more bytes buffered, when that keeps the pool within `max`; RL_ERR
 * (nothing taken) when it would not. */
int bufpool_take(int64_t n, int64_t max) RL_WUR;
/* n bytes taken before are freed. */
void bufpool_give(int64_t n);
/* n bytes outside the pool were freed too (a closed connection's own
 * memory): counted towards the next bufpool_trim. */
void bufpool_freed(int64_t n);
/* Bytes in the pool now (for /metrics). */
int64_t bufpool_bytes(void);

/* From each listener's periodic sweep: after a flood, what was freed goes
 * back to the system (malloc_trim), at most once a second. */
void bufpool_trim(int64_t now_ms);

/* A request of `listener` ("http", "rls") was refused because the pool is
 * at `max`: a warning, at most one every few seconds with the count since
 * the last one. */
void bufpool_refused(const char *listener, int64_t max);

#endif
