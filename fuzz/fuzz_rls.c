/*
 * fuzz_rls.c — libFuzzer target: a gRPC ShouldRateLimit message as the
 * listener hands it on (rls_grpc.c): bytes decoded by rls_codec.c into a
 * struct rls_request, decided by rls_start() under envoyproxy/ratelimit
 * rules (loaded once from a file, as the daemon loads them) against the
 * memory backend, the answer encoded back.
 *
 * Oracles besides ASan/UBSan: rls_codec's own decoder takes and refuses
 * what protobuf-c's unpack does, with the same fields, and its encoder writes
 * the bytes protobuf-c's pack writes for every answer (tests/rls_codec_diff.c);
 * decoding stays within the arena's cap; a
 * request rls_start takes is answered exactly once, with one status per
 * descriptor when it answers at all; the encoded answer unpacks (with
 * protobuf-c's own allocator) into a RateLimitResponse with those statuses
 * and codes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arena.h"
#include "backend.h"
#include "check.h"
#include "config.h"
#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "metrics.h"
#include "rls.h"
#include "rls_codec.h"
#include "../tests/rls_codec_diff.h"
#include "util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ARENA_CAP (4u << 20)

static const char rules_yaml[] =
    "domain: edge\n"
    "descriptors:\n"
    "  - key: remote_address\n"
    "    rate_limit: {unit: second, requests_per_unit: 3}\n"
    "  - key: path\n"
    "    value: /login\n"
    "    rate_limit: {unit: minute, requests_per_unit: 2, name: login}\n"
    "  - key: path\n"
    "    value: /api*\n"
    "    descriptors:\n"
    "      - key: user\n"
    "        rate_limit: {unit: hour, requests_per_unit: 5}\n"
    "  - key: free\n"
    "    rate_limit: {unlimited: true}\n"
    "  - key: shadow\n"
    "    shadow_mode: true\n"
    "    rate_limit: {unit: day, requests_per_unit: 1}\n";

static struct rl_config *cfg;
static struct rl_check_env env;
static struct arena arena;

struct outcome {
    int answers;
    size_t want;
};

static void
on_done(const struct rls_response *resp, void *arg)
{
    struct outcome *o = arg;
    struct arena_mark m = arena_mark(&arena);
    Envoy__Service__Ratelimit__V3__RateLimitResponse *back;
    const uint8_t *bytes;
    size_t n = 0;

    o->answers++;
    if (resp->grpc_status != 0)
        return; /* UNAVAILABLE, DEADLINE_EXCEEDED: a status, no message */
    if (resp->nstatuses != o->want)
        abort();
    if (rls_codec_diff_response(resp) != NULL)
        abort();
    if ((bytes = rls_codec_encode_response(&arena, resp, &n)) == NULL)
        abort();
    back = envoy__service__ratelimit__v3__rate_limit_response__unpack(NULL, n, bytes);
    if (back == NULL || back->n_statuses != resp->nstatuses ||
        (int)back->overall_code != (int)resp->overall_code)
        abort();
    for (size_t i = 0; i < back->n_statuses; i++)
        if ((int)back->statuses[i]->code != (int)resp->statuses[i].code)
            abort();
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(back, NULL);
    arena_release(&arena, m);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char yaml[64], json[64], text[256];
    struct rl_errors errs = {0};
    char *cause = NULL;
    FILE *f;

    (void)argc;
    (void)argv;
    snprintf(yaml, sizeof(yaml), "/dev/shm/rl-fuzz-rls-%d.yaml", (int)getpid());
    snprintf(json, sizeof(json), "/dev/shm/rl-fuzz-rls-%d.json", (int)getpid());
    snprintf(text, sizeof(text), "{\"rls\": {\"config\": \"%s\"}}\n", yaml);
    if ((f = fopen(yaml, "w")) == NULL || fputs(rules_yaml, f) < 0 || fclose(f) != 0 ||
        (f = fopen(json, "w")) == NULL || fputs(text, f) < 0 || fclose(f) != 0)
        abort();
    if (config_load_file(json, &cfg, &errs) != RL_OK || config_validate(cfg, &errs) != RL_OK) {
        for (size_t i = 0; i < errs.n; i++)
            fprintf(stderr, "fuzz_rls config: %s\n", errs.msg[i]);
        abort();
    }
    unlink(yaml);
    unlink(json);
    config_set_metrics_ids(cfg, metrics_policy_id);
    env.metrics = xcalloc(1, sizeof(*env.metrics));
    if (rl_backend_memory_ops.create(&env.backend, NULL, cfg, &cause) != RL_OK) {
        fprintf(stderr, "memory backend: %s\n", cause ? cause : "?");
        abort();
    }
    env.local = env.backend;
    arena_init(&arena, 16 * 1024, ARENA_CAP);
    return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct arena_mark m = arena_mark(&arena);
    struct rls_request req;
    struct outcome o = {0, 0};
    const char *why = NULL, *diff;
    char *cause = NULL;
    int taken;

    if ((diff = rls_codec_diff(data, size, &taken)) != NULL) {
        fprintf(stderr, "fuzz_rls: against protobuf-c: %s\n", diff);
        abort();
    }
    if ((why = rls_codec_decode_request(&arena, data, size, &req)) != NULL) {
        if (arena.total > ARENA_CAP)
            abort();
        arena_release(&arena, m);
        return 0;
    }
    o.want = req.ndescriptors;
    if (rls_start(&env, cfg, &req, on_done, &o, &cause) != RL_OK) {
        if (cause == NULL || o.answers != 0)
            abort();
        free(cause);
    } else if (o.answers != 1) {
        abort(); /* the memory backend answers before rls_start returns */
    }
    arena_release(&arena, m);
    return 0;
}
