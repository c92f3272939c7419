--[[ Call one function of slurm_plugins/burst_buffer.lua outside Slurm, as Slurm 22.05's
burst_buffer/lua does: a stubbed `slurm` table (22.05 bb/lua has only logging and the
constants), every argument a string.

  lua run_bb.lua PLUGIN FUNCTION [ARG...]
  lua run_bb.lua PLUGIN defined               (prints each slurm_bb_* function defined)

RSA_BB_CONFIG="key=value,...": CONFIG settings for this run (e.g. rsa_bb=/tmp/fake).
RSA_BB_SLURM=24.11: the `slurm` table of Slurm 24.05 and later (SLURM_BB_BUSY defined).
Prints, for tests/unit/test_burst_buffer_lua.py:
  NRET <number of values returned>
  RC <first value>
  MSG <each line of the second value>
  LOG <each slurm.log_* line>
]]

local plugin, fn = arg[1], arg[2]
local logs = {}
local fmt_unpack = unpack or table.unpack
slurm = { -- luacheck: ignore (the global burst_buffer_lua.c provides)
  SUCCESS = 0, ERROR = -1, FAILURE = -1,
  log_info = function(...) logs[#logs + 1] = string.format(fmt_unpack({ ... })) end,
}
slurm.log_error, slurm.log_verbose, slurm.log_debug = slurm.log_info, slurm.log_info,
  slurm.log_info
-- RSA_BB_SLURM=24.11: the constant Slurm 24.05+'s burst_buffer/lua adds (burst_buffer_lua.c)
if os.getenv("RSA_BB_SLURM") == "24.11" then
  slurm.SLURM_BB_BUSY = "BUSY"
end

dofile(plugin)

for pair in (os.getenv("RSA_BB_CONFIG") or ""):gmatch("[^,]+") do
  local key, value = pair:match("^([%w_]+)=(.*)$")
  assert(key, "bad RSA_BB_CONFIG entry " .. pair)
  if value == "true" or value == "false" then
    rsa_burst_buffer.config[key] = value == "true"
  else
    rsa_burst_buffer.config[key] = value
  end
end

if fn == "defined" then
  local names = {}
  for name, value in pairs(_G) do
    if type(value) == "function" and name:match("^slurm_bb_") then
      names[#names + 1] = name
    end
  end
  table.sort(names)
  for _, name in ipairs(names) do print("FN " .. name) end
  return
end

local args = {}
for k = 3, #arg do args[#args + 1] = arg[k] end
local out = { _G[fn](fmt_unpack(args)) }
print("NRET " .. #out)
print("RC " .. tostring(out[1]))
if out[2] ~= nil then
  assert(type(out[2]) == "string", "the second value must be a string")
  for line in (out[2] .. "\n"):gmatch("(.-)\n") do print("MSG " .. line) end
end
for _, line in ipairs(logs) do print("LOG " .. line) end
