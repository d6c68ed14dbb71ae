/*
 * xds_codec.h — the messages of rules over xDS (rls.xds): a DiscoveryResponse
 * of envoyproxy/ratelimit's RateLimitConfig resources decoded into a rule set,
 * and the DiscoveryRequest that asks, ACKs or NACKs.  Pure: no I/O (xds.c
 * carries them), so the decoder is fuzzed on its own (tests/fuzz).
 *
 * Each resource becomes the tree a YAML rule file of the same content
 * would be (ytree.h), and the set goes through rls_rules_from_docs: the
 * same validation, the same matcher, one code path.  A response is taken
 * whole or refused whole.  The resources are read off the message, and a
 * resource's descriptors unpacked and made trees one at a time as the
 * loader comes to them: an update holds the rules in force, the new ones
 * and one descriptor's objects (test_rls_xds: its peak under 2x the rules'
 * steady size), never every resource decoded at once.
 */
#ifndef RL_XDS_CODEC_H
#define RL_XDS_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "rl.h"

struct rls_rules;

#define XDS_TYPE_URL "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"
#define XDS_ADS_PATH \
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
/* The refusal's message in error_detail, at most (problems past it are
 * counted, not told). */
#define XDS_DETAIL_MAX 4096

struct xds_response {
    char *version; /* version_info; NULL: the message was no DiscoveryResponse */
    char *nonce;
    size_t nresources;
    struct rls_rules *rules; /* RL_OK: the new set (the caller owns it) */
};

/*
 * One DiscoveryResponse (the message, without gRPC's prefix).  RL_OK:
 * out->rules.  RL_ERR: *cause (caller frees) is what error_detail says:
 * every problem, each naming its resource ("resource 'NAME': PATH: what");
 * out->version and out->nonce are set when the envelope was read (the
 * refusal names that nonce).
 */
int xds_response_decode(const uint8_t *msg, size_t len, uint64_t (*new_uid)(void),
                        struct xds_response *out, char **cause) RL_WUR;
void xds_response_clear(struct xds_response *r);

/*
 * A DiscoveryRequest for XDS_TYPE_URL as a gRPC message (5-byte prefix):
 * version is the last version accepted (NULL: none), nonce the response
 * answered (NULL: the first request), error (not NULL) refuses it.  *len
 * bytes, the caller frees.
 */
uint8_t *xds_request_encode(const char *node_id, const char *version, const char *nonce,
                            const char *error, size_t *len);

#endif
