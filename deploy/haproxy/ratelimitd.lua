-- deploy/haproxy/ratelimitd.lua — ask ratelimitd before HAProxy forwards a
-- request (HAProxy 2.6+, Lua core.httpclient).  See haproxy.cfg next to it;
-- tests/integration/test_haproxy.py runs both against a real haproxy.
--
--   http-request lua.ratelimitd http://127.0.0.1:8080 open 200
--                              ^ ratelimitd        ^ when it cannot answer:
--                                                    open | closed
--                                                         ^ timeout, ms
--
-- The check is POST /check with the original path (no query) and method in the
-- body, the client's address in X-Forwarded-For (HAProxy's own view of it,
-- never the client's header) and the client's X-Api-Key header if it sent one;
-- the client's body is never sent, so a client cannot pick its key, policy or
-- cost.  Results, as transaction variables for the rules in haproxy.cfg:
--
--   txn.rl_status       200 | 429 from ratelimitd; 400 when ratelimitd refused
--                       the check (any 4xx but 429: the client's doing, e.g. a
--                       path it cannot normalise, /api%2Fitems): denied
--                       whatever the mode; 503 when it could not answer
--                       (refused, timeout, 5xx, anything else) and the mode is
--                       closed; unset when it failed open
--   txn.rl_retry_after, txn.rl_limit, txn.rl_remaining, txn.rl_reset,
--   txn.rl_policy, txn.rl_ratelimit   the answer's Retry-After, X-RateLimit-*,
--                       RateLimit-Policy and RateLimit headers
--
-- HAProxy's httpclient keeps its connections to ratelimitd alive (measured: 100
-- checks over 1 connection).  Its internal proxy retries a request that timed
-- out 3 more times (2.6 has no setting for it), so a hung ratelimitd costs a
-- client up to 4 x the timeout before failing open, and a check whose answer
-- comes later than the timeout may be counted up to 4 times.  Keep the timeout
-- well above ratelimitd's own redis.timeout (50 ms by default: ratelimitd
-- answers by then, from Redis or from its failure_mode), e.g. 200 ms.

local function json_string(s)
    s = s:gsub('[%c"\\]', function(c)
        if c == '"' then return '\\"' end
        if c == '\\' then return '\\\\' end
        return string.format('\\u%04x', c:byte())
    end)
    return '"' .. s .. '"'
end

local function first(headers, name)
    local v = headers and headers[name]
    if type(v) == 'table' then
        return v[0] or v[1]
    end
    return v
end

local copied = {
    ['retry-after'] = 'txn.rl_retry_after',
    ['x-ratelimit-limit'] = 'txn.rl_limit',
    ['x-ratelimit-remaining'] = 'txn.rl_remaining',
    ['x-ratelimit-reset'] = 'txn.rl_reset',
    ['ratelimit-policy'] = 'txn.rl_policy',
    ['ratelimit'] = 'txn.rl_ratelimit',
}

local function check(txn, url, mode, timeout)
    local failed = function(why)
        if mode == 'closed' then
            txn:set_var('txn.rl_status', 503)
            txn:set_var('txn.rl_retry_after', '1')
        end
        core.Warning(string.format('ratelimitd: cannot check (%s), failing %s', why, mode))
    end
    local headers = {
        ['content-type'] = { 'application/json' },
        ['x-forwarded-for'] = { txn.sf:src() },
    }
    local key = txn.sf:req_fhdr('x-api-key')
    if key ~= nil and key ~= '' then
        headers['x-api-key'] = { key }
    end
    local body = '{"path":' .. json_string(txn.sf:path() or '/') ..
                 ',"method":' .. json_string(txn.sf:method() or 'GET') .. '}'
    local hc = core.httpclient()
    local ok, res = pcall(hc.post, hc, {
        url = url .. '/check', headers = headers, body = body, timeout = timeout,
    })
    if not ok then
        return failed(tostring(res))
    end
    local status = res and tonumber(res.status) or 0
    if status >= 400 and status < 500 and status ~= 429 then
        -- the check HAProxy built from the client's request was refused:
        -- the client's doing (a path ratelimitd cannot normalise) or a
        -- misconfiguration (see ratelimitd's log), never ratelimitd's
        -- failure: the failure mode would let every such request walk
        -- around the limits
        txn:set_var('txn.rl_status', 400)
        core.Warning(string.format('ratelimitd: check refused (status %d), denying', status))
        return
    end
    if status ~= 200 and status ~= 429 then
        -- 0: refused or timed out; 5xx: ratelimitd's failure_mode closed or
        -- overload
        return failed('status ' .. status)
    end
    txn:set_var('txn.rl_status', status)
    for name, var in pairs(copied) do
        local v = first(res.headers, name)
        if v ~= nil then
            txn:set_var(var, v)
        end
    end
end

core.register_action('ratelimitd', { 'http-req' }, function(txn, url, mode, timeout)
    check(txn, url, mode == 'closed' and 'closed' or 'open', tonumber(timeout) or 200)
end, 3)
