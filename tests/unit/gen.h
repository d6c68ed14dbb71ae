/*
 * gen.h — the generator of the unit tests that hold a hand-written codec to
 * a library's on thousands of generated inputs (check_grpc_head.c,
 * check_rls_codec.c): xorshift64, seeded per case so that a failing seed
 * names its input, and the same sequence on every machine.
 */
#ifndef RL_TESTS_UNIT_GEN_H
#define RL_TESTS_UNIT_GEN_H

#include <stdint.h>

struct gen {
    uint64_t s;
};

/* The seed's own state: a multiple of the golden ratio, never 0. */
static inline struct gen
gen_seeded(uint32_t seed)
{
    return (struct gen){0x9e3779b97f4a7c15ULL * seed};
}

static inline uint32_t
gen_next(struct gen *g)
{
    g->s ^= g->s << 13;
    g->s ^= g->s >> 7;
    g->s ^= g->s << 17;
    return (uint32_t)(g->s >> 16);
}

#endif
