/*
 * fuzz_body.c — libFuzzer target: a POST /check as check.c sees it.
 *
 * The input is the request body, optionally followed by "\n--\n" and header
 * lines ("Name: value\n") that the identity chain and the path/method
 * fallbacks read.  The config is the built-in defaults plus a few policies
 * (loaded once from a file, so the config code builds them as in the daemon);
 * counts live in the memory backend, which answers before check() returns,
 * and denials go through a small local cache of denials as in a worker.
 *
 * Oracles besides ASan/UBSan: a check answers exactly once (or is refused
 * with a 400 and a message), the answer is 200/429/503, and the JSON body
 * response.c writes for it parses.  And body.c's fast reader is checked
 * against jansson: a body it accepts, jansson accepts and reads the same.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "backend.h"
#include "body.h"
#include "check.h"
#include "config.h"
#include "deny_cache.h"
#include "metrics.h"
#include "response.h"
#include "util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_HEADERS 16

static const char config_json[] =
    "{\"identity\": [\"body\", \"header:X-Api-Key\", \"forwarded\", \"peer\"],\n"
    " \"trusted_proxies\": [\"127.0.0.0/8\", \"::1/128\"],\n"
    " \"policies\": [\n"
    "  {\"name\": \"login\", \"match\": {\"path_prefix\": \"/login\", \"methods\": [\"POST\"]},\n"
    "   \"limits\": [{\"algorithm\": \"token_bucket\", \"limit\": 5, \"window\": \"1s\", \"burst\": 10},\n"
    "              {\"algorithm\": \"fixed_window\", \"limit\": 100, \"window\": \"1h\"}],\n"
    "   \"overrides\": [{\"identities\": [\"key:vip\", \"ip:203.0.113.7\"],\n"
    "                  \"limits\": [{\"algorithm\": \"gcra\", \"limit\": 50, \"window\": \"1s\"}]}]},\n"
    "  {\"name\": \"api\", \"match\": {\"path_glob\": \"/api/*/items?\"},\n"
    "   \"identity\": [\"header:X-Api-Key\", \"peer\"],\n"
    "   \"limits\": [{\"algorithm\": \"sliding_window_log\", \"limit\": 20, \"window\": \"10s\"},\n"
    "              {\"algorithm\": \"gcra\", \"limit\": 3, \"window\": \"1s\", \"burst\": 4}]},\n"
    "  {\"name\": \"shadowed\", \"shadow\": true, \"match\": {\"path\": \"/s\"},\n"
    "   \"limits\": [{\"algorithm\": \"sliding_window_counter\", \"limit\": 2, \"window\": \"1m\"}]},\n"
    "  {\"name\": \"default\",\n"
    "   \"limits\": [{\"algorithm\": \"fixed_window\", \"limit\": 1000000000, \"window\": \"8760h\"}]}\n"
    " ]}\n";

static struct rl_config *cfg;
static struct rl_check_env env;

struct hdr {
    char *name, *value;
};

struct input {
    struct hdr h[MAX_HEADERS];
    size_t n;
};

static const char *
find_header(void *hctx, const char *name)
{
    struct input *in = hctx;

    for (size_t i = 0; i < in->n; i++)
        if (strcasecmp(in->h[i].name, name) == 0)
            return in->h[i].value;
    return NULL;
}

/* Every line of a header, first to last, as api.c gives them. */
static size_t
header_lines(void *hctx, const char *name, const char **vals, size_t *lens, size_t max)
{
    struct input *in = hctx;
    size_t n = 0;

    for (size_t i = 0; i < in->n; i++) {
        if (strcasecmp(in->h[i].name, name) != 0)
            continue;
        if (n < max) {
            vals[n] = in->h[i].value;
            lens[n] = strlen(in->h[i].value);
        }
        n++;
    }
    return n;
}

static void
parse_headers(const char *p, size_t len, struct input *in)
{
    size_t i = 0;

    while (i < len && in->n < MAX_HEADERS) {
        size_t e = i;
        while (e < len && p[e] != '\n')
            e++;
        const char *colon = memchr(p + i, ':', e - i);
        if (colon != NULL && colon > p + i) {
            const char *v = colon + 1;
            while (v < p + e && *v == ' ')
                v++;
            in->h[in->n].name = xstrndup(p + i, (size_t)(colon - (p + i)));
            in->h[in->n].value = xstrndup(v, (size_t)(p + e - v));
            in->n++;
        }
        i = e + 1;
    }
}

static int answers;

static void
add_header(const char *name, const char *value, void *arg)
{
    /* what evhttp would copy: both must be proper C strings */
    if (strlen(name) == 0 || value == NULL)
        abort();
    *(size_t *)arg += strlen(name) + strlen(value);
}

