--[[ job_submit.lua — rsa-scheduler's Slurm job_submit/lua plugin (Slurm 22.05, Lua 5.1).

The RSA's own job_submit.lua, for a site that has none: the site's settings (CONFIG), and
Slurm's two entry points, which hand every submission and modification to the RSA's
module, rsa_job_submit.lua, loaded from this file's own directory. All the logic
(#RSA_* directives checked and stored in admin_comment, the start and dependency holds,
native mode's #BB_LUA line, the lock-in guard) is there: docs/job_submit.md.

A site that already has a job_submit.lua keeps its own and calls the module from it
instead of installing this file (docs/job_submit.md, "A site's own job_submit.lua";
examples/site-job_submit.lua):

    local rsa = dofile("/etc/slurm/rsa_job_submit.lua")
    rsa.configure({ slurm_user_uid = 64030 })
    function slurm_job_submit(job_desc, part_list, submit_uid)
      ... the site's own checks ...
      return rsa.submit(job_desc, part_list, submit_uid)
    end

Rules (docs/job_submit.md, /work/shared/style.md): runs inside slurmctld under its locks,
so submission is pure string work: no I/O, no processes; the only I/O is loading the
module, once, at load. Globals: Slurm's two entry points and `rsa_job_submit` (tests).
]]

-- ---------------------------------------------------------------------------------------
-- Site configuration

local CONFIG = {
  -- QOS the RSA daemon gives a job after stage-in (rsa config: slurm.lockin.qos).
  lockin_qos = "rsa-lockin",
  -- Priority-mode lock-in (rsa config: slurm.lockin.method=priority, the default): a job
  -- whose priority is at least this is treated as locked in too, so its user can neither
  -- lower it to just below (a fixed place above every other job that rsad's restore
  -- would leave alone) nor change its nice. Must equal slurm.lockin.priority (the default
  -- is rsa's default) and lie above every ordinary job's priority (rsad checks its own
  -- value at start-up). nil = off.
  lockin_priority = 4294967000,
  -- uid of SlurmUser (`id -u slurm`); root (uid 0) is always privileged.
  slurm_user_uid = nil,
  -- Early-start policy of jobs that do not choose one (rsa config: staging.early_start;
  -- keep the two equal). With `wait`, an RSA job is held at submission (its begin time
  -- set to now + wait_timeout, " hold=<deadline>" appended to its admin_comment) until
  -- rsad has its RAMDISK ready and releases it; Slurm releases it by itself at the
  -- deadline (docs/architecture.md, "Holding a job until its RAMDISK is ready").
  early_start = "wait",
  -- Seconds a job may be held for its RAMDISK (rsa config: staging.wait_timeout).
  wait_timeout = 1800,
  -- Dependents (issue 32): seconds a job submitted with a dependency on another job's
  -- end is held until rsad has looked at its parents (a year, as rsad's own dependency
  -- hold); a dependency added later (scontrol update) holds the job until rsad has
  -- looked at it, however long (its begin time in 2106). false = both off
  -- (docs/job_submit.md, "Dependents").
  dependency_hold = 365 * 86400,
  -- Native mode (rsa config: slurm.mode=native, docs/design/native-mode.md): the
  -- burst_buffer.conf Directive= word (Slurm's default "BB_LUA"). nil = queue mode.
  bb_directive = nil,
  -- Native mode: the burst buffer pool the "#BB_LUA" line names for a job that asks for
  -- no tier, or for `auto` (rsa config: allocation.default_tier, when a node tier).
  bb_pool = "ram",
}

-- ---------------------------------------------------------------------------------------
-- The module, from this file's own directory (Slurm loads this file with luaL_loadfile:
-- its chunk name is "@<path>"), read once at load, never per submission. If it is
-- missing or broken the load fails with one line naming it (slurmctld's log).

local SOURCE = debug and debug.getinfo and debug.getinfo(1, "S").source or ""
local HERE = SOURCE:match("^@(.*[/\\])") or (SOURCE:sub(1, 1) == "@" and "./") or nil
local MODULE = (HERE or "") .. "rsa_job_submit.lua"
local DOCS = " (docs/job_submit.md, \"Deploying on a cluster\")"

local chunk, err = loadfile(MODULE)
if chunk == nil then
  error("rsa job_submit.lua: cannot load " .. MODULE .. " (" .. tostring(err) .. "): "
    .. "install it beside job_submit.lua, from the same rsa-scheduler version" .. DOCS, 0)
end
local rsa = chunk()
rsa.configure(CONFIG)

-- ---------------------------------------------------------------------------------------
-- Slurm entry points: the RSA's, nothing else (what sbatch shows: docs/job_submit.md)

function slurm_job_submit(job_desc, part_list, submit_uid) -- luacheck: ignore (Slurm API)
  return rsa.submit(job_desc, part_list, submit_uid)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid) -- luacheck: ignore
  return rsa.modify(job_desc, job_rec, part_list, modify_uid)
end

-- For tests (tests/lua/run_vector.lua) and curious admins; Slurm ignores it.
rsa_job_submit = rsa -- luacheck: ignore

return slurm.SUCCESS -- load status for slurm_lua_loadscript
