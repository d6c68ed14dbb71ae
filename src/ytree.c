/* ytree.c — see ytree.h. */
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "util.h"
#include "ytree.h"

struct ytree_anchor {
    char *name;
    uint32_t node;
    size_t size; /* nodes it stands for, aliases in it expanded */
};

/* An open sequence or mapping. */
struct frame {
    uint32_t node;
    size_t first;    /* its first child in the pending list */
    size_t expanded; /* t->expanded when it started */
    char *anchor;    /* owned; NULL: none */
};

struct reader {
    yaml_parser_t *p;
    const struct ytree_bounds *b;
    struct ytree *t;
    struct frame *frames;
    size_t nframes, capframes;
    uint32_t *pending; /* children of the open containers, in order */
    size_t npending, cappending;
    size_t skipping; /* levels open inside a skipped value; 0: none */
    uint32_t skip_line;
    char *cause;
    size_t line, column;
};

#define GROW(v, n, cap) \
    do { \
        if ((n) == (cap)) { \
            (cap) = (cap) ? 2 * (cap) : 64; \
            (v) = xrealloc((v), (cap) * sizeof(*(v))); \
        } \
    } while (0)

static int
fail(struct reader *r, const yaml_mark_t *at, char *cause)
{
    r->cause = cause;
    r->line = at->line + 1;
    r->column = at->column + 1;
    return RL_ERR;
}

/* ---- anchors: names hashed to their index in t->anchors ----------------- */

static uint32_t *
anchor_slot(struct ytree *t, const char *name)
{
    size_t mask = t->nslots - 1;
    size_t i = (size_t)fnv1a(FNV1A_INIT, name, strlen(name)) & mask;

    while (t->slots[i] != 0 && strcmp(t->anchors[t->slots[i] - 1].name, name) != 0)
        i = (i + 1) & mask;
    return &t->slots[i];
}

static void
anchor_rehash(struct ytree *t)
{
    free(t->slots);
    t->nslots = t->nslots ? 2 * t->nslots : 64;
    t->slots = xcalloc(t->nslots, sizeof(*t->slots));
    for (size_t i = 0; i < t->nanchors; i++)
        *anchor_slot(t, t->anchors[i].name) = (uint32_t)i + 1;
}

/* A name given again names the later node, as YAML says. */
static void
anchor_add(struct ytree *t, char *name, uint32_t node, size_t size)
{
    uint32_t *slot;

    if (2 * (t->nanchors + 1) > t->nslots)
        anchor_rehash(t);
    slot = anchor_slot(t, name);
    if (*slot != 0) {
        free(name);
        t->anchors[*slot - 1].node = node;
        t->anchors[*slot - 1].size = size;
        return;
    }
    GROW(t->anchors, t->nanchors, t->capanchors);
    t->anchors[t->nanchors] = (struct ytree_anchor){name, node, size};
    *slot = (uint32_t)++t->nanchors;
}

static const struct ytree_anchor *
anchor_find(const struct ytree *t, const char *name)
{
    uint32_t s;

    if (t->nslots == 0)
        return NULL;
    s = *anchor_slot((struct ytree *)t, name);
    return s != 0 ? &t->anchors[s - 1] : NULL;
}

static void
anchors_clear(struct ytree *t)
{
    for (size_t i = 0; i < t->nanchors; i++)
        free(t->anchors[i].name);
    t->nanchors = 0;
    if (t->slots != NULL)
        memset(t->slots, 0, t->nslots * sizeof(*t->slots));
}

/* ---- building ------------------------------------------------------------- */

static uint32_t
new_node(struct ytree *t, enum ytree_kind kind, const yaml_mark_t *at)
{
    GROW(t->nodes, t->nnodes, t->capnodes);
    t->nodes[t->nnodes] = (struct ynode){.kind = (uint8_t)kind,
                                         .line = (uint32_t)at->line + 1};
    return (uint32_t)t->nnodes++;
}

static char *
take(yaml_char_t *s)
{
    return s != NULL ? xstrdup((const char *)s) : NULL;
}

