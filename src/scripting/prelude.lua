-- Tessera's Lua sandbox, run once per VM on the raw globals. `prims` holds the
-- primitives implemented in Rust. Returns the entry points the engine uses.
local prims = ...
local G = _G
local error, type, tostring, rawget, rawset = error, type, tostring, rawget, rawset
local setmetatable, getmetatable, select, pairs = setmetatable, getmetatable, select, pairs
local xpcall, pcall, setfenv, loadstring = xpcall, pcall, setfenv, loadstring
local frame_prim = prims.frame
local call_prim = prims.call

-- Readonly tables: empty proxies whose writes fail, as Redis 7.0's readonly tables
-- do. RO maps each proxy to the table it stands for (rawget / next read that one);
-- the raw writers (rawset, setmetatable, table.insert) refuse every key of RO. Both
-- wrappers are Rust (prims.guard / prims.through). getmetatable of a proxy gives
-- HIDDEN, which the wrapped getmetatable turns into nil, as Redis answers.
local RO = setmetatable({}, {__mode = 'k'})
local function ro_error() error("Attempt to modify a readonly table", 2) end
local HIDDEN = {}
local META = setmetatable({}, {__newindex = ro_error, __metatable = HIDDEN})
RO[META] = HIDDEN
RO[HIDDEN] = HIDDEN
local function readonly(inner)
  local p = setmetatable({}, {__index = inner, __newindex = ro_error, __metatable = HIDDEN})
  RO[p] = inner
  return p
end
local function missing(_, k)
  error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
end
local function raise(msg) error({err = 'ERR ' .. msg}) end

-- The redis API.
local R = {}
-- redis.call raises from Rust (a C function keeps the caller's frame for the error's
-- line even in `return redis.call(...)`); the raised value is a marker that
-- `pending` turns back into Redis's {err=...} table wherever Lua code can see it.
R.call = call_prim
R.pcall = prims.pcall
-- Errors raised in Rust reach Lua as userdata: `unmark` turns them into the
-- pending {err=...} table of a failed redis.call, or into their message.
local unmark = prims.unmark
local function fix_pcall(ok, ...)
  if ok then return ok, ... end
  return false, unmark((...))
end
R.acl_check_cmd = prims.acl_check
R.sha1hex = function(...)
  if select('#', ...) ~= 1 then raise("wrong number of arguments") end
  return prims.sha1hex(...)
end
local function error_table(code_msg)
  local s = code_msg
  local code, msg
  local sp = s:find(' ', 1, true)
  if not sp then code, msg = 'ERR', s:sub(2) else code, msg = s:sub(2, sp - 1), s:sub(sp + 1) end
  msg = msg:gsub('^[\r\n]+', ''):gsub('[\r\n]+$', '')
  return {err = code .. ' ' .. msg}
end
R.error_reply = function(...)
  local e = ...
  if select('#', ...) ~= 1 or type(e) ~= 'string' then return {err = 'ERR wrong number or type of arguments'} end
  if e:sub(1, 1) ~= '-' then e = '-' .. e end
  return error_table(e)
end
R.status_reply = function(...)
  local s = ...
  if select('#', ...) ~= 1 or type(s) ~= 'string' then return {err = 'ERR wrong number or type of arguments'} end
  return {ok = s}
