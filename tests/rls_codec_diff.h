/*
 * rls_codec_diff.h — rls_codec.c's own RateLimitRequest decoder held to
 * protobuf-c's unpack of the same bytes: check_rls_codec runs it on many
 * generated messages, fuzz/fuzz_rls on every input.
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

#endif
