/*
 * grpc_head.c — see grpc_head.h.
 *
 * nghttp2_http_on_header, http_request_on_header,
 * nghttp2_http_on_request_headers, nghttp2_http_on_data_chunk and
 * nghttp2_http_on_remote_end_stream of nghttp2 1.52 (lib/nghttp2_http.c),
 * for a server whose SETTINGS do not enable the extended CONNECT (no
 * :protocol) and with no invalid-header callback (so that a field nghttp2
 * would only "ignore" resets the stream as well).  A name or value matched
 * whole against one it is known to pass is taken without the byte walk; any
 * other goes through nghttp2's own check functions.
 */
#include <string.h>

#include <nghttp2/nghttp2.h>

#include "grpc_head.h"

enum {
    F_AUTHORITY = 1 << 0,
    F_METHOD = 1 << 1,
    F_PATH = 1 << 2,
    F_SCHEME = 1 << 3,
    F_HOST = 1 << 4,
    F_NO_PSEUDO = 1 << 5, /* a regular field came: no pseudo-header after it */
    F_CONNECT = 1 << 6,
    F_OPTIONS = 1 << 7,
    F_PATH_REGULAR = 1 << 8, /* starts with '/' */
    F_PATH_ASTERISK = 1 << 9,
    F_SCHEME_HTTP = 1 << 10, /* "http" or "https", any case */
};

/* What a field is, by its name. */
enum field {
    H_OTHER,
    H_AUTHORITY,
    H_METHOD,
    H_PATH,
    H_SCHEME,
    H_PROTOCOL,
    H_HOST,
    H_CONTENT_LENGTH,
    H_TE,
    H_CONNECTION_SPECIFIC, /* connection, keep-alive, proxy-connection,
                            * transfer-encoding, upgrade */
};

#define SHOULD_RATE_LIMIT "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

static bool
is(const uint8_t *p, size_t n, const char *s, size_t sn)
{
    return n == sn && memcmp(p, s, sn) == 0;
}

#define IS(p, n, lit) is((p), (n), (lit), sizeof(lit) - 1)

/* Case-insensitive, for te and :scheme (nghttp2's lstrieq and memieq). */
static bool
is_nocase(const uint8_t *p, size_t n, const char *lower, size_t ln)
{
    if (n != ln)
        return false;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = p[i];
        if (c >= 'A' && c <= 'Z')
            c = (uint8_t)(c - 'A' + 'a');
        if (c != (uint8_t)lower[i])
            return false;
    }
    return true;
}

/* The field a name says (valid lower-case names all; *known: it is one of
 * nghttp2's tokens or a field gRPC sends, so valid without a look). */
static enum field
field_of(const uint8_t *name, size_t n, bool *known)
{
    *known = true;
    switch (n) {
    case 2:
        if (IS(name, n, "te"))
            return H_TE;
        break;
    case 4:
        if (IS(name, n, "host"))
            return H_HOST;
        break;
    case 5:
        if (IS(name, n, ":path"))
            return H_PATH;
        break;
    case 7:
        if (IS(name, n, ":method"))
            return H_METHOD;
        if (IS(name, n, ":scheme"))
            return H_SCHEME;
        if (IS(name, n, "upgrade"))
            return H_CONNECTION_SPECIFIC;
        break;
    case 9:
        if (IS(name, n, ":protocol"))
            return H_PROTOCOL;
        break;
    case 10:
        if (IS(name, n, ":authority"))
            return H_AUTHORITY;
        if (IS(name, n, "connection") || IS(name, n, "keep-alive"))
            return H_CONNECTION_SPECIFIC;
        if (IS(name, n, "user-agent"))
            return H_OTHER;
        break;
    case 12:
        if (IS(name, n, "content-type") || IS(name, n, "grpc-timeout"))
            return H_OTHER;
        break;
    case 13:
        if (IS(name, n, "grpc-encoding"))
            return H_OTHER;
        break;
    case 14:
        if (IS(name, n, "content-length"))
            return H_CONTENT_LENGTH;
        break;
    case 16:
        if (IS(name, n, "proxy-connection"))
            return H_CONNECTION_SPECIFIC;
        break;
    case 17:
        if (IS(name, n, "transfer-encoding"))
            return H_CONNECTION_SPECIFIC;
        break;
    case 20:
        if (IS(name, n, "grpc-accept-encoding"))
            return H_OTHER;
        break;
    default: break;
    }
    *known = false;
    return H_OTHER;
}

/* nghttp2's check_scheme (not exported): a letter, then letters, digits,
 * '+', '-', '.'. */
static bool
scheme_ok(const uint8_t *v, size_t n)
{
    if (n == 0 || !((v[0] >= 'A' && v[0] <= 'Z') || (v[0] >= 'a' && v[0] <= 'z')))
        return false;
    for (size_t i = 1; i < n; i++) {
        uint8_t c = v[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '+' || c == '-' || c == '.'))
            return false;
    }
    return true;
}

/* nghttp2's parse_uint: digits only, at most INT64_MAX; -1 otherwise. */
static int64_t
parse_length(const uint8_t *v, size_t n)
{
    int64_t x = 0;

    if (n == 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9' || x > (INT64_MAX - (v[i] - '0')) / 10)
            return -1;
        x = x * 10 + (v[i] - '0');
    }
    return x;
}

