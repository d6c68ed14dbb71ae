/*
 * fnv_collide — what an attacker computes offline against an unkeyed
 * FNV-1a table (the hybrid table before issue 24): a Joux multicollision.
 *
 *   fnv_collide PREFIX BITS STAGES
 *
 * prints STAGES lines "A B": two 8-byte blocks (of [A-Za-z0-9_-], bytes an
 * identity keeps as they are in a key) per stage.  Every key
 * PREFIX + (A or B of stage 1) + ... + (A or B of the last) + SUFFIX has
 * the same low BITS bits of FNV-1a state before SUFFIX, and so after it:
 * the low bits of a product and of a XOR depend only on the low bits of
 * their operands.  2^STAGES keys, one bucket of any table indexed by those
 * bits (the old hybrid table's h ^ h >> 29 reads bits 0..13 and 29..42 of
 * h for its 16,384 buckets: 43 bits).
 *
 * Each stage is a birthday search: about sqrt(pi/2 x 2^BITS) blocks (3.7
 * million for 43 bits) into a table of block numbers indexed by the state's
 * low bits.  Used by tests/integration/test_hybrid.py.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 8
#define FNV_INIT 14695981039346656037ULL
#define FNV_PRIME 1099511628211ULL

static const char alphabet[] =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_";

static uint64_t
fnv(uint64_t h, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= FNV_PRIME;
    }
    return h;
}

/* Block number i as 8 characters, every one of them depending on i: two
 * blocks that share a tail collide only where their heads do (the map of
 * one more byte is a bijection on the low bits), so a counter's digits
 * would find nothing. */
static void
block(uint64_t i, char out[BLOCK])
{
    uint64_t z = i * 0x9e3779b97f4a7c15ULL;

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    for (int k = 0; k < BLOCK; k++, z >>= 6)
        out[k] = alphabet[z & 63];
}

int
main(int argc, char **argv)
{
    int bits, stages, tbits;
    uint64_t mask, h, i, salt = 0;
    uint32_t *table;
    size_t slots;

    if (argc != 4 || (bits = atoi(argv[2])) < 8 || bits > 56 || (stages = atoi(argv[3])) < 1 ||
        stages > 24) {
        fprintf(stderr, "usage: fnv_collide PREFIX BITS(8..56) STAGES(1..24)\n");
        return 2;
    }
    mask = bits == 64 ? ~0ULL : (1ULL << bits) - 1;
    /* twice the expected draws, at most 2^25 slots */
    tbits = bits / 2 + 2 < 25 ? bits / 2 + 2 : 25;
    slots = (size_t)1 << tbits;
    table = malloc(slots * sizeof(*table));
    if (table == NULL) {
        fprintf(stderr, "fnv_collide: out of memory\n");
        return 1;
    }
    h = fnv(FNV_INIT, argv[1], strlen(argv[1]));
    for (int s = 0; s < stages; s++) {
        char a[BLOCK], b[BLOCK];
        int found = 0;

        memset(table, 0, slots * sizeof(*table));
        /* block numbers 1..slots-1 from a fresh range per stage */
        for (i = 1; i < slots && !found; i++) {
            uint64_t v, slot;

            block(salt + i, b);
            v = fnv(h, b, BLOCK) & mask;
            for (slot = v & (slots - 1); table[slot] != 0; slot = (slot + 1) & (slots - 1)) {
                block(salt + table[slot], a);
                if ((fnv(h, a, BLOCK) & mask) == v) {
                    found = 1;
                    break;
                }
            }
            if (!found)
                table[slot] = (uint32_t)i;
        }
        if (!found) {
            s--; /* unlucky: another range */
            salt += slots;
            continue;
        }
        salt += slots;
        printf("%.*s %.*s\n", BLOCK, a, BLOCK, b);
        h = fnv(h, a, BLOCK);
    }
    free(table);
    return 0;
}
