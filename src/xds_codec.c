/* xds_codec.c — see xds_codec.h. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "envoy/service/discovery/v3/discovery.pb-c.h"
#include "ratelimit/config/ratelimit/v3/rls_conf.pb-c.h"
#include "rls_rules.h"
#include "schema.h"
#include "util.h"
#include "xds_codec.h"
#include "ytree.h"

/* ---- nesting, bounded before protobuf-c recurses -------------------------- */

/*
 * protobuf-c's unpack recurses once per nested message with no bound of its
 * own: a resource of nested descriptors as deep as its bytes allow would
 * take the stack.  The wire is walked first (a loop per message, recursion
 * only into descriptors), and nesting past RLS_DEPTH_MAX + 1 is refused as
 * the rule files refuse it.  Malformed bytes are left to unpack to refuse.
 */
static bool
varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; *p < end && shift < 64; shift += 7) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if ((b & 0x80) == 0)
            return true;
    }
    return false;
}

/* The deepest descriptor nesting in a message (a RateLimitConfig when
 * field is 3, a RateLimitDescriptor when 4); stops past `limit`. */
static size_t
nesting(const uint8_t *p, const uint8_t *end, uint64_t field, size_t depth, size_t limit)
{
    size_t deepest = depth;

    while (p < end && deepest <= limit) {
        uint64_t tag, len;

        if (!varint(&p, end, &tag))
            break;
        switch (tag & 7) {
        case 0:
            if (!varint(&p, end, &len))
                return deepest;
            break;
        case 1: p += (size_t)(end - p) < 8 ? (size_t)(end - p) : 8; break;
        case 5: p += (size_t)(end - p) < 4 ? (size_t)(end - p) : 4; break;
        case 2:
            if (!varint(&p, end, &len) || len > (uint64_t)(end - p))
                return deepest;
            if ((tag >> 3) == field) {
                size_t d = nesting(p, p + len, 4, depth + 1, limit);
                if (d > deepest)
                    deepest = d;
            }
            p += len;
            break;
        default: return deepest;
        }
    }
    return deepest;
}

/* ---- a resource as the tree of its YAML file ------------------------------ */

static uint32_t
str(struct ytree *t, const char *s)
{
    return ytree_add_scalar(t, s, strlen(s), false);
}

static uint32_t
word(struct ytree *t, const char *s)
{
    return ytree_add_scalar(t, s, strlen(s), true);
}

struct pairs {
    uint32_t v[16];
    size_t n;
};

static void
pair(struct ytree *t, struct pairs *m, const char *key, uint32_t value)
{
    m->v[m->n++] = word(t, key);
    m->v[m->n++] = value;
}

static void
flag(struct ytree *t, struct pairs *m, const char *key, protobuf_c_boolean on)
{
    if (on)
        pair(t, m, key, word(t, "true"));
}

static uint32_t
policy_tree(struct ytree *t, const Ratelimit__Config__Ratelimit__V3__RateLimitPolicy *rl)
{
    struct pairs m = {.n = 0};
    char num[24];

    if (rl->unit != RATELIMIT__CONFIG__RATELIMIT__V3__RATE_LIMIT_UNIT__UNKNOWN) {
        const char *u = rls_unit_name((enum rls_unit)rl->unit);
        if (u == NULL) {
            /* a value this build does not know: the loader names it */
            snprintf(num, sizeof(num), "%d", (int)rl->unit);
            u = num;
        }
        pair(t, &m, "unit", word(t, u));
    }
    if (!rl->unlimited || rl->requests_per_unit != 0) {
        snprintf(num, sizeof(num), "%u", (unsigned)rl->requests_per_unit);
        pair(t, &m, "requests_per_unit", word(t, num));
    }
    flag(t, &m, "unlimited", rl->unlimited);
    if (rl->name != NULL && rl->name[0] != '\0')
        pair(t, &m, "name", str(t, rl->name));
    if (rl->n_replaces > 0) {
        uint32_t *v = xmalloc(rl->n_replaces * sizeof(*v));
        for (size_t i = 0; i < rl->n_replaces; i++) {
            uint32_t kv[2] = {word(t, "name"), str(t, rl->replaces[i]->name)};
            v[i] = ytree_add_container(t, YT_MAP, kv, 2);
        }
        pair(t, &m, "replaces", ytree_add_container(t, YT_SEQ, v, rl->n_replaces));
        free(v);
    }
    return ytree_add_container(t, YT_MAP, m.v, m.n);
}

static uint32_t descriptors_tree(struct ytree *t,
                                 Ratelimit__Config__Ratelimit__V3__RateLimitDescriptor **d,
                                 size_t n);

