/* debug.c — see debug.h. */
#include <ctype.h>
#include <stdint.h>
#include <string.h>

#include <event2/buffer.h>

#include "config.h"
#include "debug.h"
#include "http.h"
#include "rls_rules.h"
#include "worker.h"

/* envoyproxy/ratelimit's RateLimitResponse_RateLimit_Unit names */
static void
unit_upper(enum rls_unit u, char *buf, size_t size)
{
    const char *name = rls_unit_name(u);
    size_t i = 0;

    if (name == NULL)
        name = "unknown";
    for (; name[i] != '\0' && i + 1 < size; i++)
        buf[i] = (char)toupper((unsigned char)name[i]);
    buf[i] = '\0';
}

struct dump {
    struct evbuffer *out;
    size_t max;
    size_t left_out; /* limits not printed once past max */
};

/* One line per limit of r (a rule of `rate_limits` has several, each on a
 * line of its own under the rule's name; `unlimited` is envoyproxy/
 * ratelimit's unit=UNKNOWN requests_per_unit=0), then its descriptors. */
static void
dump_node(struct dump *d, const struct rls_domain *dom, const struct rls_node *n)
{
    for (size_t i = 0; i < n->nrules; i++) {
        const struct rls_rule *r = &n->rules[i];
        size_t lines = r->unlimited ? 1 : r->nlimits;

        for (size_t k = 0; r->has_limit && k < lines; k++) {
            char unit[16];

            if (evbuffer_get_length(d->out) >= d->max) {
                d->left_out++;
                continue;
            }
            unit_upper(r->unlimited ? RLS_UNIT_UNKNOWN : r->limits[k].unit, unit,
                       sizeof(unit));
            evbuffer_add_printf(
                d->out,
                "%.*s.%s: unit=%s requests_per_unit=%u, shadow_mode: %s, "
                "quota_mode: %s\n",
                (int)dom->name.len, dom->name.p, r->label != NULL ? r->label : "", unit,
                r->unlimited ? 0u : (unsigned)r->limits[k].requests_per_unit,
                r->shadow_mode ? "true" : "false", r->quota_mode ? "true" : "false");
        }
        if (r->node != NULL)
            dump_node(d, dom, r->node);
    }
}

void
debug_rlconfig(struct evbuffer *out, const struct rls_rules *rules, size_t max)
{
    struct dump d = {out, max, 0};

    for (size_t i = 0; rules != NULL && i < rules->ndomains; i++)
        dump_node(&d, &rules->domains[i], &rules->domains[i].node);
    if (d.left_out > 0)
        evbuffer_add_printf(
            out, "... and %zu more limits, not shown: /rlconfig stops at %zu bytes\n",
            d.left_out, max);
}

/*
 * /rlconfig's text of the rules in force, made once per rule set and kept
 * whole: 4 MiB of lines (100,000 rules) took about 60 ms of the loop that
 * serves them; now each answer is one copy of it.  A rule set is known by
 * its files' hash, which a reload recomputes (the same files make the same
 * text).  Only worker 0 serves the debug listener: no other thread touches
 * it.
 */
static struct {
    uint64_t hash;
    size_t nrules, ndomains;
    struct evbuffer *text; /* NULL: none made yet */
} made;

static const char *
rlconfig_text(const struct rls_rules *rules, size_t *len)
{
    *len = 0;
    if (rules == NULL)
        return "";
    if (made.text == NULL || made.hash != rules->hash || made.nrules != rules->nrules ||
        made.ndomains != rules->ndomains) {
        if (made.text == NULL)
            made.text = evbuffer_new();
        evbuffer_drain(made.text, evbuffer_get_length(made.text));
        debug_rlconfig(made.text, rules, DEBUG_RLCONFIG_MAX);
        made.hash = rules->hash;
        made.nrules = rules->nrules;
        made.ndomains = rules->ndomains;
    }
    *len = evbuffer_get_length(made.text);
    return (const char *)evbuffer_pullup(made.text, -1); /* once: it stays whole */
}

static void
respond_text(struct http_req *r, int status, const char *extra, struct evbuffer *body)
{
    struct http_response resp = {
        .status = status,
        .content_type = "text/plain; charset=utf-8",
        .headers = extra,
        .headers_len = extra != NULL ? strlen(extra) : 0,
    };

    resp.body_len = evbuffer_get_length(body);
    resp.body = (const char *)evbuffer_pullup(body, -1);
    http_respond(r, &resp);
}

/* envoyproxy/ratelimit's GET / (its routes, "path: what", sorted) */
static const char routes[] =
    "/rlconfig: print out the currently loaded configuration for debugging\n";

void
debug_handle(struct http_req *r, void *arg)
{
    struct rl_worker *w = arg;
    const struct http_head *h = r->head;
    struct evbuffer *out = evbuffer_new();
    bool rlconfig = h->path_len == 9 && memcmp(h->path, "/rlconfig", 9) == 0;

    if (h->method != HTTP_M_GET && h->method != HTTP_M_HEAD) {
        evbuffer_add_printf(out, "method not allowed: the debug listener is read-only\n");
        respond_text(r, 405, "Allow: GET, HEAD\r\n", out);
    } else if (rlconfig) {
        struct http_response resp = {.status = 200,
                                     .content_type = "text/plain; charset=utf-8"};

        resp.body = rlconfig_text(worker_config(w)->rls.rules, &resp.body_len);
        http_respond(r, &resp);
    } else if (h->path_len == 1 && h->path[0] == '/') {
        evbuffer_add(out, routes, sizeof(routes) - 1);
        respond_text(r, 200, NULL, out);
    } else {
        evbuffer_add_printf(out, "no such path: use GET /rlconfig\n%s", routes);
        respond_text(r, 404, NULL, out);
    }
    evbuffer_free(out);
}
