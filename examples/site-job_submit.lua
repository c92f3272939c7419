--[[ A site's own job_submit.lua that keeps its rules and chains the RSA's
(docs/job_submit.md, "A site's own job_submit.lua"). Slurm 22.05 loads one job_submit.lua
only (JobSubmitPlugins=lua): the site's, beside slurm.conf. It loads the RSA's module,
installed beside it, and hands each submission to it after its own checks.

Here the site's rules are an example: a default time limit of 30 minutes for jobs that
give none, and no job over one day. Put yours in their place. Installed and run for real
by the lab (tests/e2e/test_site_chaining.py).
]]

-- The RSA's module and the three files it loads, installed beside slurm.conf
-- (docs/job_submit.md, "Deploying on a cluster").
local RSA_MODULE = "/etc/slurm/rsa_job_submit.lua"
local rsa = dofile(RSA_MODULE)
-- The RSA's settings: the CONFIG keys of its own job_submit.lua (docs/job_submit.md).
rsa.configure({
  slurm_user_uid = nil, -- `id -u slurm`
})

local DEFAULT_MINUTES = 30
local MAX_MINUTES = 24 * 60

function slurm_job_submit(job_desc, part_list, submit_uid) -- luacheck: ignore (Slurm API)
  -- the site's own rules first: a job they refuse never reaches the RSA
  local limit = job_desc.time_limit
  if limit == nil or limit == slurm.NO_VAL then
    job_desc.time_limit = DEFAULT_MINUTES
  elseif limit > MAX_MINUTES then
    slurm.log_user("site: jobs may run at most one day here: submit with -t 1-0 or less")
    return slurm.ERROR
  end
  -- then the RSA's: refuses bad #RSA_ directives with their own messages, marks RSA jobs
  -- (admin_comment, begin time). Return its answer: slurm.SUCCESS or slurm.ERROR.
  return rsa.submit(job_desc, part_list, submit_uid)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid) -- luacheck: ignore
  -- the site's own rules for modifications would go here; then the RSA's lock-in guard
  return rsa.modify(job_desc, job_rec, part_list, modify_uid)
end

return slurm.SUCCESS
