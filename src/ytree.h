/*
 * ytree.h — one YAML document read from libyaml's events into a compact
 * tree of what a loader keeps, with its bounds applied as the events arrive.
 *
 * Why not libyaml's document API: it loads a whole document before anyone
 * can look at it (a flow sequence nested 200,000 deep took minutes: libyaml's
 * scanner does work per open level for every token), and it costs ~10 times
 * the file's bytes.  Here nesting past `depth` stops the read at the event
 * that passes it, the value of a mapping key the loader says it does not
 * read (metadata) is skipped without being kept, and aliases share the node they name while each counts the nodes it
 * stands for against `nodes`, so a walk of the tree is bounded too.
 *
 * A node is 16 bytes; scalars are NUL-terminated in one buffer.  The tree
 * knows nothing of what it holds (rls_rules.c walks it), and only
 * ytree_read knows libyaml.
 */
#ifndef RL_YTREE_H
#define RL_YTREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rl.h"

struct yaml_parser_s;

enum ytree_kind {
    YT_SCALAR,
    YT_SEQ,
    YT_MAP,
    YT_SKIPPED /* a value the loader does not read: only where it was */
};

struct ynode {
    uint8_t kind;  /* enum ytree_kind */
    uint8_t plain; /* a plain scalar (not quoted, not a block) */
    uint32_t line; /* 1-based, where it starts */
    uint32_t n;    /* scalar: its bytes; sequence: items; mapping: pairs */
    uint32_t at;   /* scalar: offset in text; sequence, mapping: in kids */
};

struct ytree_anchor;

struct ytree {
    struct ynode *nodes;
    size_t nnodes, capnodes;
    uint32_t *kids; /* a container's children, contiguous: key, value, ... */
    size_t nkids, capkids;
    char *text;
    size_t ntext, captext;
    bool has_root; /* false: the stream had no (further) document */
    uint32_t root;
    size_t expanded; /* nodes with every alias counted as what it names */
    /* anchors of the document being read (a hash of their names) */
    struct ytree_anchor *anchors;
    size_t nanchors, capanchors;
    uint32_t *slots;
    size_t nslots;
    /* mapping keys of a few bytes, kept once each: 1 + their offset in
     * text, hashed (a rule file repeats "key", "value", "unit" ...) */
    uint32_t *keys;
    size_t nkeys, nkeyslots;
};

struct ytree_bounds {
    size_t depth; /* nesting of sequences and mappings, skipped ones too */
    size_t nodes; /* nodes of the document, aliases expanded */
    /* whether the value of mapping key k (len bytes) is kept */
    bool (*keep)(const char *k, size_t len);
};

/*
 * The next document of the parser's stream into t (emptied first).  RL_OK:
 * t->has_root says whether there was one.  RL_ERR: *cause (the caller frees
 * it) says why and *line, *column (1-based) where; a bound passed is named
 * with its value.
 */
int ytree_read(struct yaml_parser_s *p, const struct ytree_bounds *b, struct ytree *t,
               char **cause, size_t *line, size_t *column) RL_WUR;
void ytree_free(struct ytree *t);

/*
 * A tree built by hand, as another source of the same document (a rule
 * set's xDS resource): ytree_clear, then nodes children first; their line
 * is 0 (no file has them).  A scalar's bytes are copied (a short plain one
 * once for the tree); plain says whether it reads as YAML's plain scalars
 * do (a key, a number, a boolean) or as a string written quoted.  A
 * container takes its n children (a mapping: key, value, ...) from kids;
 * ytree_set_root names the document.
 */
void ytree_clear(struct ytree *t);
uint32_t ytree_add_scalar(struct ytree *t, const char *s, size_t len, bool plain);
uint32_t ytree_add_container(struct ytree *t, enum ytree_kind kind, const uint32_t *kids,
                             size_t n);
void ytree_set_root(struct ytree *t, uint32_t node);

static inline const struct ynode *
ytree_node(const struct ytree *t, uint32_t i)
{
    return &t->nodes[i];
}

/* Child i of a sequence; key (0) or value (1) of a mapping's pair i. */
static inline const struct ynode *
ytree_item(const struct ytree *t, const struct ynode *n, size_t i)
{
    return &t->nodes[t->kids[n->at + i]];
}

static inline const struct ynode *
ytree_pair(const struct ytree *t, const struct ynode *n, size_t i, int value)
{
    return &t->nodes[t->kids[n->at + 2 * i + (size_t)value]];
}

/* A scalar's bytes, NUL-terminated (n->n of them). */
static inline const char *
ytree_str(const struct ytree *t, const struct ynode *n)
{
    return t->text + n->at;
}

#endif