static void
on_done(const struct rl_decision *d, void *arg)
{
    char body[2048];
    size_t n, hlen = 0;
    json_t *j;
    json_error_t err;

    (void)arg;
    answers++;
    if (d->status != 200 && d->status != 429 && d->status != 503)
        abort();
    if (d->status == 503)
        return;                 /* http.c answers its fixed error body */
    response_headers(d, add_header, &hlen);
    n = response_body(d, body, sizeof(body));
    if (n >= sizeof(body))
        abort();
    j = json_loadb(body, n, 0, &err);
    if (j == NULL) {
        fprintf(stderr, "response_body wrote invalid JSON (%s): %.*s\n", err.text, (int)n, body);
        abort();
    }
    if (!json_is_object(j) || !json_is_boolean(json_object_get(j, "allowed")))
        abort();
    json_decref(j);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char path[64];
    struct rl_errors errs = {0};
    char *cause = NULL;
    FILE *f;

    (void)argc;
    (void)argv;
    snprintf(path, sizeof(path), "/dev/shm/rl-fuzz-body-%d.json", (int)getpid());
    f = fopen(path, "w");
    if (f == NULL || fwrite(config_json, 1, sizeof(config_json) - 1, f) != sizeof(config_json) - 1)
        abort();
    fclose(f);
    if (config_load_file(path, &cfg, &errs) != RL_OK || config_validate(cfg, &errs) != RL_OK) {
        for (size_t i = 0; i < errs.n; i++)
            fprintf(stderr, "fuzz_body config: %s\n", errs.msg[i]);
        abort();
    }
    unlink(path);
    for (size_t i = 0; i < cfg->npolicies; i++)
        cfg->policies[i].metrics_id = metrics_policy_id(cfg->policies[i].name);
    env.metrics = xcalloc(1, sizeof(*env.metrics));
    if (rl_backend_memory_ops.create(&env.backend, NULL, cfg, &cause) != RL_OK) {
        fprintf(stderr, "memory backend: %s\n", cause ? cause : "?");
        abort();
    }
    env.local = env.backend;
    /* a small local cache of denials, so that hits, misses and collisions run */
    env.deny = deny_cache_new(64);
    return 0;
}

/* A string field as jansson reads it equals what body_scan found. */
static void
same_string(json_t *root, const char *name, const char *s, size_t n)
{
    json_t *v = json_object_get(root, name);

    if (s == NULL) {
        if (v != NULL && !json_is_null(v))
            abort();
        return;
    }
    if (!json_is_string(v) || json_string_length(v) != n ||
        memcmp(json_string_value(v), s, n) != 0)
        abort();
}

static void
fast_path_agrees(const char *body, size_t len)
{
    struct rl_body_fields f;
    json_error_t jerr;
    json_t *root, *cost;

    if (len == 0 || body_scan(body, len, &f) != RL_OK)
        return;
    root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (root == NULL || !json_is_object(root))
        abort();
    same_string(root, "key", f.key, f.key_len);
    same_string(root, "policy", f.policy, f.policy_len);
    same_string(root, "path", f.path, f.path_len);
    same_string(root, "method", f.method, f.method_len);
    cost = json_object_get(root, "cost");
    if (cost == NULL || json_is_null(cost)) {
        if (f.cost != 1)
            abort();
    } else if (!json_is_integer(cost) || json_integer_value(cost) != f.cost) {
        abort();
    }
    json_decref(root);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    const char *sep = memmem(p, size, "\n--\n", 4);
    size_t body_len = sep ? (size_t)(sep - p) : size;
    struct input in = {0};
    struct rl_check_input ci;
    char *error = NULL;
    int status = 0, rc;

    if (sep != NULL)
        parse_headers(sep + 4, size - body_len - 4, &in);
    memset(&ci, 0, sizeof(ci));
    /* a private copy: reads past the body are caught */
    char *body = body_len ? xmalloc(body_len) : NULL;
    if (body_len)
        memcpy(body, p, body_len);
    fast_path_agrees(body, body_len);
    ci.body = body;
    ci.body_len = body_len;
    ci.ident.header = find_header;
    ci.ident.header_lines = header_lines;
    ci.ident.hctx = &in;
    switch (size % 3) {
    case 0:
        ci.ident.peer_family = AF_INET;
        memcpy(ci.ident.peer_addr, "\x7f\x00\x00\x01", 4);     /* trusted */
        break;
    case 1:
        ci.ident.peer_family = AF_INET;
        memcpy(ci.ident.peer_addr, "\xcb\x00\x71\x07", 4);     /* not trusted */
        break;
    default:
        ci.ident.peer_family = 0;                               /* unix socket */
        break;
    }

    answers = 0;
    rc = check_start(&env, cfg, &ci, on_done, NULL, &status, &error);
    if (rc == RL_OK) {
        if (answers != 1 || error != NULL)
            abort();
    } else {
        if (answers != 0 || status != 400 || error == NULL || error[0] == '\0')
            abort();
        free(error);
    }
    free(body);
    for (size_t i = 0; i < in.n; i++) {
        free(in.h[i].name);
        free(in.h[i].value);
    }
    return 0;
}
