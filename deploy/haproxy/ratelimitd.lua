-- deploy/haproxy/ratelimitd.lua — ask ratelimitd before HAProxy forwards a
-- request (HAProxy 2.6+, its Lua TCP socket).  See haproxy.cfg next to it;
-- tests/integration/test_haproxy.py runs both against a real haproxy.
--
--   http-request lua.ratelimitd http://127.0.0.1:8080 open 200
--                              ^ ratelimitd        ^ when it cannot answer:
--                                                    open | closed
--                                                         ^ timeout, ms
--
-- The check is POST /check?body=none with the original path (no query) and
-- method in the body, the client's address in X-Forwarded-For (HAProxy's own
-- view of it, never the client's header) and the client's X-Api-Key header if
-- it sent one; the client's body is never sent, so a client cannot pick its
-- key, policy or cost.  Results, as transaction variables for the rules in
-- haproxy.cfg:
--
--   txn.rl_status       200 | 429 from ratelimitd; 400 when ratelimitd refused
--                       the check as the client's fault (any other 4xx: a path
--                       that cannot be normalised, say) -- it is denied, never
--                       let through; 503 when ratelimitd could not answer
--                       (refused, timed out, 5xx, a broken answer) and the
--                       mode is closed; unset when it failed open
--   txn.rl_retry_after, txn.rl_limit, txn.rl_remaining, txn.rl_reset,
--   txn.rl_policy, txn.rl_ratelimit   the answer's Retry-After, X-RateLimit-*,
--                       RateLimit-Policy and RateLimit headers
--
-- Why a TCP socket and not core.httpclient: 2.6's httpclient retries a check
-- it could not make 3 times, 1 s apart when the connection is refused (a
-- ratelimitd that is down cost every request 3 s) and at once when it times
-- out (4 x the timeout when hung, and a late answer counted up to 4 times),
-- and 2.6 has no setting for it.  Here every check is one HTTP/1.1 exchange on
-- a connection of its own, bounded as a whole by the timeout (each wait gets
-- what is left of it), never retried.  The cost is a connection per check (a
-- Lua socket cannot outlive its transaction): a loopback connect, some tens
-- of microseconds; ratelimitd closes it after its answer (Connection: close),
-- so the TIME_WAIT stays on ratelimitd's side.  Keep the timeout above
-- ratelimitd's redis.timeout (50 ms by default: it answers by then, from Redis
-- or from its failure_mode).

local function json_string(s)
    s = s:gsub('[%c"\\]', function(c)
        if c == '"' then return '\\"' end
        if c == '\\' then return '\\\\' end
        return string.format('\\u%04x', c:byte())
    end)
    return '"' .. s .. '"'
end

-- the answer's headers the rules in haproxy.cfg pass on
local copied = {
    ['retry-after'] = 'txn.rl_retry_after',
    ['x-ratelimit-limit'] = 'txn.rl_limit',
    ['x-ratelimit-remaining'] = 'txn.rl_remaining',
    ['x-ratelimit-reset'] = 'txn.rl_reset',
    ['ratelimit-policy'] = 'txn.rl_policy',
    ['ratelimit'] = 'txn.rl_ratelimit',
}

-- "http://host:port" -> host, port (a name is resolved by the socket)
local function parse_url(url)
    local host, port = url:match('^http://%[?([%w%.%-:]-)%]?:(%d+)/?$')
    if host == nil then
        host = url:match('^http://([%w%.%-]+)/?$')
        port = 80
    end
    return host, tonumber(port)
end

-- ms since some fixed point, for the check's own deadline
local function now_ms()
    local t = core.now()
    return t.sec * 1000 + t.usec / 1000
end

-- One check: status and the headers named in `copied`, or nil and why.
local function ask(host, port, timeout_ms, request)
    local deadline = now_ms() + timeout_ms
    local s = core.tcp()
    local function left()
        local ms = deadline - now_ms()
        if ms <= 0 then
            return nil
        end
        s:settimeout(ms / 1000)
        return ms
    end
    local function fail(why)
        s:close()
        return nil, why
    end
    left()
    local ok, err = s:connect(host, port)
    if not ok then
        return fail('connect: ' .. tostring(err))
    end
    if not left() or not s:send(request) then
        return fail('send: timed out or closed')
    end
    if not left() then
        return fail('timed out')
    end
    local line = s:receive('*l')
    if line == nil then
        return fail('no answer within ' .. timeout_ms .. ' ms')
    end
    local status = tonumber(line:match('^HTTP/1%.%d (%d%d%d)'))
    if status == nil then
        return fail('not an HTTP answer: ' .. line:sub(1, 60))
    end
    local headers = {}
    while true do
        if not left() then
            return fail('timed out in the head')
        end
        line = s:receive('*l')
        if line == nil then
            return fail('closed in the head')
        end
        line = line:gsub('\r$', '')
        if line == '' then
            break
        end
        local name, value = line:match('^([^:]+):%s*(.-)%s*$')
        if name ~= nil and copied[name:lower()] ~= nil then
            headers[name:lower()] = value
        end
    end
    -- ?body=none: the answer has no body; the connection ends here
    s:close()
    return status, headers
end

local function check(txn, url, mode, timeout_ms)
    local start = now_ms()
    local function failed(why)
        if mode == 'closed' then
            txn:set_var('txn.rl_status', 503)
            txn:set_var('txn.rl_retry_after', '1')
        end
        core.Warning(string.format('ratelimitd: cannot check (%s) after %d ms, failing %s', why,
                                   now_ms() - start, mode))
    end
    local host, port = parse_url(url)
    if host == nil then
        return failed('not a URL: http://host:port: ' .. tostring(url))
    end
    local body = '{"path":' .. json_string(txn.sf:path() or '/') ..
                 ',"method":' .. json_string(txn.sf:method() or 'GET') .. '}'
    local head = {
        'POST /check?body=none HTTP/1.1',
        'Host: ratelimitd',
        'Content-Type: application/json',
        'Content-Length: ' .. #body,
        'Connection: close',
        'X-Forwarded-For: ' .. txn.sf:src(),
    }
    local key = txn.sf:req_fhdr('x-api-key')
    -- a header value cannot hold CR or LF; anything else odd is not sent
    if key ~= nil and key ~= '' and not key:find('[%c]') then
        head[#head + 1] = 'X-Api-Key: ' .. key
    end
    local status, headers = ask(host, port, timeout_ms,
                                table.concat(head, '\r\n') .. '\r\n\r\n' .. body)
    if status == nil then
        return failed(headers)
    end
    if status >= 500 or (status ~= 200 and status < 400) then
        -- ratelimitd's own failure: failure_mode closed, overloaded, draining
        return failed('status ' .. status)
    end
    if status >= 400 and status ~= 429 then
        -- the client's doing (a path that cannot be normalised, ...), or a
        -- misconfiguration: never a reason to let the request through
        core.Warning(string.format('ratelimitd: refused the check (status %d): denying', status))
        status = 400
    end
    txn:set_var('txn.rl_status', status)
    for name, var in pairs(copied) do
        if headers[name] ~= nil then
            txn:set_var(var, headers[name])
        end
    end
end

core.register_action('ratelimitd', { 'http-req' }, function(txn, url, mode, timeout)
    check(txn, url, mode == 'closed' and 'closed' or 'open', tonumber(timeout) or 200)
end, 3)
