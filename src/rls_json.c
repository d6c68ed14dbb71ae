/* rls_json.c — see rls_json.h. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "rls.h"
#include "rls_json.h"
#include "util.h"

/* protojson's names of RateLimitResponse.Code and of the units */
static const char *const code_names[] = {"UNKNOWN", "OK", "OVER_LIMIT"};
static const char *const unit_names[RLS_UNIT_COUNT] = {"UNKNOWN", "SECOND", "MINUTE", "HOUR",
                                                       "DAY",     "MONTH",  "YEAR",   "WEEK"};

/* ---- decoding -------------------------------------------------------------- */

/* "path.name: what" (or "name: what" at the top) into *cause. */
static int RL_PRINTF(4, 5)
    bad(char **cause, const char *path, const char *name, const char *fmt, ...)
{
    va_list ap;
    char *what;

    va_start(ap, fmt);
    what = xvasprintf(fmt, ap);
    va_end(ap);
    *cause = xasprintf("%s%s%s: %s", *path || *name ? path : "body", *path && *name ? "." : "",
                       name, what);
    free(what);
    return RL_ERR;
}

/*
 * The fields of object o: names[i] by its JSON name, or by its proto name
 * alt[i] (NULL: none), into at[i] (NULL: absent or null).  Any other key is
 * a problem, as protojson's own decoder has it.
 */
static int
jfields(json_t *o, const char *path, const char *what, const char *const *names,
        const char *const *alt, size_t n, json_t **at, char **cause)
{
    const char *k;
    json_t *v;

    if (!json_is_object(o))
        return bad(cause, path, "", "must be an object %s", what);
    memset(at, 0, n * sizeof(*at));
    json_object_foreach(o, k, v) {
        size_t i;
        for (i = 0; i < n; i++)
            if (strcmp(k, names[i]) == 0 || (alt[i] != NULL && strcmp(k, alt[i]) == 0))
                break;
        if (i == n)
            return bad(cause, path, k, "unknown field");
        if (json_object_get(o, names[i]) != NULL && alt[i] != NULL &&
            json_object_get(o, alt[i]) != NULL)
            return bad(cause, path, names[i], "given twice (as %s and %s)", names[i], alt[i]);
        at[i] = json_is_null(v) ? NULL : v;
    }
    return RL_OK;
}

/* An unsigned integer up to max: a JSON integer, an integral number, or a
 * string of decimal digits (protojson's form of 64-bit numbers). */
static int
juint(json_t *v, uint64_t max, const char *path, const char *name, uint64_t *out, char **cause)
{
    if (json_is_integer(v) && json_integer_value(v) >= 0 &&
        (uint64_t)json_integer_value(v) <= max) {
        *out = (uint64_t)json_integer_value(v);
        return RL_OK;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d >= 0 && d <= (double)max && d == floor(d) && d < 18446744073709551616.0) {
            *out = (uint64_t)d;
            return RL_OK;
        }
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        if (n > 0 && n <= 20 && strspn(s, "0123456789") == n) {
            unsigned long long u;
            errno = 0;
            u = strtoull(s, NULL, 10);
            if (errno == 0 && u <= max) {
                *out = u;
                return RL_OK;
            }
        }
    }
    return bad(cause, path, name, "must be an integer 0..%llu", (unsigned long long)max);
}

/* A string field; absent is "" (proto3's default). */
static int
jstring(json_t *v, const char *path, const char *name, struct rls_str *out, char **cause)
{
    out->p = "";
    out->len = 0;
    if (v == NULL)
        return RL_OK;
    if (!json_is_string(v))
        return bad(cause, path, name, "must be a string");
    out->p = json_string_value(v);
    out->len = json_string_length(v);
    return RL_OK;
}

static int
get_unit(json_t *v, const char *path, enum rls_unit *out, char **cause)
{
    if (json_is_string(v)) {
        for (int u = 0; u < RLS_UNIT_COUNT; u++) {
            if (strcmp(json_string_value(v), unit_names[u]) == 0) {
                *out = (enum rls_unit)u;
                return RL_OK;
            }
        }
    } else if (json_is_integer(v) && json_integer_value(v) >= 0 &&
               json_integer_value(v) < RLS_UNIT_COUNT) {
        *out = (enum rls_unit)json_integer_value(v);
        return RL_OK;
    }
    return bad(cause, path, "unit",
               "must be one of SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR");
}