end
R.log = function(...)
  local n = select('#', ...)
  if n < 2 then raise("redis.log() requires two arguments or more.") end
  local level = ...
  if type(level) ~= 'number' then raise("First argument must be a number (log level).") end
  if level < 0 or level > 3 then raise("Invalid debug level.") end
  local parts = {}
  for i = 2, n do
    local v = select(i, ...)
    if type(v) == 'string' or type(v) == 'number' then parts[#parts + 1] = tostring(v) end
  end
  prims.log(level, table.concat(parts, ' '))
end
R.setresp = function(...)
  if select('#', ...) ~= 1 then raise("redis.setresp() requires one argument.") end
  local v = ...
  if v ~= 2 and v ~= 3 then raise("RESP version must be 2 or 3.") end
  prims.setresp(v)
end
R.set_repl = function(...)
  if select('#', ...) ~= 1 then raise("redis.set_repl() requires one argument.") end
  local v = ...
  if type(v) ~= 'number' or v < 0 or v > 3 or v % 1 ~= 0 then
    raise("Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.")
  end
  prims.set_repl(v)
end
R.replicate_commands = function() return true end
R.breakpoint = function() return false end
R.debug = function() end
local constants = {
  LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3,
  REPL_NONE = 0, REPL_AOF = 1, REPL_SLAVE = 2, REPL_REPLICA = 2, REPL_ALL = 3,
  REDIS_VERSION = prims.version, REDIS_VERSION_NUM = prims.version_num,
}
for k, v in pairs(constants) do R[k] = v end

-- Globals: drop what a script must not reach, make libraries readonly.
local S = {}
for k, v in pairs(G) do S[k] = v end
for _, name in pairs({'print', 'loadfile', 'dofile', 'load', 'module', 'require',
                      'setfenv', 'getfenv', 'newproxy', 'package', 'io', 'os'}) do
  S[name] = nil
end
-- Chunks load as text only, in Rust (never bytecode, whatever the script changed).
S.loadstring = prims.loadstring
S.load = prims.load
S.setmetatable = prims.guard(setmetatable, RO)
S.rawset = prims.guard(rawset, RO)
S.rawget = prims.through(rawget, RO)
S.next = prims.through(next, RO)
local snext = S.next
-- Lua's pairs hands out the table it iterates: for a proxy that would be the table
-- behind it, so pairs here iterates through `next` and hands out the proxy.
S.pairs = function(t)
  if type(t) ~= 'table' then return pairs(t) end
  return snext, t, nil
end
S.getmetatable = prims.hide(getmetatable, HIDDEN)
S.pcall = function(...) return fix_pcall(pcall(...)) end
local T = {}
for k, v in pairs(table) do T[k] = v end
T.insert = prims.guard(table.insert, RO)
S.string = readonly(string)
S.table = readonly(T)
S.math = readonly(math)
-- Coroutines carry the time-limit hook while they run (see vm.rs install_hook_on):
-- resume moves it onto the coroutine and back onto the resumer; wrap is rebuilt on
-- that resume (5.1's C wrap would resume without it), with 5.1's error rules.
local co_create, co_resume, hook_thread = coroutine.create, coroutine.resume, prims.hook_thread
local unpack_all = unpack
local function back_on_resumer(...)
  hook_thread(nil)
  return ...
end
local function resume(co, ...)
  if type(co) ~= 'thread' then return co_resume(co, ...) end
  hook_thread(co)
  return back_on_resumer(co_resume(co, ...))
end
local function pack(...) return {n = select('#', ...), ...} end
local C = {}
for k, v in pairs(coroutine) do C[k] = v end
C.resume = resume
C.wrap = function(f)
  local co = co_create(f)
  return function(...)
    local r = pack(resume(co, ...))
    if r[1] then return unpack_all(r, 2, r.n) end
    local e = r[2]
    -- 5.1's auxwrap prefixes a string (or number) error with the caller's position.
    if type(e) == 'string' or type(e) == 'number' then error(e, 2) end
    error(e, 0)
  end
end
S.coroutine = readonly(C)
S.cjson = readonly(prims.cjson)
S.cmsgpack = readonly(prims.cmsgpack)
S.bit = readonly(prims.bit)
S.struct = readonly(prims.struct)
S.redis = readonly(R)
-- The globals table itself stays empty, so every assignment to a global reaches
-- __newindex; lookups go through to S, and from S to `missing`.
-- All of it: the names dropped from S above (print, dofile...) are still in G.
for k in pairs(G) do G[k] = nil end
S._G = G
RO[G] = S
setmetatable(S, {__index = missing})
-- getmetatable(_G) answers a readonly view: its __index is `missing`, as in Redis.
setmetatable(G, {__index = S, __newindex = ro_error, __metatable = readonly({__index = missing})})

-- The string metatable is shared by every string of the VM, so every later script
-- would see a change to it. getmetatable('') answers a readonly view whose __index
-- is the readonly `string`; the real metatable and library stay out of reach.
local smt = getmetatable('')
rawset(smt, '__metatable', readonly({__index = S.string}))

-- Function libraries: their chunks see F, whose lookups go to the load API while
-- FUNCTION LOAD runs them and to the globals when their functions run.
local loading, registered = false, nil
local flag_bits = {['no-writes'] = 1, ['allow-oom'] = 2, ['allow-stale'] = 4,
                   ['no-cluster'] = 8, ['allow-cross-slot-keys'] = 16}
local function register_function(...)
  if not loading then raise("redis.register_function can only be called on FUNCTION LOAD command") end
  local n = select('#', ...)
  local name, cb, desc, fl
  if n == 1 then
    local t = ...
    if type(t) ~= 'table' then
      raise("calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).")
    end
    for k, v in pairs(t) do
      if k == 'function_name' then
        if type(v) ~= 'string' then raise("function_name argument given to redis.register_function must be a string") end
        name = v
      elseif k == 'callback' then
        if type(v) ~= 'function' then raise("callback argument given to redis.register_function must be a function") end
        cb = v
      elseif k == 'description' then
        if type(v) ~= 'string' then raise("description argument given to redis.register_function must be a string") end
        desc = v
      elseif k == 'flags' then
        if type(v) ~= 'table' then raise("flags argument to redis.register_function must be a table representing function flags") end
        local set = {}
        for _, f in pairs(v) do
          if type(f) ~= 'string' or not flag_bits[f] then raise("unknown flag given") end
          set[f] = true
        end
        fl = 0
        for f in pairs(set) do fl = fl + flag_bits[f] end
      else
        raise("unknown argument given to redis.register_function")
      end
    end
    if name == nil then raise("redis.register_function must get a function name argument") end
    if cb == nil then raise("redis.register_function must get a callback argument") end
  elseif n == 2 then
    name, cb = ...
    if type(name) ~= 'string' then raise("first argument to redis.register_function must be a string") end
    if type(cb) ~= 'function' then raise("second argument to redis.register_function must be a function") end
  else
    raise("wrong number of arguments to redis.register_function")
  end
  if name == '' or name:find('[^%w_]') then
    raise("Library names can only contain letters, numbers, or underscores(_) and must be at least one character long")
  end
  local key = name:lower()
  if registered[key] then raise("Function already exists in the library") end
  registered[key] = {name, cb, desc, fl or 0}
end
local LR = setmetatable({register_function = register_function, log = R.log}, {__index = missing})
for k, v in pairs(constants) do LR[k] = v end
local LOAD_API = setmetatable({redis = readonly(LR)}, {__index = missing})
local FM = {__index = S, __newindex = ro_error, __metatable = META}
local F = setmetatable({}, FM)
RO[F] = true

local function load_library(chunk)
  setfenv(chunk, F)
  registered, loading, FM.__index = {}, true, LOAD_API
  local ok, err = pcall(chunk)
  loading, FM.__index = false, S
  local r = registered
  registered = nil
  return ok, err, r
end

-- Running: errors become {err=, source=, line=} with the innermost user frame.
local function handler(e)
  e = unmark(e)
  local source, line = frame_prim()
  local msg
  if type(e) == 'table' and type(rawget(e, 'err')) == 'string' then
    msg = rawget(e, 'err')
  else
    msg = 'ERR ' .. tostring(e)
  end
  local r = {err = msg}
  if source then r.source, r.line = source, line end
  -- A redis.call error was counted when its command failed (Redis's flag).
  if type(e) == 'table' and rawget(e, 'ignore_error_stats_update') then
    r.ignore_error_stats_update = true
  end
  return r
end
local function run(f, a, b)
  return xpcall(function() return f(a, b) end, handler)
end

return run, load_library, S
