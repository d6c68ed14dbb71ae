/*
 * bare_http.c — the baseline of scripts/bench: a bare evhttp server that
 * answers every request 200 with a small fixed JSON body and does nothing
 * else.  Whatever ratelimitd costs above this is the cost of being a rate
 * limiter (parsing, policy, Redis round trip, headers), not of libevent.
 *
 *   bare_http -l 127.0.0.1:8081      ([::1]:8081 for IPv6)
 *
 * SIGTERM or SIGINT stops it with exit status 0.  Not product code: no
 * config, no logs, no limits beyond libevent's defaults.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

/* Small on purpose: ratelimitd's answer (about 250 bytes of JSON and five
 * more headers) costs more to build and send, and that is part of what the
 * benchmark measures. */
static const char body[] = "{\"allowed\":true}\n";

static void
usage(FILE *f)
{
    fprintf(f, "usage: bare_http -l ADDR:PORT\n"
               "  answers every request 200 with %s", body);
}

/* "127.0.0.1:8081" or "[::1]:8081" into host and port; -1 when malformed. */
static int
split_addr(char *text, char **host, ev_uint16_t *port)
{
    char *colon = strrchr(text, ':'), *end;
    unsigned long p;

    if (colon == NULL || colon == text)
        return -1;
    *colon = '\0';
    p = strtoul(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || p == 0 || p > 65535)
        return -1;
    if (text[0] == '[') {
        size_t n = strlen(text);
        if (n < 3 || text[n - 1] != ']')
            return -1;
        text[n - 1] = '\0';
        text++;
    }
    *host = text;
    *port = (ev_uint16_t)p;
    return 0;
}

static void
on_request(struct evhttp_request *req, void *arg)
{
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "application/json");
    evbuffer_add_reference(evhttp_request_get_output_buffer(req), body,
                           sizeof(body) - 1, NULL, NULL);
    evhttp_send_reply(req, 200, "OK", NULL);
    (void)arg;
}

static void
on_signal(evutil_socket_t sig, short what, void *arg)
{
    event_base_loopbreak(arg);
    (void)sig;
    (void)what;
}

int
main(int argc, char **argv)
{
    struct event_base *base;
    struct evhttp *http;
    struct event *sigterm, *sigint;
    char *addr = NULL, *host, buf[256];
    ev_uint16_t port;
    int c, rc = 0;

    while ((c = getopt(argc, argv, "l:h")) != -1) {
        switch (c) {
        case 'l': addr = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 1;
        }
    }
    if (addr == NULL || optind != argc) {
        usage(stderr);
        return 1;
    }
    if (strlen(addr) >= sizeof(buf) ||
        split_addr(strcpy(buf, addr), &host, &port) != 0) {
        fprintf(stderr, "bare_http: -l %s: expected ADDR:PORT\n", addr);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);

    base = event_base_new();
    http = base ? evhttp_new(base) : NULL;
    if (http == NULL) {
        fprintf(stderr, "bare_http: cannot create the event loop\n");
        return 1;
    }
    evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST |
                               EVHTTP_REQ_HEAD);
    evhttp_set_gencb(http, on_request, NULL);
    if (evhttp_bind_socket(http, host, port) != 0) {
        fprintf(stderr, "bare_http: cannot listen on %s:%u\n", host,
                (unsigned)port);
        evhttp_free(http);
        event_base_free(base);
        return 2;
    }
    sigterm = evsignal_new(base, SIGTERM, on_signal, base);
    sigint = evsignal_new(base, SIGINT, on_signal, base);
    if (sigterm == NULL || sigint == NULL ||
        event_add(sigterm, NULL) != 0 || event_add(sigint, NULL) != 0) {
        fprintf(stderr, "bare_http: cannot watch signals\n");
        rc = 1;
    } else if (event_base_dispatch(base) < 0) {
        fprintf(stderr, "bare_http: event loop failed\n");
        rc = 1;
    }
    if (sigterm != NULL)
        event_free(sigterm);
    if (sigint != NULL)
        event_free(sigint);
    evhttp_free(http);
    event_base_free(base);
    return rc;
}