/* A finished node (or an alias's) as the next child of the open container,
 * or as the root. */
static void
place(struct reader *r, uint32_t node)
{
    if (r->nframes == 0) {
        r->t->root = node;
        r->t->has_root = true;
        return;
    }
    GROW(r->pending, r->npending, r->cappending);
    r->pending[r->npending++] = node;
}

/* Counts one more node of the document, aliases expanded. */
static int
count(struct reader *r, size_t n, const yaml_mark_t *at)
{
    r->t->expanded += n;
    if (r->t->expanded > r->b->nodes)
        return fail(r, at,
                    xasprintf("the YAML has more than %zu nodes (aliases counted as what they "
                              "name)",
                              r->b->nodes));
    return RL_OK;
}

/* Whether the next event is the value of a mapping key the loader does not
 * read. */
static bool
value_skipped(const struct reader *r)
{
    const struct frame *f;
    const struct ynode *k;

    if (r->nframes == 0)
        return false;
    f = &r->frames[r->nframes - 1];
    if (r->t->nodes[f->node].kind != YT_MAP || (r->npending - f->first) % 2 == 0)
        return false;
    k = &r->t->nodes[r->pending[r->npending - 1]];
    return k->kind == YT_SCALAR && !r->b->keep(ytree_str(r->t, k), k->n);
}

static int
open_level(struct reader *r, const yaml_mark_t *at)
{
    if (r->nframes + r->skipping >= r->b->depth)
        return fail(r, at,
                    xasprintf("the YAML is nested deeper than %zu levels", r->b->depth));
    return RL_OK;
}

/* ---- text: scalars NUL-terminated, short mapping keys once ------------- */

#define KEY_INTERN_MAX 32

static uint32_t *
key_slot(const struct ytree *t, const char *s, size_t len)
{
    size_t mask = t->nkeyslots - 1;
    size_t i = (size_t)fnv1a(FNV1A_INIT, s, len) & mask;

    while (t->keys[i] != 0) {
        const char *k = t->text + t->keys[i] - 1;
        if (strlen(k) == len && memcmp(k, s, len) == 0)
            break;
        i = (i + 1) & mask;
    }
    return &t->keys[i];
}

static void
keys_rehash(struct ytree *t)
{
    uint32_t *old = t->keys;
    size_t nold = t->nkeyslots;

    t->nkeyslots = t->nkeyslots ? 2 * t->nkeyslots : 64;
    t->keys = xcalloc(t->nkeyslots, sizeof(*t->keys));
    for (size_t i = 0; i < nold; i++)
        if (old[i] != 0)
            *key_slot(t, t->text + old[i] - 1, strlen(t->text + old[i] - 1)) = old[i];
    free(old);
}

/* The offset in text of len bytes of s, NUL-terminated: a short key (with
 * no NUL in it) found there already is not added again. */
static uint32_t
add_text(struct ytree *t, const char *s, size_t len, bool key)
{
    uint32_t *slot = NULL, at;

    key = key && len <= KEY_INTERN_MAX && memchr(s, '\0', len) == NULL;
    if (key) {
        if (2 * (t->nkeys + 1) > t->nkeyslots)
            keys_rehash(t);
        slot = key_slot(t, s, len);
        if (*slot != 0)
            return *slot - 1;
    }
    while (t->ntext + len + 1 > t->captext) {
        t->captext = t->captext ? 2 * t->captext : 4096;
        t->text = xrealloc(t->text, t->captext);
    }
    memcpy(t->text + t->ntext, s, len);
    t->text[t->ntext + len] = '\0';
    at = (uint32_t)t->ntext;
    t->ntext += len + 1;
    if (slot != NULL) {
        *slot = at + 1;
        t->nkeys++;
    }
    return at;
}

/* Whether the next node is a mapping's key. */
static bool
at_key(const struct reader *r)
{
    const struct frame *f = r->nframes > 0 ? &r->frames[r->nframes - 1] : NULL;

    return f != NULL && r->t->nodes[f->node].kind == YT_MAP &&
           (r->npending - f->first) % 2 == 0;
}

