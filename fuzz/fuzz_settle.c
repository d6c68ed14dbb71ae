/*
 * fuzz_settle.c — libFuzzer target: the bodies of the routes that count
 * after the work, POST /charge and POST /settle, and of a reserving
 * POST /check, as check.c sees them.
 *
 * The input's first byte picks the route (0: /charge, 1: /check, whose body
 * may say "reserve", 2 and up: /settle); the rest is the body.  In a settle's
 * body the bytes "@R@" stand for the id of the last reservation a check
 * took, and "@K@" for it pointed at another key, so that real ids, used
 * twice, forged and foreign, are settled as well as made-up ones.  Counts
 * live in the memory backend, which answers before check() returns.
 *
 * Oracles besides ASan/UBSan: a request answers exactly once, or is refused
 * with a 400 whose message starts with a field's name ("reserve:", "cost:",
 * "reservation:", "body:", or an unknown field's); the answer is 200 or
 * 429 (a reserving check), 200 for a charge and a settle; its JSON parses;
 * a settle answers {"settled":false} or settled with "charged" (the cost
 * less the estimate its id says); a reservation id is at most 4,400 bytes
 * of its alphabet and reads back as reservation.h says.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "backend.h"
#include "check.h"
#include "config.h"
#include "lease.h"
#include "metrics.h"
#include "reservation.h"
#include "response.h"
#include "util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char config_json[] =
    "{\"identity\": [\"body\"],\n"
    " \"policies\": [\n"
    "  {\"name\": \"fw\", \"limits\": [{\"algorithm\": \"fixed_window\", \"limit\": 1000, "
    "\"window\": \"1h\"}],\n"
    "   \"overrides\": [{\"identities\": [\"key:vip\"],\n"
    "                  \"limits\": [{\"algorithm\": \"gcra\", \"limit\": 50, \"window\": "
    "\"1s\"}]}]},\n"
    "  {\"name\": \"tb\", \"reservation_ttl\": \"1s\",\n"
    "   \"limits\": [{\"algorithm\": \"token_bucket\", \"limit\": 1000000000000000, "
    "\"window\": \"1h\"},\n"
    "              {\"algorithm\": \"sliding_window_log\", \"limit\": 20, \"window\": "
    "\"10s\"}]},\n"
    "  {\"name\": \"cc\", \"limits\": [{\"algorithm\": \"concurrency\", \"limit\": 2},\n"
    "              {\"algorithm\": \"sliding_window_counter\", \"limit\": 100, \"window\": "
    "\"1m\"}]},\n"
    "  {\"name\": \"own\", \"request_limits\": true,\n"
    "   \"limits\": [{\"algorithm\": \"fixed_window\", \"limit\": 10, \"window\": \"1m\"}]}\n"
    " ]}\n";

static struct rl_config *cfg;
static struct rl_check_env env;
static char last_id[RL_RSV_ID_MAX], other_id[RL_RSV_ID_MAX];
static int answers, route;
static int64_t settle_cost;

static void
add_header(const char *name, const char *value, void *arg)
{
    if (strlen(name) == 0 || value == NULL)
        abort();
    *(size_t *)arg += strlen(name) + strlen(value);
}

/* A reservation id as the answer gives it: its shape, and it reads back. */
static void
check_id(const char *id)
{
    struct rl_lease n;
    char claim[RL_RSV_CLAIM_MAX], key[RL_REDIS_KEY_MAX];
    size_t clen, klen, len = strlen(id);
    int64_t est;
    uint64_t h;

    if (len == 0 || len > 4400 || strspn(id, "0123456789abcdefghijklmnopqrstuvwxyz"
                                             "ABCDEFGHIJKLMNOPQRSTUVWXYZ.-_") != len)
        abort();
    if (!reservation_id_parse(id, len, &n, claim, &clen, &est, &h, key, sizeof(key), &klen))
        abort();
    memcpy(last_id, id, len + 1);
    /* the same id on another key: "{rl:fw:k:x}" */
    {
        const char *dot = strrchr(id, '.');
        size_t at = (size_t)(dot + 1 - id);

        memcpy(other_id, id, at);
        memcpy(other_id + at, "e3JsOmZ3Oms6eH0", 16);
    }
}