static uint32_t
descriptor_tree(struct ytree *t,
                const Ratelimit__Config__Ratelimit__V3__RateLimitDescriptor *d)
{
    struct pairs m = {.n = 0};

    /* proto3 has no absent string: an empty key is refused as a file's */
    pair(t, &m, "key", str(t, d->key != NULL ? d->key : ""));
    if (d->value != NULL && d->value[0] != '\0')
        pair(t, &m, "value", str(t, d->value));
    if (d->rate_limit != NULL)
        pair(t, &m, "rate_limit", policy_tree(t, d->rate_limit));
    if (d->n_descriptors > 0)
        pair(t, &m, "descriptors", descriptors_tree(t, d->descriptors, d->n_descriptors));
    flag(t, &m, "shadow_mode", d->shadow_mode);
    flag(t, &m, "detailed_metric", d->detailed_metric);
    flag(t, &m, "quota_mode", d->quota_mode);
    return ytree_add_container(t, YT_MAP, m.v, m.n);
}

static uint32_t
descriptors_tree(struct ytree *t, Ratelimit__Config__Ratelimit__V3__RateLimitDescriptor **d,
                 size_t n)
{
    uint32_t *v = xmalloc(n * sizeof(*v)), seq;

    for (size_t i = 0; i < n; i++)
        v[i] = descriptor_tree(t, d[i]);
    seq = ytree_add_container(t, YT_SEQ, v, n);
    free(v);
    return seq;
}

/* ---- a response ------------------------------------------------------------ */

/* Every problem in one line: what error_detail says. */
static char *
join_problems(const struct rl_errors *errs)
{
    size_t len = 0, cap = XDS_DETAIL_MAX;
    char *out = xmalloc(cap + 1);

    out[0] = '\0';
    for (size_t i = 0; i < errs->n; i++) {
        int w = snprintf(out + len, cap + 1 - len, "%s%s", i ? "; " : "", errs->msg[i]);
        if (w < 0 || (size_t)w > cap - len) {
            len = cap;
            break;
        }
        len += (size_t)w;
    }
    out[len] = '\0';
    return out;
}

/*
 * A RateLimitConfig read off its wire without unpacking its descriptors:
 * each is unpacked and made a tree only when the loader comes to it, and
 * freed before the next (rls_doc's item).  An update then holds one
 * descriptor's objects beside the rules it builds, never every resource's
 * (protobuf-c makes an object per field, the tree a node per scalar: about
 * half a rule set's bytes for 10,000 descriptors).
 */
struct resource {
    char *name, *domain;    /* as protobuf-c's strings: NUL-terminated copies */
    const uint8_t *p, *end; /* its bytes, well formed (config_fields) */
    size_t ndesc;           /* top-level descriptors */
    const uint8_t *at;      /* where descriptor `next` is looked for */
    size_t next;
    struct ytree tree; /* domain, and a placeholder per descriptor */
    struct ytree item; /* the descriptor being loaded */
};

static void
set_string(char **s, const uint8_t *p, size_t len)
{
    free(*s);
    *s = xmalloc(len + 1);
    memcpy(*s, p, len);
    (*s)[len] = '\0';
}

/* The field at *p: its number, and for a length-delimited one its bytes;
 * *p past it.  false where protobuf-c's unpack refuses: truncated or
 * malformed, field 0, a group, a field from 1 to `bytes_upto` (those of
 * a RateLimitConfig: strings and messages) of another wire type. */
static bool
field_at(const uint8_t **p, const uint8_t *end, uint64_t bytes_upto, uint64_t *field,
         const uint8_t **val, size_t *vlen)
{
    uint64_t tag, len;

    if (!varint(p, end, &tag))
        return false;
    *field = tag >> 3;
    *val = NULL;
    if (*field == 0 || *field > 0x1fffffff || (*field <= bytes_upto && (tag & 7) != 2))
        return false;
    switch (tag & 7) {
    case 0: return varint(p, end, &len);
    case 1:
    case 5:
        len = (tag & 7) == 1 ? 8 : 4;
        if ((uint64_t)(end - *p) < len)
            return false;
        *p += len;
        return true;
    case 2:
        if (!varint(p, end, &len) || len > (uint64_t)(end - *p))
            return false;
        *val = *p;
        *vlen = (size_t)len;
        *p += len;
        return true;
    default: return false;
    }
}

/* Its fields read and its descriptors counted; the last name or domain
 * wins, as in protobuf-c's unpack. */
static int
config_fields(struct resource *res)
{
    const uint8_t *p = res->p, *val;
    uint64_t field;
    size_t len;

    while (p < res->end) {
        if (!field_at(&p, res->end, 3, &field, &val, &len))
            return RL_ERR;
        if (field == 1)
            set_string(&res->name, val, len);
        else if (field == 2)
            set_string(&res->domain, val, len);
        else if (field == 3)
            res->ndesc++;
    }
    return RL_OK;
}

