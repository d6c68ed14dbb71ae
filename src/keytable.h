/*
 * keytable.h — the hash table of every in-process table whose entries are
 * named by bytes a caller chooses (a check's key): the hybrid table, the
 * memory backend's shards; and the keyed hash the deny cache indexes by.
 *
 * Keyed.  A caller picks its identity, so it can pick identities whose hash
 * collides when the hash is public: with FNV-1a, 16,384 crafted keys in one
 * chain made every check walk them all (issue 24).  keytable_hash() is
 * SipHash-2-4 under a key drawn at random once per process (getrandom), so
 * nobody outside the process can aim at a chain: colliding keys would have
 * to be found by asking the daemon, and a chain only costs what a random
 * set of keys costs.
 *
 * Chained and intrusive.  The node lives inside the caller's entry, and
 * entries never move: other structures point at them (the hybrid table's
 * LRU and dirty lists and its syncs in flight, the memory backend's expiry
 * heap), and removal needs no tombstone.  The bucket array doubles when the
 * table holds more entries than buckets (load factor at most 1), so a chain
 * is one node on average; it never shrinks (the callers bound their
 * entries).
 *
 * No locking: the memory backend locks a shard around its table, the
 * hybrid table is one worker's.
 */
#ifndef RL_KEYTABLE_H
#define RL_KEYTABLE_H

#include <stddef.h>
#include <stdint.h>

#include "rl.h"

struct rl_kt_node {
    struct rl_kt_node *next;
    uint64_t hash;
};

struct rl_keytable {
    struct rl_kt_node **buckets;
    size_t mask; /* buckets - 1, a power of two minus one */
    size_t n;    /* entries */
    /* nodes looked at by lookups (keytable_first/next): the work a set of
     * keys costs, for tests; wraps, never read on the hot path */
    uint64_t probes;
};

/* The entry of type `type` whose member `member` is node n. */
#define KEYTABLE_ENTRY(n, type, member) ((type *)(void *)((char *)(n)-offsetof(type, member)))

/* SipHash-2-4 of key under this process's random key. */
uint64_t keytable_hash(const void *key, size_t len);
/* The same, under a key varied by `salt` (the deny cache's policy uid):
 * one salt's hashes tell nothing about another's. */
uint64_t keytable_hash_salted(uint64_t salt, const void *key, size_t len);

/* An empty table of at least `buckets` buckets (rounded up to a power of
 * two, at least 16). */
void keytable_init(struct rl_keytable *t, size_t buckets);
/* Frees the bucket array only: the entries are the caller's. */
void keytable_destroy(struct rl_keytable *t);

/*
 * The entries whose hash is `hash`, the first then each next (NULL: no
 * more); the caller compares its own key.  Usually one, rarely two.
 *
 *     for (n = keytable_first(t, h); n != NULL; n = keytable_next(t, n, h))
 *         if (my_entry_matches(n)) ...
 */
struct rl_kt_node *keytable_first(struct rl_keytable *t, uint64_t hash);
struct rl_kt_node *keytable_next(struct rl_keytable *t, struct rl_kt_node *n, uint64_t hash);

/* Add n (not in the table) under hash; may grow the bucket array. */
void keytable_insert(struct rl_keytable *t, struct rl_kt_node *n, uint64_t hash);
/* Take n (in the table) out. */
void keytable_remove(struct rl_keytable *t, struct rl_kt_node *n);

#endif
