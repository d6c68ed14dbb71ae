#!/bin/sh
# ratelimit.sh — ratelimitd from shell scripts and cron jobs, with curl.
#
#   . examples/shell/ratelimit.sh          # or run it: ratelimit.sh KEY [KEY...]
#                                          # (KEY "-": anonymous, by RATELIMIT_CLIENT_IP)
#   if ratelimit_check "$user"; then do_the_work; else echo "retry in $RL_RETRY_AFTER s"; fi
#
# Exit status (of ratelimit_check and of the script, per key for several):
#   0  allowed (also when the daemon cannot answer and RATELIMIT_FAIL=open)
#   1  limited: 429; RL_RETRY_AFTER holds the daemon's Retry-After (seconds)
#   2  a bad request (any 4xx but 429: empty/oversized key, unknown policy):
#      a bug, never read as "limited" — unlike `curl -sf ... || echo limited`
#      — nor as "allowed": the failure policy is for the daemon's own failures
#   3  the daemon could not answer (refused, timeout, 503, ...) and
#      RATELIMIT_FAIL=closed
# A check that could not be answered says so on stderr, with how long it
# took (curl's own time_total), open or closed.
# Environment: RATELIMITD_URL (http://127.0.0.1:8080), RATELIMIT_TIMEOUT
# (seconds, 0.2), RATELIMIT_FAIL (open | closed, default open),
# RATELIMIT_POLICY (a policy name), RATELIMIT_CLIENT_IP (sent as
# X-Forwarded-For: the address of the client the script acts for).
#
# Several keys in one call (`ratelimit.sh k1 k2 k3`, or ratelimit_check_many)
# go over one kept-alive connection — one curl, one TCP connection — and print
# "KEY STATUS RETRY_AFTER" per key; the exit status is the _rl_worst one.

RATELIMITD_URL=${RATELIMITD_URL:-http://127.0.0.1:8080}
RATELIMIT_TIMEOUT=${RATELIMIT_TIMEOUT:-0.2}
RATELIMIT_FAIL=${RATELIMIT_FAIL:-open}

# JSON string escaping for a key: backslash and quote (control bytes are refused).
_rl_json() {
    printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g'
}

# KEY "-": an anonymous caller, named by RATELIMIT_CLIENT_IP (or this host's address)
_rl_body() {
    if [ "$1" = - ]; then
        if [ -n "${RATELIMIT_POLICY:-}" ]; then
            printf '{"policy":"%s"}' "$(_rl_json "$RATELIMIT_POLICY")"
        else
            printf '{}'
        fi
    elif [ -n "${RATELIMIT_POLICY:-}" ]; then
        printf '{"key":"%s","policy":"%s"}' "$(_rl_json "$1")" "$(_rl_json "$RATELIMIT_POLICY")"
    else
        printf '{"key":"%s"}' "$(_rl_json "$1")"
    fi
}

# curl's time_total (seconds) in whole milliseconds
_rl_ms() {
    awk -v t="${1:-0}" 'BEGIN { printf "%d", t * 1000 + 0.5 }'
}

# status code (and curl's time_total) of one answer -> exit status (see above)
_rl_verdict() {
    case $1 in
    200) return 0 ;;
    429) return 1 ;;
    4[0-9][0-9]) echo "ratelimit: bad request ($1): a bug in the caller" >&2; return 2 ;;
    esac
    if [ "$RATELIMIT_FAIL" = closed ]; then
        echo "ratelimit: daemon unavailable (${1:-no answer} after $(_rl_ms "$2") ms), failing closed" >&2
        return 3
    fi
    echo "ratelimit: daemon unavailable (${1:-no answer} after $(_rl_ms "$2") ms), failing open" >&2
    return 0
}

# ratelimit_check KEY: one check; sets RL_STATUS and RL_RETRY_AFTER.
ratelimit_check() {
    set -- "$1" "$(curl -s -o /dev/null --max-time "$RATELIMIT_TIMEOUT" \
        -X POST -H 'Content-Type: application/json' \
        ${RATELIMIT_CLIENT_IP:+-H "X-Forwarded-For: $RATELIMIT_CLIENT_IP"} \
        -d "$(_rl_body "$1")" -w '%{http_code} %{time_total} %header{retry-after}' \
        "$RATELIMITD_URL/check" 2>/dev/null)"
    RL_STATUS=${2%% *}
    set -- "$1" "${2#* }"
    RL_TIME=${2%% *}
    RL_RETRY_AFTER=${2#* }
    [ "$RL_STATUS" = 000 ] && RL_STATUS=
    _rl_verdict "$RL_STATUS" "$RL_TIME"
}

# ratelimit_check_many KEY...: all keys over one connection, "KEY STATUS RETRY_AFTER" each.
ratelimit_check_many() {
    _rl_worst=0
    _rl_keys=
    _rl_first=1
    set -- "$@" --end--
    while [ "$1" != --end-- ]; do
        _rl_k=$1; shift
        if [ $_rl_first = 1 ]; then _rl_first=0; else set -- "$@" --next; fi
        set -- "$@" -s -o /dev/null --max-time "$RATELIMIT_TIMEOUT" -X POST \
            -H 'Content-Type: application/json' \
            ${RATELIMIT_CLIENT_IP:+-H "X-Forwarded-For: $RATELIMIT_CLIENT_IP"} \
            -d "$(_rl_body "$_rl_k")" -w '%{http_code} %{time_total} %header{retry-after}\n' "$RATELIMITD_URL/check"
        _rl_keys="${_rl_keys:-}$_rl_k
"
    done
    shift   # --end--
    _rl_out=$(curl "$@" 2>/dev/null)
    # one line per key, in order; a missing line is a request that got no answer
    printf '%s' "$_rl_keys" | {
        i=0
        while IFS= read -r k; do
            i=$((i + 1))
            line=$(printf '%s\n' "$_rl_out" | sed -n "${i}p")
            st=${line%% *}; rest=${line#* }; t=${rest%% *}; ra=${rest#* }
            [ "$st" = 000 ] && st=
            _rl_verdict "$st" "$t"; v=$?
            printf '%s %s %s\n' "$k" "${st:-none}" "${ra:--}"
            [ $v -gt $_rl_worst ] && _rl_worst=$v
        done
        exit $_rl_worst
    }
    _rl_v=$?
    _rl_keys=
    return $_rl_v
}

# run as a script: check the keys given
case ${0##*/} in
ratelimit.sh)
    if [ $# -eq 0 ]; then echo "usage: ratelimit.sh KEY [KEY...]" >&2; exit 2; fi
    if [ $# -eq 1 ]; then
        ratelimit_check "$1"; v=$?
        [ $v -eq 1 ] && echo "limited: retry after ${RL_RETRY_AFTER}s"
        exit $v
    fi
    ratelimit_check_many "$@"
    exit $? ;;
esac