/* rls_doc's item: descriptor i as its tree.  The loader asks them in
 * order: each is found from where the last one ended. */
static const struct ytree *
item_tree(void *arg, size_t i, const char **cause)
{
    struct resource *res = arg;
    Ratelimit__Config__Ratelimit__V3__RateLimitDescriptor *d = NULL;
    const uint8_t *val = NULL;
    uint64_t field = 0;
    size_t len = 0;

    if (i < res->next) {
        res->at = res->p;
        res->next = 0;
    }
    while (res->at < res->end && field_at(&res->at, res->end, 3, &field, &val, &len))
        if (field == 3 && res->next++ == i)
            break;
    if (field == 3 && res->next == i + 1)
        d = ratelimit__config__ratelimit__v3__rate_limit_descriptor__unpack(NULL, len, val);
    if (d == NULL) {
        *cause = "not a RateLimitDescriptor";
        return NULL;
    }
    ytree_clear(&res->item);
    ytree_set_root(&res->item, descriptor_tree(&res->item, d));
    ratelimit__config__ratelimit__v3__rate_limit_descriptor__free_unpacked(d, NULL);
    return &res->item;
}

/* domain, and descriptors as placeholders that item_tree fills. */
static void
config_tree(struct resource *res)
{
    struct ytree *t = &res->tree;
    struct pairs m = {.n = 0};

    pair(t, &m, "domain", str(t, res->domain != NULL ? res->domain : ""));
    if (res->ndesc > 0) {
        uint32_t *v = xmalloc(res->ndesc * sizeof(*v)), hole = word(t, "~");

        for (size_t i = 0; i < res->ndesc; i++)
            v[i] = hole;
        pair(t, &m, "descriptors", ytree_add_container(t, YT_SEQ, v, res->ndesc));
        free(v);
    }
    ytree_set_root(t, ytree_add_container(t, YT_MAP, m.v, m.n));
}

static void
resource_free(struct resource *res)
{
    free(res->name);
    free(res->domain);
    ytree_free(&res->tree);
    ytree_free(&res->item);
}

/* Resource i read into res under *name; its problem added. */
static int
read_resource(const ProtobufCBinaryData *b, size_t i, struct resource *res, char **name,
              struct rl_errors *errs)
{
    /* an empty value has no data pointer: nothing nested */
    if (b->len > 0 &&
        nesting(b->data, b->data + b->len, 3, 0, RLS_DEPTH_MAX + 1) > RLS_DEPTH_MAX) {
        errors_add(errs, "resources[%zu]: descriptors: nested deeper than %d levels", i,
                   RLS_DEPTH_MAX);
        return RL_ERR;
    }
    res->p = res->at = res->end = b->data;
    if (b->len > 0)
        res->end = b->data + b->len;
    if (b->len > 0 && config_fields(res) != RL_OK) {
        errors_add(errs, "resources[%zu]: not a RateLimitConfig", i);
        return RL_ERR;
    }
    if (res->name == NULL || res->name[0] == '\0')
        *name = xasprintf("resources[%zu] (no name)", i);
    else
        *name = xasprintf("resource '%s'", res->name);
    config_tree(res);
    return RL_OK;
}

/* Two resources of one name: the second is a problem. */
static void
names_unique(char **names, size_t n, struct rl_errors *errs)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < i && names[i] != NULL; j++)
            if (names[j] != NULL && strcmp(names[i], names[j]) == 0) {
                errors_add(errs, "resources[%zu]: name: %s twice", i, names[i]);
                break;
            }
}

/* The next Any of a DiscoveryResponse's resources (field 2) at *p, read
 * off the message protobuf-c has unpacked (so well formed) without its
 * copy of every resource: *type_url (caller frees) and value, the last
 * of each winning as there.  false: none left. */
static bool
next_any(const uint8_t **p, const uint8_t *end, char **type_url, ProtobufCBinaryData *value)
{
    const uint8_t *val, *a, *aend;
    uint64_t field = 0;
    size_t len = 0;

    while (*p < end && field_at(p, end, 0, &field, &val, &len))
        if (field == 2 && val != NULL)
            break;
    if (field != 2 || val == NULL)
        return false;
    *type_url = NULL;
    value->data = NULL;
    value->len = 0;
    for (a = val, aend = val + len; a < aend && field_at(&a, aend, 0, &field, &val, &len);) {
        if (field == 1 && val != NULL) {
            set_string(type_url, val, len);
        } else if (field == 2 && val != NULL) {
            value->data = (uint8_t *)val;
            value->len = len;
        }
    }
    return true;
}

static int
decode_resources(const uint8_t *msg, size_t len, size_t n, uint64_t (*new_uid)(void),
                 struct xds_response *out, struct rl_errors *errs)
{
    struct resource *res = xcalloc(n ? n : 1, sizeof(*res));
    char **names = xcalloc(n ? n : 1, sizeof(*names));
    struct rls_doc *docs = xcalloc(n ? n : 1, sizeof(*docs));
    const uint8_t *p = msg, *end = msg + len;
    int ok = RL_OK;