static int
decode_entry(json_t *o, const char *path, struct rls_entry *e, char **cause)
{
    static const char *const names[] = {"key", "value"}, *const alt[] = {NULL, NULL};
    json_t *at[2];

    if (jfields(o, path, "{\"key\": ..., \"value\": ...}", names, alt, 2, at, cause) !=
            RL_OK ||
        jstring(at[0], path, "key", &e->key, cause) != RL_OK ||
        jstring(at[1], path, "value", &e->value, cause) != RL_OK)
        return RL_ERR;
    return RL_OK;
}

/* RateLimitOverride: {requestsPerUnit, unit}. */
static int
decode_limit(json_t *o, const char *path, struct rls_descriptor *d, char **cause)
{
    static const char *const names[] = {"requestsPerUnit", "unit"}, *const alt[] = {
                                                                        "requests_per_unit",
                                                                        NULL};
    json_t *at[2];
    uint64_t n = 0;

    if (jfields(o, path, "{\"requestsPerUnit\": N, \"unit\": \"MINUTE\"}", names, alt, 2, at,
                cause) != RL_OK)
        return RL_ERR;
    if (at[0] != NULL &&
        juint(at[0], RL_COST_MAX, path, "requestsPerUnit", &n, cause) != RL_OK)
        return RL_ERR;
    d->limit_unit = RLS_UNIT_UNKNOWN;
    if (at[1] != NULL && get_unit(at[1], path, &d->limit_unit, cause) != RL_OK)
        return RL_ERR;
    d->has_limit = 1;
    d->limit_requests_per_unit = n;
    return RL_OK;
}

static int
decode_descriptor(json_t *o, const char *path, struct rls_descriptor *d, char **cause)
{
    static const char *const names[] = {"entries", "limit", "hitsAddend"}, *const alt[] = {
                                                                               NULL, NULL,
                                                                               "hits_addend"};
    json_t *at[3], *e;
    char sub[96];
    size_t i;

    if (jfields(o, path, "{\"entries\": [...]}", names, alt, 3, at, cause) != RL_OK)
        return RL_ERR;
    if (at[0] != NULL && !json_is_array(at[0]))
        return bad(cause, path, "entries", "must be a list");
    d->nentries = at[0] != NULL ? json_array_size(at[0]) : 0;
    d->entries = xcalloc(d->nentries ? d->nentries : 1, sizeof(*d->entries));
    json_array_foreach(at[0], i, e) {
        snprintf(sub, sizeof(sub), "%s.entries[%zu]", path, i);
        if (decode_entry(e, sub, &d->entries[i], cause) != RL_OK)
            return RL_ERR;
    }
    snprintf(sub, sizeof(sub), "%s.limit", path);
    if (at[1] != NULL && decode_limit(at[1], sub, d, cause) != RL_OK)
        return RL_ERR;
    /* google.protobuf.UInt64Value: in JSON, the number itself */
    if (at[2] != NULL) {
        if (juint(at[2], RL_COST_MAX, path, "hitsAddend", &d->hits_addend, cause) != RL_OK)
            return RL_ERR;
        d->has_hits_addend = 1;
    }
    return RL_OK;
}

