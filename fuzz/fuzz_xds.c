/*
 * fuzz_xds.c — libFuzzer target: a DiscoveryResponse as the xDS client reads
 * it off its stream (xds.c), decoded by xds_codec.c into a rule set of
 * RateLimitConfig resources, or refused with the text a NACK carries.
 *
 * Oracles besides ASan/UBSan (and the stack: descriptors nested as deep as
 * the bytes allow must be refused before protobuf-c recurses): an accepted
 * response has rules whose every domain is found by its name; a refused one
 * has a cause of at most XDS_DETAIL_MAX bytes, and a version and nonce
 * exactly when protobuf-c's unpack reads the envelope; the NACK written
 * from it unpacks with that nonce and that message; an accepted one's every
 * resource unpacks whole with protobuf-c (the decoder reads them off the wire
 * a descriptor at a time, and must refuse what that unpack refuses).
 */
#include <stdlib.h>
#include <string.h>

#include "envoy/service/discovery/v3/discovery.pb-c.h"
#include "ratelimit/config/ratelimit/v3/rls_conf.pb-c.h"
#include "policy.h"
#include "rls_rules.h"
#include "util.h"
#include "xds_codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check_nack(const struct xds_response *r, const char *cause)
{
    size_t len;
    uint8_t *msg = xds_request_encode("fuzz", "v0", r->nonce, cause, &len);
    Envoy__Service__Discovery__V3__DiscoveryRequest *q =
        envoy__service__discovery__v3__discovery_request__unpack(NULL, len - 5, msg + 5);

    if (q == NULL || q->error_detail == NULL || strcmp(q->error_detail->message, cause) != 0 ||
        strcmp(q->response_nonce, r->nonce) != 0)
        abort();
    envoy__service__discovery__v3__discovery_request__free_unpacked(q, NULL);
    free(msg);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Envoy__Service__Discovery__V3__DiscoveryResponse *env;
    struct xds_response r;
    char *cause = NULL;
    int ok = xds_response_decode(data, size, policy_new_uid, &r, &cause);

    env = envoy__service__discovery__v3__discovery_response__unpack(NULL, size, data);
    if ((env != NULL) != (r.nonce != NULL))
        abort();
    if (ok == RL_OK) {
        if (r.rules == NULL || cause != NULL)
            abort();
        for (size_t i = 0; i < r.rules->ndomains; i++) {
            const struct rls_domain *d = &r.rules->domains[i];
            if (rls_rules_domain(r.rules, d->name.p, d->name.len) != d)
                abort();
        }
        for (size_t i = 0; env != NULL && i < env->n_resources; i++) {
            const ProtobufCBinaryData *v = &env->resources[i]->value;
            Ratelimit__Config__Ratelimit__V3__RateLimitConfig *c =
                ratelimit__config__ratelimit__v3__rate_limit_config__unpack(NULL, v->len, v->data);
            if (c == NULL)
                abort();
            ratelimit__config__ratelimit__v3__rate_limit_config__free_unpacked(c, NULL);
        }
    } else {
        if (r.rules != NULL || cause == NULL || strlen(cause) > XDS_DETAIL_MAX)
            abort();
        if (r.nonce != NULL)
            check_nack(&r, cause);
    }
    if (env != NULL)
        envoy__service__discovery__v3__discovery_response__free_unpacked(env, NULL);
    free(cause);
    xds_response_clear(&r);
    return 0;
}