    for (size_t i = 0; i < n; i++) {
        ProtobufCBinaryData value;
        char *type_url;

        if (!next_any(&p, end, &type_url, &value)) {
            errors_add(errs, "resources[%zu]: not found again", i); /* not reached */
            ok = RL_ERR;
            break;
        }
        if (type_url == NULL || strcmp(type_url, XDS_TYPE_URL) != 0) {
            errors_add(errs, "resources[%zu]: type_url: '%s', not %s", i,
                       type_url != NULL ? type_url : "", XDS_TYPE_URL);
            ok = RL_ERR;
        } else {
            if (read_resource(&value, i, &res[i], &names[i], errs) != RL_OK)
                ok = RL_ERR;
            docs[i] = (struct rls_doc){.name = names[i],
                                       .tree = &res[i].tree,
                                       .src = value.data,
                                       .src_len = value.len,
                                       .item = item_tree,
                                       .item_arg = &res[i]};
        }
        free(type_url);
    }
    names_unique(names, n, errs);
    if (ok == RL_OK && errs->total == 0)
        ok = rls_rules_from_docs(docs, n, new_uid, &out->rules, errs);
    for (size_t i = 0; i < n; i++) {
        resource_free(&res[i]);
        free(names[i]);
    }
    free(res);
    free(names);
    free(docs);
    return errs->total == 0 ? ok : RL_ERR;
}

int
xds_response_decode(const uint8_t *msg, size_t len, uint64_t (*new_uid)(void),
                    struct xds_response *out, char **cause)
{
    Envoy__Service__Discovery__V3__DiscoveryResponse *r;
    struct rl_errors errs = {0};
    int ok;

    memset(out, 0, sizeof(*out));
    *cause = NULL;
    r = envoy__service__discovery__v3__discovery_response__unpack(NULL, len, msg);
    if (r == NULL) {
        *cause = xstrdup("not a DiscoveryResponse");
        return RL_ERR;
    }
    out->version = xstrdup(r->version_info != NULL ? r->version_info : "");
    out->nonce = xstrdup(r->nonce != NULL ? r->nonce : "");
    out->nresources = r->n_resources;
    if (r->type_url == NULL || strcmp(r->type_url, XDS_TYPE_URL) != 0)
        errors_add(&errs, "type_url: '%s', not %s", r->type_url != NULL ? r->type_url : "",
                   XDS_TYPE_URL);
    envoy__service__discovery__v3__discovery_response__free_unpacked(r, NULL);
    /* the resources are read off msg: the unpacked copy of them is gone
     * before the rules are built */
    if (errs.total == 0)
        (void)decode_resources(msg, len, out->nresources, new_uid, out, &errs);
    ok = errs.total == 0 ? RL_OK : RL_ERR;
    if (ok != RL_OK) {
        rls_rules_free(out->rules);
        out->rules = NULL;
        *cause = join_problems(&errs);
    }
    errors_free(&errs);
    return ok;
}

void
xds_response_clear(struct xds_response *r)
{
    free(r->version);
    free(r->nonce);
    rls_rules_free(r->rules);
    memset(r, 0, sizeof(*r));
}

uint8_t *
xds_request_encode(const char *node_id, const char *version, const char *nonce,
                   const char *error, size_t *len)
{
    Envoy__Service__Discovery__V3__DiscoveryRequest req =
        ENVOY__SERVICE__DISCOVERY__V3__DISCOVERY_REQUEST__INIT;
    Envoy__Config__Core__V3__Node node = ENVOY__CONFIG__CORE__V3__NODE__INIT;
    Google__Rpc__Status status = GOOGLE__RPC__STATUS__INIT;
    size_t n;
    uint8_t *buf;

    node.id = (char *)node_id;
    req.node = &node;
    req.type_url = (char *)XDS_TYPE_URL;
    req.version_info = (char *)(version != NULL ? version : "");
    req.response_nonce = (char *)(nonce != NULL ? nonce : "");
    if (error != NULL) {
        status.code = 3; /* INVALID_ARGUMENT */
        status.message = (char *)error;
        req.error_detail = &status;
    }
    n = envoy__service__discovery__v3__discovery_request__get_packed_size(&req);
    buf = xmalloc(n + 5);
    buf[0] = 0;
    buf[1] = (uint8_t)(n >> 24);
    buf[2] = (uint8_t)(n >> 16);
    buf[3] = (uint8_t)(n >> 8);
    buf[4] = (uint8_t)n;
    (void)envoy__service__discovery__v3__discovery_request__pack(&req, buf + 5);
    *len = n + 5;
    return buf;
}
