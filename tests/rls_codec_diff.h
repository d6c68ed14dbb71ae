/*
 * rls_codec_diff.h — rls_codec.c's own RateLimitRequest decoder held to
 * protobuf-c's unpack of the same bytes, and its RateLimitResponse encoder
 * to protobuf-c's pack of the same fields: check_rls_codec runs them on many
 * generated messages and answers, fuzz/fuzz_rls on every input and answer.
 */
#ifndef RL_RLS_CODEC_DIFF_H
#define RL_RLS_CODEC_DIFF_H

#include <stddef.h>
#include <stdint.h>

/* NULL when both refuse the len bytes at buf, or both take them with the
 * same fields (strings byte for byte, a NUL too; a message field present in
 * one only is a difference), *taken saying which; else what differs, a
 * static string. */
const char *rls_codec_diff(const uint8_t *buf, size_t len, int *taken);

struct rls_response;
/* NULL when rls_codec_response_size and _write give the size and the bytes
 * protobuf-c's pack gives for resp; else what differs, a static string. */
const char *rls_codec_diff_response(const struct rls_response *resp);

#endif