static int
scalar(struct reader *r, yaml_event_t *e)
{
    struct ytree *t = r->t;
    size_t len = e->data.scalar.length;
    uint32_t n;

    if (count(r, 1, &e->start_mark) != RL_OK)
        return RL_ERR;
    n = new_node(t, YT_SCALAR, &e->start_mark);
    t->nodes[n].at = add_text(t, (const char *)e->data.scalar.value, len, at_key(r));
    t->nodes[n].n = (uint32_t)len;
    t->nodes[n].plain = e->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    if (e->data.scalar.anchor != NULL)
        anchor_add(t, take(e->data.scalar.anchor), n, 1);
    place(r, n);
    return RL_OK;
}

static int
alias(struct reader *r, yaml_event_t *e)
{
    const struct ytree_anchor *a = anchor_find(r->t, (const char *)e->data.alias.anchor);

    if (a == NULL)
        return fail(r, &e->start_mark,
                    xasprintf("alias *%s names no anchor before it (or one in a skipped "
                              "value)",
                              (const char *)e->data.alias.anchor));
    if (count(r, a->size, &e->start_mark) != RL_OK)
        return RL_ERR;
    place(r, a->node);
    return RL_OK;
}

static int
start(struct reader *r, yaml_event_t *e, enum ytree_kind kind, yaml_char_t *anchor)
{
    struct frame *f;

    if (open_level(r, &e->start_mark) != RL_OK || count(r, 1, &e->start_mark) != RL_OK)
        return RL_ERR;
    GROW(r->frames, r->nframes, r->capframes);
    f = &r->frames[r->nframes++];
    f->node = new_node(r->t, kind, &e->start_mark);
    f->first = r->npending;
    f->expanded = r->t->expanded - 1;
    f->anchor = take(anchor);
    return RL_OK;
}

/* The open container is complete: its children move to kids. */
static void
end(struct reader *r)
{
    struct ytree *t = r->t;
    struct frame f = r->frames[--r->nframes];
    size_t n = r->npending - f.first;
    struct ynode *node = &t->nodes[f.node];

    while (t->nkids + n > t->capkids) {
        t->capkids = t->capkids ? 2 * t->capkids : 256;
        t->kids = xrealloc(t->kids, t->capkids * sizeof(*t->kids));
    }
    if (n > 0)
        memcpy(t->kids + t->nkids, r->pending + f.first, n * sizeof(*t->kids));
    node->at = (uint32_t)t->nkids;
    node->n = (uint32_t)(node->kind == YT_MAP ? n / 2 : n);
    t->nkids += n;
    r->npending = f.first;
    if (f.anchor != NULL)
        anchor_add(t, f.anchor, f.node, t->expanded - f.expanded);
    place(r, f.node);
}

/* An event inside (or starting) a skipped value: only its nesting is
 * followed, and bounded. */
static int
skip(struct reader *r, yaml_event_t *e)
{
    uint32_t n;

    if (r->skipping == 0)
        r->skip_line = (uint32_t)e->start_mark.line + 1;
    if (e->type == YAML_SEQUENCE_START_EVENT || e->type == YAML_MAPPING_START_EVENT) {
        if (open_level(r, &e->start_mark) != RL_OK)
            return RL_ERR;
        r->skipping++;
    } else if (e->type == YAML_SEQUENCE_END_EVENT || e->type == YAML_MAPPING_END_EVENT) {
        r->skipping--;
    }
    if (r->skipping > 0)
        return RL_OK;
    if (count(r, 1, &e->start_mark) != RL_OK)
        return RL_ERR;
    n = new_node(r->t, YT_SKIPPED, &e->start_mark);
    r->t->nodes[n].line = r->skip_line;
    place(r, n);
    return RL_OK;
}

