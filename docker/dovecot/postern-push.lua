-- Postern push hints (docs/watch.md): Dovecot's push_notification Lua driver calls this for every
-- mailbox event of every user; at the end of each transaction it POSTs one small JSON hint,
-- {"user": "...", "mailboxes": ["INBOX", ...]}, to Postern's internal hint listener. A hint only
-- says "this inbox changed": Postern then syncs the inbox over IMAP (CONDSTORE/QRESYNC), so
-- nothing here needs to be complete or exact, and a hint lost (Postern down) is caught by
-- Postern's sweep. Needs only Dovecot's own Lua HTTP client (dovecot.http, Dovecot 2.3.19+).
--
-- Settings (plugin block): postern_push_url (http://host:port/hints), postern_push_secret
-- (sent as "Authorization: Bearer <secret>"), postern_push_timeout_ms (default 1000).

local client = nil
-- After a failed POST (Postern down or restarting) this process sends no hints for a while:
-- Dovecot's client makes each later request to a refusing address wait a doubling connect
-- backoff (measured: 1 s per APPEND after ten refusals, 60 s with the defaults), and the mail
-- app's command waits with it. Postern's sweep, which also runs at its start, finds what changed.
local quiet_until = 0
local QUIET_SECS = 10

local function http_client(user)
  if client == nil then
    local timeout = tonumber(user:plugin_getenv("postern_push_timeout_ms") or "") or 1000
    -- One attempt, a short timeout: the mail app's command waits for this POST, and a lost
    -- hint costs only latency (the sweep finds the change). No connect backoff: by default,
    -- after one refused connection Dovecot's client makes every later request to that address
    -- wait out a backoff growing to 60 s, and the mail app's APPEND with it (seen here).
    client = dovecot.http.client({
      request_timeout_msecs = timeout,
      request_absolute_timeout_msecs = timeout,
      soft_connect_timeout_msecs = timeout,
      max_attempts = 1,
      max_connect_attempts = 1,
      connect_backoff_time_msecs = 1,
      connect_backoff_max_time_msecs = 1,
    })
  end
  return client
end

local function json_string(s)
  return '"' .. tostring(s):gsub('[%c"\\]', function(c)
    if c == '"' then return '\\"' end
    if c == '\\' then return '\\\\' end
    return string.format('\\u%04x', string.byte(c))
  end) .. '"'
end

function dovecot_lua_notify_begin_txn(user)
  return { user = user, mailboxes = {}, count = 0 }
end

local function changed(ctx, event)
  local box = event.mailbox or ""
  if ctx.mailboxes[box] == nil then
    ctx.mailboxes[box] = true
    ctx.count = ctx.count + 1
  end
end

dovecot_lua_notify_event_message_new = changed
dovecot_lua_notify_event_message_append = changed
dovecot_lua_notify_event_message_expunge = changed
dovecot_lua_notify_event_flags_set = changed
dovecot_lua_notify_event_flags_clear = changed
dovecot_lua_notify_event_mailbox_create = changed
dovecot_lua_notify_event_mailbox_delete = changed
dovecot_lua_notify_event_mailbox_rename = changed

function dovecot_lua_notify_end_txn(ctx)
  if ctx.count == 0 then return end
  local url = ctx.user:plugin_getenv("postern_push_url")
  if url == nil or url == "" then return end
  if os.time() < quiet_until then return end
  local boxes = {}
  for box in pairs(ctx.mailboxes) do table.insert(boxes, json_string(box)) end
  local body = '{"user":' .. json_string(ctx.user.username) .. ',"mailboxes":[' .. table.concat(boxes, ",") .. ']}'
  local req = http_client(ctx.user):request({ url = url, method = "POST" })
  req:add_header("Content-Type", "application/json")
  -- A secret read from a file ("<file") ends with its newline, and Dovecot panics (kills the mail
  -- app's session) on a header value holding CR or LF: keep only what a token may contain.
  local secret = (ctx.user:plugin_getenv("postern_push_secret") or ""):gsub("[^%w%-%._~+/=]", "")
  req:add_header("Authorization", "Bearer " .. secret)
  req:set_payload(body)
  local resp = req:submit()
  local status = resp:status()
  if status ~= 204 and status ~= 200 then
    quiet_until = os.time() + QUIET_SECS
    dovecot.i_warning("postern push hint for " .. ctx.user.username .. " not taken: " .. tostring(status) .. " " .. tostring(resp:reason()))
  end
end