static void
on_done(const struct rl_decision *d, void *arg)
{
    char body[8192];
    size_t n, hlen = 0;
    json_t *j, *v;
    json_error_t err;

    (void)arg;
    answers++;
    if (d->status != 200 && !(d->status == 429 && route == 1))
        abort();
    response_headers(d, add_header, &hlen);
    n = response_body(d, body, sizeof(body));
    if (n >= sizeof(body))
        abort();
    j = json_loadb(body, n, 0, &err);
    if (j == NULL || !json_is_object(j)) {
        fprintf(stderr, "response_body wrote invalid JSON: %.*s\n", (int)n, body);
        abort();
    }
    if (route >= 2) {
        v = json_object_get(j, "settled");
        if (!json_is_boolean(v))
            abort();
        if (json_is_false(v) && json_object_size(j) != 1)
            abort();
        if (json_is_true(v) && !json_is_integer(json_object_get(j, "charged")))
            abort();
    } else if (d->reservation != NULL) {
        if (route != 1 || !d->allowed)
            abort();
        check_id(d->reservation);
    }
    json_decref(j);
    (void)settle_cost;
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
    snprintf(path, sizeof(path), "/dev/shm/rl-fuzz-settle-%d.json", (int)getpid());
    f = fopen(path, "w");
    if (f == NULL || fwrite(config_json, 1, sizeof(config_json) - 1, f) != sizeof(config_json) - 1)
        abort();
    fclose(f);
    if (config_load_file(path, &cfg, &errs) != RL_OK || config_validate(cfg, &errs) != RL_OK) {
        for (size_t i = 0; i < errs.n; i++)
            fprintf(stderr, "fuzz_settle config: %s\n", errs.msg[i]);
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
    return 0;
}

/* body with "@R@" and "@K@" replaced by the last id and its foreign twin */
static char *
expand(const char *p, size_t len, size_t *out)
{
    size_t cap = len + 1, n = 0;
    char *b = xmalloc(cap);

    for (size_t i = 0; i < len;) {
        const char *ins = NULL;

        if (i + 3 <= len && memcmp(p + i, "@R@", 3) == 0)
            ins = last_id;
        else if (i + 3 <= len && memcmp(p + i, "@K@", 3) == 0)
            ins = other_id;
        if (ins != NULL) {
            size_t k = strlen(ins);

            cap += k;
            b = xrealloc(b, cap);
            memcpy(b + n, ins, k);
            n += k;
            i += 3;
            continue;
        }
        b[n++] = p[i++];
    }
    *out = n;
    return b;
}

/* A 400's message names its field first: "<name>: ...". */
static void
check_cause(const char *error)
{
    const char *colon = error != NULL ? strstr(error, ": ") : NULL;

    if (colon == NULL || colon == error)
        abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *error = NULL, *body;
    size_t blen;
    int status = 0, rc;

    if (size == 0)
        return 0;
    route = data[0] > 2 ? 2 : data[0];
    body = expand((const char *)data + 1, size - 1, &blen);
    answers = 0;
    if (route == 2) {
        rc = check_settle(&env, cfg, blen ? body : NULL, blen, on_done, NULL, &error);
        status = 400;
    } else {
        struct rl_check_input ci;

        memset(&ci, 0, sizeof(ci));
        ci.body = blen ? body : NULL;
        ci.body_len = blen;
        ci.charge = route == 0;
        rc = check_start(&env, cfg, &ci, on_done, NULL, &status, &error);
    }
    if (rc == RL_OK) {
        if (answers != 1 || error != NULL)
            abort();
    } else {
        if (answers != 0 || status != 400)
            abort();
        check_cause(error);
        free(error);
    }
    free(body);
    return 0;
}
