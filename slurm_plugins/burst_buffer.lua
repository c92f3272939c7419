--[[ rsa-scheduler's burst_buffer.lua: native mode (rsa config slurm.mode=native).

Slurm's burst_buffer/lua plugin (slurm.conf BurstBufferType=burst_buffer/lua) loads this
file from the directory of slurm.conf and calls the slurm_bb_* functions below; every job
with a "#BB_LUA" line (burst_buffer.conf Directive=; job_submit.lua adds it to RSA jobs
when its CONFIG.bb_directive is set) gets them. rsad does the work on the same state
machine, RAMDISKs, staging and verification as in queue mode (docs/design/native-mode.md).

Slurm 22.05 (Debian 12) calling conventions, as this file relies on them (24.11's after):
  * every argument is a string; return rc[, string]; Lua 5.1; all 11 functions must exist;
    the file is loaded afresh for every call (no state survives between calls);
  * slurm_bb_job_process, slurm_bb_pools and slurm_bb_paths run INSIDE slurmctld with its
    locks held: no network, no command, only a small local file read;
  * the others run as SlurmUser in a slurmscriptd child that Slurm kills at its timeout:
    each runs `rsa-bb HOOK JOB ...`, which asks rsad; data_in and data_out block until
    rsad answers staged-in / staged-out-and-verified (22.05 has no test_data_in/out);
  * a failed setup/data_in holds the job (Reason BurstBufferOperation, the message below);
    a failed data_out keeps the job in stage-out and its data on the RAMDISK.
Slurm 24.05 and later (24.11, Debian 13: tests/slurm_release runs this file under it) differ:
  * all 13 functions are required, slurm_bb_test_data_in/out too, and slurmctld stops if
    this file fails to load; each killable hook runs in a fresh slurmscriptd helper;
  * after data_in (data_out) Slurm calls test_data_in (test_data_out) every PollInterval
    (burst_buffer.conf) until it returns something other than slurm.SLURM_BB_BUSY ("BUSY")
    as its message, up to StageInTimeout (StageOutTimeout) for the whole stage. Here
    (CONFIG.poll unset: Slurm defines slurm.SLURM_BB_BUSY) data_in/data_out return at
    once and each test_data_* runs `rsa-bb --once`, one question to rsad: no helper
    process is held for a whole stage;
  * the hooks get more arguments (data_in: job_id, job_script, uid, gid) and the job's
    job_info table last (array ids, admin_comment...): this file reads none of them;
  * slurm_bb_get_status gets the caller's uid and gid first (from 23.02).
]]

-- ---------------------------------------------------------------------------------------
-- Site configuration

local CONFIG = {
  -- The hook client (the rsa-scheduler package's rsa-bb).
  rsa_bb = "/usr/bin/rsa-bb",
  -- rsad's API address for rsa-bb ("host:port" or a socket path); nil: RSA_API, else
  -- daemon.api of /etc/rsa/rsa.yaml.
  api = nil,
  -- The file rsad rewrites with the free RSA capacity per tier (rsa config
  -- slurm.bb_pools_file): slurm_bb_pools reports it to Slurm.
  pools_file = "/run/rsa/bb-pools.json",
  -- The pools (RSA tiers) reported with no space while that file does not exist yet
  -- (rsad not started since boot): Slurm refuses a job naming a pool it was never told
  -- of ("Burst Buffer request invalid"), and job_submit.lua's lines name one (its
  -- CONFIG.bb_pool, or the job's #RSA_TIER). Such jobs wait for space instead.
  pools = { "ram" },
  -- Whether slurm_bb_get_status's first two arguments are the caller's uid and gid, as
  -- Slurm 23.02 and later pass them: then `scontrol show bbstat` shows an operator every
  -- job, a user only their own. Slurm 22.05 passes only the words typed after "bbstat"
  -- (anyone can type "0"): there every caller gets the totals (RSA nodes free, held, out;
  -- jobs per rsa-state) and no job id. nil: as the running Slurm says, true from 24.05
  -- (its burst_buffer/lua defines slurm.SLURM_BB_BUSY; checked on 24.11 by
  -- tests/slurm_release), false before; set true by hand on 23.02 and 23.11.
  status_caller = nil,
  -- Whether Slurm polls test_data_in/test_data_out (24.05 and later): data_in/data_out
  -- then return at once and each poll asks rsad once (`rsa-bb --once`), answering BUSY
  -- while the stage runs. false: data_in/data_out block until rsad says done, as on
  -- 22.05. nil (or true): as the running Slurm says (slurm.SLURM_BB_BUSY defined:
  -- 24.05+). A Slurm that does not poll never gets the quick return, true or not: to
  -- it a data_in that returned says the input is staged, and the job would start
  -- without it (logged).
  poll = nil,
}

-- Slurm 24.05 and later define slurm.SLURM_BB_BUSY (burst_buffer_lua.c); 22.05 does not.
local function slurm_polls()
  return slurm.SLURM_BB_BUSY ~= nil
end

local function setting(value)
  if value == nil then
    return slurm_polls()
  end
  return value
end

-- Whether data_in/data_out return at once and Slurm's test_data_in/out polls ask rsad
-- (CONFIG.poll). Never on a Slurm that does not poll (22.05, 23.02, 23.11): there the
-- stage is done when data_in/data_out return, so they must block until rsad says so.
local function polls()
  if CONFIG.poll == false then
    return false
  end
  if not slurm_polls() then
    if CONFIG.poll then
      slurm.log_error("rsa: CONFIG.poll is true, but this Slurm does not poll "
        .. "slurm_bb_test_data_in/out (no slurm.SLURM_BB_BUSY): data_in and data_out "
        .. "block until rsad is done")
    end
    return false
  end
  return true
end

-- ---------------------------------------------------------------------------------------
-- Helpers

-- One shell word: everything single-quoted (job ids, uids, pool names, "true"...).
local function quote(word)
  return "'" .. tostring(word):gsub("'", "'\\''") .. "'"
end

-- What marks a line of rsa-bb's stderr in the pipe (ASCII RS): rsa-bb's stdout lines
-- come as they are, its stderr lines each behind this byte.
local STDERR = "\030"

-- The command line of `rsa-bb HOOK ARGS...`. Its answer is read from its stdout alone:
-- a line rsa-bb's stderr carries (a Python warning, a library's message, sh's "not
-- found") is never taken for it, even one starting with "ok", nor breaks it. stderr
-- comes through the same pipe, each line whole behind STDERR (one printf per line), to
-- be logged (ask) and, when there is no answer at all, to say why. No file is made:
-- nothing is left behind when Slurm kills the hook at its timeout.
local function command(hook, args, once)
  local parts = { quote(CONFIG.rsa_bb) }
  if CONFIG.api ~= nil then
    parts[#parts + 1] = "--api " .. quote(CONFIG.api)
  end
  if once then
    parts[#parts + 1] = "--once"
  end
  parts[#parts + 1] = quote(hook)
  for _, a in ipairs(args) do
    parts[#parts + 1] = quote(a)
  end
  return "{ " .. table.concat(parts, " ") .. " 2>&1 1>&3 3>&- | "
    .. "while IFS= read -r l || [ -n \"$l\" ]; do printf '\\036%s\\n' \"$l\"; done; } 3>&1"
end

-- A failure's message as Slurm keeps it: the job's reason (squeue's Reason, which rsad
-- reads in its `squeue -O ...|` line) or bbstat's text. One line, no `|`: a message may
-- name a user's file, and a newline or `|` in the reason would shift rsad's columns or
-- forge a whole row of another job (seen on real 24.11 and 26.05: tests/slurm_release).
-- `|` is written %7C, as in the admin_comment.
local function one_line(text)
  return (tostring(text):gsub("%c+", " "):gsub("|", "%%7C"))
end

-- What came through command's pipe -> rsa-bb's stdout lines, its stderr lines.
local function split_output(out)
  local stdout, stderr = {}, {}
  for line in (out or ""):gmatch("[^\n]+") do
    if line:sub(1, 1) == STDERR then
      stderr[#stderr + 1] = line:sub(2)
    else
      stdout[#stdout + 1] = line
    end
  end
  return stdout, stderr
end

-- rsa-bb's output (command's pipe) -> rc, message, its stderr ("" if none). The answer
-- is the first line of its stdout starting with "ok", "busy" (--once: the stage still
-- runs; Slurm's BUSY, rsa-bb's text logged) or "error"; the stdout lines after it
-- belong to the message (bbstat's lines). Without one, the last words of all it printed
-- are the message.
local function parse_answer(out, hook, what)
  local stdout, stderr = split_output(out)
  local answer, rest = nil, {}
  for _, line in ipairs(stdout) do
    if answer == nil then
      local word, text = line:match("^(%a+)%s?(.*)$")
      if word == "ok" or word == "error" or (word == "busy" and slurm.SLURM_BB_BUSY) then
        answer = { word = word, text = text }
      end
    else
      rest[#rest + 1] = line
    end
  end
  local errors = table.concat(stderr, "\n")
  if answer == nil then
    local tail = (out or ""):gsub(STDERR, ""):gsub("%s+", " "):gsub(" $", ""):sub(-200)
    return slurm.ERROR, one_line("rsa-bb " .. hook .. " gave no answer (is " .. CONFIG.rsa_bb
      .. " installed and rsa-scheduler's config readable by SlurmUser?): " .. tail), ""
  end
  local text = answer.text
  if #rest > 0 then
    text = text .. "\n" .. table.concat(rest, "\n")
  end
  if answer.word == "ok" then
    return slurm.SUCCESS, text, errors
  end
  if answer.word == "busy" then
    slurm.log_info("rsa: %s: %s", what or hook, text)
    return slurm.SUCCESS, slurm.SLURM_BB_BUSY, errors
  end
  return slurm.ERROR, one_line(text), errors
end

-- Run rsa-bb for one killable hook (slurmscriptd child; never inside slurmctld).
local function ask(once, hook, ...)
  local job_id = ... -- nil for get_status (its argument is a uid)
  if hook == "status" then
    job_id = nil
  end
  local cmd = command(hook, { ... }, once)
  local pipe = io.popen(cmd)
  if pipe == nil then
    return slurm.ERROR, one_line("cannot run " .. CONFIG.rsa_bb)
  end
  local out = pipe:read("*a")
  pipe:close()
  local what = job_id and (hook .. " of job " .. tostring(job_id)) or hook
  local rc, text, errors = parse_answer(out, hook, what)
  if errors ~= "" then -- slurmctld's log (the message given without it was the answer)
    slurm.log_info("rsa: %s: rsa-bb's stderr: %s", what, one_line(errors):sub(-1000))
  end
  if rc ~= slurm.SUCCESS then
    slurm.log_error("rsa: %s: %s", what, text)
  end
  return rc, text
end

-- Run rsa-bb for one killable hook (slurmscriptd child; never inside slurmctld).
local function ask_rsad(hook, ...)
  return ask(false, hook, ...)
end

-- ---------------------------------------------------------------------------------------
-- In slurmctld, locks held: fast, local only

-- At submission. The #RSA_ directives were checked by job_submit.lua in the same RPC
-- (before this; a bad one was rejected with its line there), so nothing is read here.
function slurm_bb_job_process(job_script) -- luacheck: ignore (Slurm API)
  return slurm.SUCCESS
end

-- CONFIG.pools with no space, as rsad's JSON would give them.
local function empty_pools()
  local items = {}
  for _, name in ipairs(CONFIG.pools) do
    items[#items + 1] = string.format(
      '{"free": 0, "granularity": 1048576, "id": "%s", "quantity": 0}', name)
  end
  if #items == 0 then
    return nil
  end
  return '{"pools": [' .. table.concat(items, ", ") .. "]}"
end

-- Every 30 s: one pool per RSA tier, from the file rsad rewrites (no network here). No
-- file (rsad not started yet): CONFIG.pools with no space, and the plugin stays up.
function slurm_bb_pools() -- luacheck: ignore (Slurm API)
  local f = io.open(CONFIG.pools_file, "r")
  if f == nil then
    return slurm.SUCCESS, empty_pools()
  end
  local text = f:read("*a") or ""
  f:close()
  text = text:gsub("%s+$", "")
  if text:sub(1, 1) ~= "{" or #text > 65536 then
    slurm.log_error("rsa: %s is not rsad's pools JSON: no pools reported", CONFIG.pools_file)
    return slurm.SUCCESS
  end
  return slurm.SUCCESS, text
end

-- When the job is about to start: its environment. The RSA_STATE, RSA_DATA_IN... the
-- job sees are set at start by the SPANK plugin / Prolog as in queue mode; this only
-- says the job is served in native mode. Slurm 24.11 and 26.05 give a task split off an
-- array a path file in a directory that does not exist (its job id's, where the array's
-- script is kept under the array's id): that task goes without RSA_MODE. A failure
-- here would make Slurm hold the task ("Burst Buffer request invalid") with its input
-- staged, for a variable that only names the mode (found in the cluster lab on 24.11).
function slurm_bb_paths(job_id, job_script, path_file) -- luacheck: ignore (Slurm API)
  local f = io.open(path_file, "a")
  if f == nil then
    slurm.log_info("rsa: paths of job %s: cannot write %s: the job runs without RSA_MODE",
      tostring(job_id), tostring(path_file))
    return slurm.SUCCESS
  end
  f:write("RSA_MODE=native\n")
  f:close()
  return slurm.SUCCESS
end

-- ---------------------------------------------------------------------------------------
-- In slurmscriptd, as SlurmUser, killed at Slurm's timeouts

function slurm_bb_setup(job_id, uid, gid, pool, bb_size, job_script) -- luacheck: ignore
  return ask_rsad("setup", job_id, uid, gid, pool, bb_size)
end

-- 22.05: blocks until rsad has staged the job in. 24.05+: returns at once; Slurm then
-- polls slurm_bb_test_data_in.
function slurm_bb_data_in(job_id, job_script) -- luacheck: ignore (Slurm API)
  if polls() then
    return slurm.SUCCESS, ""
  end
  return ask_rsad("data_in", job_id)
end

function slurm_bb_real_size(job_id) -- luacheck: ignore (Slurm API)
  return ask_rsad("real_size", job_id)
end

function slurm_bb_pre_run(job_id, job_script) -- luacheck: ignore (Slurm API)
  return ask_rsad("pre_run", job_id)
end

function slurm_bb_post_run(job_id, job_script) -- luacheck: ignore (Slurm API)
  return ask_rsad("post_run", job_id)
end

function slurm_bb_data_out(job_id, job_script) -- luacheck: ignore (Slurm API)
  if polls() then
    return slurm.SUCCESS, ""
  end
  return ask_rsad("data_out", job_id)
end

function slurm_bb_job_teardown(job_id, job_script, hurry) -- luacheck: ignore (Slurm API)
  return ask_rsad("teardown", job_id, hurry)
end

-- `scontrol show bbstat`: rsad's RSA nodes and jobs, as rsad shows the caller them when
-- Slurm says who that is (CONFIG.status_caller); else totals without job ids.
function slurm_bb_get_status(...) -- luacheck: ignore (Slurm API)
  if setting(CONFIG.status_caller) then
    local uid = ...
    if uid ~= nil and tostring(uid):match("^%d+$") then
      return ask_rsad("status", tostring(uid))
    end
  end
  return ask_rsad("status")
end

-- Slurm 24.05+ only, every PollInterval after data_in / data_out until not BUSY: one
-- question to rsad (`rsa-bb --once`). With CONFIG.poll false data_in/data_out blocked
-- until done, so a test is always done.
function slurm_bb_test_data_in(job_id, job_script) -- luacheck: ignore (Slurm API)
  if not polls() then
    return slurm.SUCCESS, ""
  end
  return ask(true, "data_in", job_id)
end

function slurm_bb_test_data_out(job_id, job_script) -- luacheck: ignore (Slurm API)
  if not polls() then
    return slurm.SUCCESS, ""
  end
  return ask(true, "data_out", job_id)
end

-- For tests (tests/unit/test_burst_buffer_lua.py); Slurm ignores it.
rsa_burst_buffer = { config = CONFIG, command = command, parse_answer = parse_answer, -- luacheck: ignore
  quote = quote, empty_pools = empty_pools }