/* One event of the document; *done once it has ended. */
static int
event(struct reader *r, yaml_event_t *e, bool *done)
{
    if (r->skipping > 0 || (value_skipped(r) && e->type != YAML_DOCUMENT_END_EVENT))
        return skip(r, e);
    switch (e->type) {
    case YAML_SCALAR_EVENT: return scalar(r, e);
    case YAML_ALIAS_EVENT: return alias(r, e);
    case YAML_SEQUENCE_START_EVENT: return start(r, e, YT_SEQ, e->data.sequence_start.anchor);
    case YAML_MAPPING_START_EVENT: return start(r, e, YT_MAP, e->data.mapping_start.anchor);
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT: end(r); return RL_OK;
    case YAML_DOCUMENT_END_EVENT:
    case YAML_STREAM_END_EVENT: *done = true; return RL_OK;
    default: /* stream and document starts */ return RL_OK;
    }
}

void
ytree_clear(struct ytree *t)
{
    t->nnodes = t->nkids = t->ntext = t->expanded = t->nkeys = 0;
    t->has_root = false;
    anchors_clear(t);
    if (t->keys != NULL)
        memset(t->keys, 0, t->nkeyslots * sizeof(*t->keys));
}

int
ytree_read(struct yaml_parser_s *p, const struct ytree_bounds *b, struct ytree *t,
           char **cause, size_t *line, size_t *column)
{
    struct reader r = {.p = p, .b = b, .t = t};
    bool done = false;
    int ok = RL_OK;

    ytree_clear(t);
    *cause = NULL;
    while (ok == RL_OK && !done) {
        yaml_event_t e;

        if (!yaml_parser_parse(p, &e)) {
            const yaml_mark_t *m = p->problem != NULL ? &p->problem_mark : &p->context_mark;
            ok = fail(&r, m,
                      xasprintf("not YAML: %s%s%s", p->problem ? p->problem : "cannot be read",
                                p->context ? " " : "", p->context ? p->context : ""));
            break;
        }
        ok = event(&r, &e, &done);
        yaml_event_delete(&e);
    }
    for (size_t i = 0; i < r.nframes; i++)
        free(r.frames[i].anchor);
    free(r.frames);
    free(r.pending);
    anchors_clear(t);
    if (ok != RL_OK) {
        *cause = r.cause;
        *line = r.line;
        *column = r.column;
    }
    return ok;
}

void
ytree_free(struct ytree *t)
{
    anchors_clear(t);
    free(t->anchors);
    free(t->slots);
    free(t->keys);
    free(t->nodes);
    free(t->kids);
    free(t->text);
    memset(t, 0, sizeof(*t));
}

/* ---- built by hand ---------------------------------------------------------- */

uint32_t
ytree_add_scalar(struct ytree *t, const char *s, size_t len, bool plain)
{
    uint32_t n;

    GROW(t->nodes, t->nnodes, t->capnodes);
    n = (uint32_t)t->nnodes++;
    t->nodes[n] = (struct ynode){.kind = YT_SCALAR, .plain = plain, .n = (uint32_t)len};
    /* plain ones are mapping keys, units, numbers: kept once each */
    t->nodes[n].at = add_text(t, s, len, plain);
    t->expanded++;
    return n;
}

uint32_t
ytree_add_container(struct ytree *t, enum ytree_kind kind, const uint32_t *kids, size_t n)
{
    uint32_t node;

    while (t->nkids + n > t->capkids) {
        t->capkids = t->capkids ? 2 * t->capkids : 256;
        t->kids = xrealloc(t->kids, t->capkids * sizeof(*t->kids));
    }
    if (n > 0)
        memcpy(t->kids + t->nkids, kids, n * sizeof(*kids));
    GROW(t->nodes, t->nnodes, t->capnodes);
    node = (uint32_t)t->nnodes++;
    t->nodes[node] = (struct ynode){.kind = (uint8_t)kind,
                                    .at = (uint32_t)t->nkids,
                                    .n = (uint32_t)(kind == YT_MAP ? n / 2 : n)};
    t->nkids += n;
    t->expanded++;
    return node;
}

void
ytree_set_root(struct ytree *t, uint32_t node)
{
    t->root = node;
    t->has_root = true;
}
