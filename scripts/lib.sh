# shellcheck shell=bash
# lib.sh — what scripts/run and scripts/test share: the Debian packages the
# project needs, and an out-of-tree build under build/.

RL_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export RL_BUILD=${BUILD_DIR:-$RL_TOP/build}

# Build and test dependencies, by Debian 12 package name (tzdata: the time
# zones of calendar periods, read by the daemon and by the tests).
RL_PACKAGES=(build-essential autoconf automake autoconf-archive pkg-config
             libevent-dev libssl-dev libhiredis-dev libjansson-dev check
             libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler libyaml-dev
             redis-server redis-tools python3 curl openssl
             tzdata)
# What only the tests need: nginx and caddy (the gateway recipes), systemd
# (systemd-analyze), man-db and groff-base (the man pages), python3-yaml
# (deploy/ manifests), valgrind, clang + its runtime (libFuzzer), wrk,
# haproxy (its recipe), prometheus (promtool: the alert rules), gnuplot-nox
# (scripts/bench --plot), nodejs (examples/node), python3-h11 (test_http_h11's
# independent HTTP/1.1 parser), python3-grpcio + python3-protobuf +
# protobuf-compiler (a real gRPC client of the rate limit service, its
# classes generated from src/proto/), nghttp2-client (h2load, nghttp),
# python3-pytest (pytest-driven cases), autoconf-archive (AX_PTHREAD),
# python3-h2 (HTTP/2 frames by hand: what no gRPC client sends); npm (with
# nodejs: the second gRPC client, @grpc/grpc-js, installed by npm ci in the test);
# universal-ctags (scripts/call-graph reads the functions of src/ with it);
# node-express (examples/node/express.js: the middleware mounted on a prefix);
# debhelper (with dpkg-dev: dpkg-buildpackage), lintian and git (the Debian
# package of debian/, built from a copy of the tree, checked, installed and
# purged: tests/package/test_deb.py); chromium (test_admin_ui: the status page
# in a real browser, headless, driven by playwright-core, installed by npm ci
# in the test).
RL_TEST_PACKAGES=(nginx caddy systemd man-db groff-base python3-yaml
                  valgrind clang libclang-rt-14-dev wrk
                  haproxy prometheus gnuplot-nox nodejs node-express python3-h11 clang-format
                  python3-grpcio python3-protobuf protobuf-compiler nghttp2-client
                  python3-pytest autoconf-archive python3-h2 universal-ctags
                  debhelper dpkg-dev lintian git chromium)

say() { printf '==> %s\n' "$*" >&2; }

# The Python client's WSGI and ASGI middleware in their frameworks
# (clients/python/tests, examples/python): python3-flask, python3-django,
# python3-starlette, python3-httpx (Starlette's test client), python3-fastapi
# and python3-uvicorn (a FastAPI app under a real server that a client
# leaves mid-stream).  node-express above runs examples/node/express.mjs.
RL_TEST_PACKAGES+=(python3-flask python3-django python3-starlette python3-httpx python3-fastapi python3-uvicorn)

# Install whatever is missing of RL_PACKAGES and of the packages named as
# arguments (apt-get; needs root or sudo).
rl_install_deps() {
    local missing=() p
    for p in "${RL_PACKAGES[@]}" "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
            missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if ! command -v apt-get >/dev/null; then
        say "missing packages: ${missing[*]} (no apt-get here: install them by hand)"
        return 1
    fi
    local sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    say "installing: ${missing[*]}"
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
}

# Configure (once) under build dir $1 with extra configure flags.
rl_configure() {
    local dir=$1; shift
    # An in-tree ./configure blocks every out-of-tree one ("source directory
    # already configured"): its output is generated, so clean it away.
    if [ -f "$RL_TOP/config.status" ] && [ "$(cd "$dir" 2>/dev/null && pwd)" != "$RL_TOP" ]; then
        say "the source tree was configured in place: make distclean there first"
        make -C "$RL_TOP" distclean >/dev/null 2>&1 || rm -f "$RL_TOP/config.status"
    fi
    if [ ! -x "$RL_TOP/configure" ] || [ "$RL_TOP/configure.ac" -nt "$RL_TOP/configure" ] ||
       [ "$RL_TOP/Makefile.am" -nt "$RL_TOP/Makefile.in" ]; then
        say "autoreconf"
        (cd "$RL_TOP" && autoreconf -fi >/dev/null 2>&1) || (cd "$RL_TOP" && autoreconf -fi)
    fi
    mkdir -p "$dir"
    if [ ! -f "$dir/Makefile" ] || [ "$RL_TOP/configure" -nt "$dir/Makefile" ]; then
        say "configure $*"
        (cd "$dir" && "$RL_TOP/configure" -q "$@")
    fi
}

# Configure (once) and build under $RL_BUILD with extra configure flags.
rl_build() {
    local dir=$1; shift
    rl_configure "$dir" "$@"
    say "make in $dir"
    make -C "$dir" -j"$(nproc)" >/dev/null
}
