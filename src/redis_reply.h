/*
 * redis_reply.h — hiredis reply objects in blocks their root owns.
 *
 * hiredis builds a reply of one object per element, each its own calloc and
 * free: 65 of each for a batch of 16 checks (what they cost:
 * docs/BENCHMARKS.md, "Measurements behind the code").  These reader
 * functions put every object of one
 * reply in blocks owned by its root, freed together with it.  A reply must
 * then be freed only whole, by its reader (as hiredis's async API does after
 * each callback), never element by element nor with freeReplyObject().
 */
#ifndef RL_REDIS_REPLY_H
#define RL_REDIS_REPLY_H

#include <hiredis/read.h>

/* Build r's replies this way from now on. */
void redis_reply_attach(redisReader *r);

#endif