/* Whether the value is one nghttp2 takes for this field. */
static bool
value_ok(enum field f, const uint8_t *v, size_t n)
{
    switch (f) {
    case H_METHOD: return IS(v, n, "POST") || nghttp2_check_method(v, n);
    case H_PATH: return IS(v, n, SHOULD_RATE_LIMIT) || nghttp2_check_path(v, n);
    case H_AUTHORITY:
    case H_HOST: return nghttp2_check_authority(v, n);
    case H_SCHEME: return IS(v, n, "http") || scheme_ok(v, n);
    case H_TE: return IS(v, n, "trailers") || nghttp2_check_header_value_rfc9113(v, n);
    default: return IS(v, n, "application/grpc") || nghttp2_check_header_value_rfc9113(v, n);
    }
}

/* A pseudo-header (or host) once, and not empty. */
static int
once(struct grpc_head *h, uint32_t flag, size_t vlen)
{
    if ((h->flags & flag) || vlen == 0)
        return RL_ERR;
    h->flags |= flag;
    return RL_OK;
}

void
grpc_head_init(struct grpc_head *h)
{
    h->flags = 0;
    h->content_length = -1;
    h->received = 0;
}

int
grpc_head_field(struct grpc_head *h, const uint8_t *name, size_t nlen, const uint8_t *value,
                size_t vlen, bool trailer)
{
    bool known;
    enum field f = field_of(name, nlen, &known);
    bool pseudo = nlen > 0 && name[0] == ':';

    /* a name nghttp2 would not take: a bad pseudo-header fails, a bad
     * regular one is "ignored", which resets the stream as well */
    if (!known && (pseudo || !nghttp2_check_header_name(name, nlen)))
        return RL_ERR;
    if (!value_ok(f, value, vlen))
        return RL_ERR;
    if (pseudo && (trailer || (h->flags & F_NO_PSEUDO)))
        return RL_ERR;
    switch (f) {
    case H_AUTHORITY: return once(h, F_AUTHORITY, vlen);
    case H_HOST:
        if (once(h, F_HOST, vlen) != RL_OK)
            return RL_ERR;
        break;
    case H_METHOD:
        if (once(h, F_METHOD, vlen) != RL_OK)
            return RL_ERR;
        if (IS(value, vlen, "CONNECT"))
            h->flags |= F_CONNECT; /* a client's stream: never a push */
        else if (IS(value, vlen, "OPTIONS"))
            h->flags |= F_OPTIONS;
        return RL_OK;
    case H_PATH:
        if (once(h, F_PATH, vlen) != RL_OK)
            return RL_ERR;
        if (value[0] == '/')
            h->flags |= F_PATH_REGULAR;
        else if (vlen == 1 && value[0] == '*')
            h->flags |= F_PATH_ASTERISK;
        return RL_OK;
    case H_SCHEME:
        if (once(h, F_SCHEME, vlen) != RL_OK)
            return RL_ERR;
        if (IS(value, vlen, "http") || is_nocase(value, vlen, "http", 4) ||
            is_nocase(value, vlen, "https", 5))
            h->flags |= F_SCHEME_HTTP;
        return RL_OK;
    case H_PROTOCOL: /* extended CONNECT is not enabled */
    case H_CONNECTION_SPECIFIC: return RL_ERR;
    case H_CONTENT_LENGTH:
        if (h->content_length != -1 || (h->content_length = parse_length(value, vlen)) == -1)
            return RL_ERR;
        break;
    case H_TE:
        if (!IS(value, vlen, "trailers") && !is_nocase(value, vlen, "trailers", 8))
            return RL_ERR;
        break;
    case H_OTHER:
        if (pseudo)
            return RL_ERR;
        break;
    }
    h->flags |= F_NO_PSEUDO;
    return RL_OK;
}

int
grpc_head_end(struct grpc_head *h)
{
    const uint32_t req = F_METHOD | F_PATH | F_SCHEME;
    bool path_ok;

    if (h->flags & F_CONNECT) { /* :authority, no :scheme, no :path; no length */
        h->content_length = -1;
        return (h->flags & (F_SCHEME | F_PATH)) == 0 && (h->flags & F_AUTHORITY) ? RL_OK
                                                                                 : RL_ERR;
    }
    if ((h->flags & req) != req || (h->flags & (F_AUTHORITY | F_HOST)) == 0)
        return RL_ERR;
    path_ok = (h->flags & F_SCHEME_HTTP) == 0 || (h->flags & F_PATH_REGULAR) ||
              ((h->flags & F_OPTIONS) && (h->flags & F_PATH_ASTERISK));
    return path_ok ? RL_OK : RL_ERR;
}

int
grpc_head_data(struct grpc_head *h, size_t n)
{
    h->received += (int64_t)n;
    return h->content_length != -1 && h->received > h->content_length ? RL_ERR : RL_OK;
}

int
grpc_head_ended(const struct grpc_head *h)
{
    return h->content_length != -1 && h->content_length != h->received ? RL_ERR : RL_OK;
}