int
rls_json_decode(const char *body, size_t len, struct rls_json_request *out, char **cause)
{
    static const char *const names[] = {"domain", "descriptors", "hitsAddend"},
                             *const alt[] = {NULL, NULL, "hits_addend"};
    struct rls_request *req = xcalloc(1, sizeof(*req));
    json_error_t jerr;
    json_t *root, *at[3], *e;
    uint64_t hits = 0;
    char sub[48];
    size_t i;

    out->req = req;
    out->root = root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (root == NULL) {
        *cause = xasprintf("body: malformed JSON at line %d column %d: %s", jerr.line,
                           jerr.column, jerr.text);
        return RL_ERR;
    }
    if (jfields(root, "", "(a RateLimitRequest: {\"domain\": ..., \"descriptors\": [...]})",
                names, alt, 3, at, cause) != RL_OK ||
        jstring(at[0], "", "domain", &req->domain, cause) != RL_OK)
        return RL_ERR;
    if (at[1] != NULL && !json_is_array(at[1]))
        return bad(cause, "", "descriptors", "must be a list");
    if (at[2] != NULL && juint(at[2], UINT32_MAX, "", "hitsAddend", &hits, cause) != RL_OK)
        return RL_ERR;
    req->hits_addend = (uint32_t)hits;
    req->ndescriptors = at[1] != NULL ? json_array_size(at[1]) : 0;
    req->descriptors = xcalloc(req->ndescriptors ? req->ndescriptors : 1,
                               sizeof(*req->descriptors));
    json_array_foreach(at[1], i, e) {
        snprintf(sub, sizeof(sub), "descriptors[%zu]", i);
        if (decode_descriptor(e, sub, &req->descriptors[i], cause) != RL_OK)
            return RL_ERR;
    }
    return RL_OK;
}

void
rls_json_request_free(struct rls_json_request *r)
{
    if (r->req != NULL) {
        for (size_t i = 0; i < r->req->ndescriptors; i++)
            free(r->req->descriptors[i].entries);
        free(r->req->descriptors);
        free(r->req);
    }
    json_decref(r->root);
    r->req = NULL;
    r->root = NULL;
}

/* ---- encoding -------------------------------------------------------------- */

size_t
rls_json_duration(char *buf, size_t size, int64_t ms)
{
    int n = ms % 1000 == 0 ? snprintf(buf, size, "%llds", (long long)(ms / 1000))
                           : snprintf(buf, size, "%lld.%03llds", (long long)(ms / 1000),
                                      (long long)(ms % 1000));

    return n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
}

/* o[name] = v, unless v is NULL (a string that is no UTF-8, say). */
static void
put(json_t *o, const char *name, json_t *v)
{
    if (v != NULL)
        json_object_set_new(o, name, v);
}

static json_t *
status_json(const struct rls_status *st)
{
    json_t *o = json_object();
    char d[32];

    put(o, "code", json_string(code_names[st->code]));
    if (st->has_limit) {
        json_t *l = json_object();
        /* Envoy's uint32, as gRPC answers it (RLS_WIRE_MAX) */
        if (st->requests_per_unit > 0)
            put(l, "requestsPerUnit",
                json_integer(st->requests_per_unit > RLS_WIRE_MAX ? RLS_WIRE_MAX
                                                                  : st->requests_per_unit));
        if (st->unit != RLS_UNIT_UNKNOWN)
            put(l, "unit", json_string(unit_names[st->unit]));
        if (st->name != NULL && *st->name)
            put(l, "name", json_string(st->name));
        put(o, "currentLimit", l);
    }
    if (st->limit_remaining > 0)
        put(o, "limitRemaining",
            json_integer(st->limit_remaining > RLS_WIRE_MAX ? RLS_WIRE_MAX
                                                            : st->limit_remaining));
    if (st->until_reset_ms >= 0) {
        rls_json_duration(d, sizeof(d), st->until_reset_ms);
        put(o, "durationUntilReset", json_string(d));
    }
    return o;
}

char *
rls_json_encode(const struct rls_response *resp, size_t *len)
{
    json_t *o = json_object(), *sts, *hs;
    char *s;

    put(o, "overallCode", json_string(code_names[resp->overall_code]));
    if (resp->nstatuses > 0) {
        sts = json_array();
        for (size_t i = 0; i < resp->nstatuses; i++)
            json_array_append_new(sts, status_json(&resp->statuses[i]));
        put(o, "statuses", sts);
    }
    if (resp->nheaders > 0) {
        hs = json_array();
        for (size_t i = 0; i < resp->nheaders; i++) {
            json_t *h = json_object();
            put(h, "key", json_string(resp->headers[i].name));
            put(h, "value", json_string(resp->headers[i].value));
            json_array_append_new(hs, h);
        }
        put(o, "responseHeadersToAdd", hs);
    }
    s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (s == NULL) /* out of memory, in effect: the one policy is to stop */
        abort();
    *len = strlen(s);
    return s;
}
