# Multi-stage: build and test with the very script CI runs, then ship the
# binary alone in a slim image, as a non-root user.
FROM debian:12 AS build
WORKDIR /src
COPY . .
# scripts/test installs what is missing, builds with -Werror and runs every
# test (unit + integration against a real redis-server), like .ci/run.
RUN scripts/test && make -C build install DESTDIR=/out

FROM debian:12-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libevent-2.1-7 libevent-pthreads-2.1-7 \
        libevent-core-2.1-7 libevent-openssl-2.1-7 libssl3 \
        libhiredis0.14 libjansson4 libnghttp2-14 libprotobuf-c1 libyaml-0-2 \
        curl ca-certificates tzdata \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin ratelimitd
COPY --from=build /out/usr/local/bin/ratelimitd /usr/local/bin/ratelimitd
# envoyproxy/ratelimit's command, which Envoy Gateway runs: by that name the
# daemon reads its environment (docs/envoy.md)
RUN ln -s /usr/local/bin/ratelimitd /bin/ratelimit
COPY conf/ratelimitd.json /etc/ratelimitd/ratelimitd.json
# numeric, so Kubernetes' runAsNonRoot can verify it
USER 10001:10001
# Every option can also come from the environment (RATELIMITD_REDIS_URL, ...)
# or a config mounted over /etc/ratelimitd/ratelimitd.json.
ENV RATELIMITD_LISTEN=0.0.0.0:8080
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=2s --retries=3 \
    CMD curl -fsS http://127.0.0.1:8080/healthz || exit 1
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/ratelimitd"]
# The sample configuration as an argument, not as RATELIMITD_CONFIG: a
# command of its own replaces it.  Envoy Gateway runs /bin/ratelimit with
# envoyproxy/ratelimit's environment and no arguments, and a file would win
# over that environment (its redis.url over REDIS_URL, its key_prefix over
# CACHE_KEY_PREFIX, its log_level over LOG_LEVEL).
CMD ["-c", "/etc/ratelimitd/ratelimitd.json"]
