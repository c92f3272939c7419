--[[ Drive slurm_plugins/job_submit.lua outside Slurm with a stubbed `slurm` table.

  lua run_vector.lua PLUGIN submit SCRIPT [SUBMIT_UID] [ADMIN_COMMENT]
                                                (RSA_LUA_DEPENDENCY, RSA_LUA_BEGIN,
                                                 RSA_LUA_TIME_LIMIT: job_desc.dependency,
                                                 .begin_time, .time_limit)
  lua run_vector.lua PLUGIN many SCRIPT...       (submit each; "FILE <path>" before each;
                                                 SCRIPT.spank, if present, holds its
                                                 spank_job_env; a missing SCRIPT: no script)
  lua run_vector.lua PLUGIN modify MODIFY_UID [job.FIELD=VALUE ...] [desc.FIELD=VALUE ...]
      [config.FIELD=VALUE ...]

Prints one line per fact, for tests/unit/test_job_submit_lua.py:
  RC <return code>          what the entry point returned
  SET <field> <value>       each job_desc field the plugin wrote
  MSG <line>                each line the user would see (slurm.log_user, joined by "\n"
                            as job_submit_lua.c does)
  LOG <line>                slurm.log_info/log_error lines (slurmctld's log)
Numbers in key=value arguments become Lua numbers; the string "nil" stays absent.
]]

local plugin, mode = arg[1], arg[2]

local user_msg = nil
local logs = {}
local fmt_unpack = unpack or table.unpack
slurm = { -- luacheck: ignore (the global job_submit_lua.c provides)
  SUCCESS = 0, ERROR = -1, FAILURE = -1, ESLURM_ACCESS_DENIED = 2002,
  NO_VAL = 4294967294, NO_VAL16 = 65534, INFINITE = 4294967295, NICE_OFFSET = 2147483648,
  user_msg = function(msg)
    user_msg = user_msg and (user_msg .. "\n" .. msg) or msg
  end,
  log_info = function(...) logs[#logs + 1] = string.format(fmt_unpack({ ... })) end,
}
slurm.log_user = function(...) slurm.user_msg(string.format(fmt_unpack({ ... }))) end
slurm.log_error, slurm.log_verbose, slurm.log_debug = slurm.log_info, slurm.log_info,
  slurm.log_info

dofile(plugin)

-- RSA_LUA_CONFIG="key=value,...": CONFIG settings for this run (the shared vectors run
-- with early_start=fallback: they check the grammar, not the start hold); RSA_LUA_NOW:
-- a fixed clock
-- (a site's own job_submit.lua has no rsa_job_submit global: its rsa.configure decides)
for pair in (rsa_job_submit and os.getenv("RSA_LUA_CONFIG") or ""):gmatch("[^,]+") do
  local key, value = pair:match("^([%w_]+)=(.*)$")
  assert(key, "bad RSA_LUA_CONFIG entry " .. pair)
  rsa_job_submit.config[key] = tonumber(value) or value
end
local fixed_now = tonumber(os.getenv("RSA_LUA_NOW") or "")
if fixed_now and rsa_job_submit then
  rsa_job_submit.config.now = function() return fixed_now end
end

-- job_desc: a proxy that records every write, as Slurm's __newindex would apply it
local function make_desc(fields)
  local writes, order = {}, {}
  local desc = setmetatable({}, {
    __index = fields,
    __newindex = function(_, k, v)
      if writes[k] == nil then order[#order + 1] = k end
      writes[k] = v
      fields[k] = v
    end,
  })
  return desc, writes, order
end

local function parse_value(text)
  if text == "nil" then return nil end
  return tonumber(text) or text
end

local function report(rc, writes, order)
  print("RC " .. string.format("%d", rc))
  for _, k in ipairs(order) do print("SET " .. k .. " " .. tostring(writes[k])) end
  if user_msg then
    for line in (user_msg .. "\n"):gmatch("(.-)\n") do print("MSG " .. line) end
  end
  for _, line in ipairs(logs) do print("LOG " .. line) end
  user_msg, logs = nil, {}
end

-- PATH.spank (optional): job_desc.spank_job_env, NUL-separated entries, indexed from 0
-- as job_submit_lua.c builds it. A script "-" means none (job_desc.script nil).
local function spank_env(path)
  local f = io.open(path .. ".spank", "rb")
  if not f then return nil end
  local data = f:read("*a")
  f:close()
  local env, n = {}, 0
  for entry in (data .. "\0"):gmatch("(.-)%z") do
    env[n] = entry
    n = n + 1
  end
  return env
end

local function submit(path, uid, admin_comment)
  local script = nil
  local f = io.open(path, "rb")
  if f then
    script = f:read("*a")
    f:close()
  end
  local desc, writes, order = make_desc({ script = script, user_id = 1001,
    spank_job_env = spank_env(path), admin_comment = admin_comment,
    dependency = os.getenv("RSA_LUA_DEPENDENCY"),
    begin_time = tonumber(os.getenv("RSA_LUA_BEGIN") or ""),
    time_limit = tonumber(os.getenv("RSA_LUA_TIME_LIMIT") or "") or slurm.NO_VAL })
  report(slurm_job_submit(desc, {}, uid), writes, order)
end

if mode == "submit" then
  submit(arg[3], tonumber(arg[4] or "1001"), arg[5])
elseif mode == "many" then
  for k = 3, #arg do
    print("FILE " .. arg[k])
    submit(arg[k], 1001)
  end
elseif mode == "hold" then
  -- arg[3]: the admin_comment; arg[4]: job_desc.begin_time ("nil" for none)
  local desc, writes, order = make_desc({ begin_time = parse_value(arg[4]) })
  print("COMMENT " .. rsa_job_submit.hold_comment(desc, arg[3]))
  report(0, writes, order)
elseif mode == "modify" then
  local job, fields = { job_id = 42, qos = "normal", priority = 100 }, {
    qos = nil, priority = slurm.NO_VAL, nice = slurm.NO_VAL, user_id = 1001 }
  for k = 4, #arg do
    local scope, key, value = arg[k]:match("^(%a+)%.([%w_]+)=(.*)$")
    assert(scope, "bad argument " .. arg[k])
    local target = ({ job = job, desc = fields, config = rsa_job_submit.config })[scope]
    target[key] = parse_value(value)
  end
  local desc, writes, order = make_desc(fields)
  report(slurm_job_modify(desc, job, {}, tonumber(arg[3])), writes, order)
else
  error("mode must be submit, many or modify")
end
