"""A site's own job_submit.lua chaining the RSA's module (slurm_plugins/rsa_job_submit.lua):
examples/site-job_submit.lua, installed as a site would (the module's files beside it),
run in real Lua with a stubbed ``slurm`` table (tests/lua/run_vector.lua). Both sides'
effects and refusals reach the job; the module's settings come from the site's
``rsa.configure``, and a setting it does not have fails the load in one line.
The same file runs in the lab's real slurmctld: tests/e2e/test_site_chaining.py."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.unit.test_job_submit_lua import (
    DRIVER,
    PLUGIN,
    PLUGIN_FILES,
    Result,
    _parse,
    lua,
)

__all__ = ["lua"]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "site-job_submit.lua"
MODULE_LINE = 'local RSA_MODULE = "/etc/slurm/rsa_job_submit.lua"'
CONFIG_LINE = "  slurm_user_uid = nil, -- `id -u slurm`"
#: the tests' settings: no start hold (tested on its own below)
SETTINGS = CONFIG_LINE + '\n  early_start = "fallback",'


def _site(tmp_path: Path, settings: str = SETTINGS) -> Path:
    """The site's job_submit.lua and the RSA's module files in one directory."""
    conf = tmp_path / "etc-slurm"
    conf.mkdir()
    for path in PLUGIN_FILES:
        if path != PLUGIN:  # the site keeps its own job_submit.lua
            shutil.copyfile(path, conf / path.name)
    text = EXAMPLE.read_text()
    assert text.count(MODULE_LINE) == 1 and text.count(CONFIG_LINE) == 1
    text = text.replace(MODULE_LINE, f'local RSA_MODULE = "{conf}/rsa_job_submit.lua"')
    (conf / "job_submit.lua").write_text(text.replace(CONFIG_LINE, settings))
    return conf


def _submit(lua: str, conf: Path, tmp_path: Path, script: str,
            time_limit: int | None = None) -> Result:
    path = tmp_path / "job.sh"
    path.write_text(script)
    env = {**os.environ, **({"RSA_LUA_TIME_LIMIT": str(time_limit)} if time_limit else {})}
    done = subprocess.run([lua, str(DRIVER), str(conf / "job_submit.lua"), "submit",
                           str(path)], capture_output=True, text=True, timeout=30,
                          check=False, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return _parse(done.stdout.rstrip("\n").split("\n"))


def test_both_sides_annotate_an_rsa_job(lua: str, tmp_path: Path) -> None:
    got = _submit(lua, _site(tmp_path), tmp_path,
                  "#!/bin/sh\n#RSA_DATA_IN=/gpfs/in\n#RSA_NODES=2\n")
    assert got == Result(0, {"time_limit": "30", "admin_comment": "rsa1:i=/gpfs/in;n=2"})


def test_the_sites_refusal_is_its_own_and_the_rsa_never_sees_the_job(
        lua: str, tmp_path: Path) -> None:
    got = _submit(lua, _site(tmp_path), tmp_path,
                  "#!/bin/sh\n#RSA_DATA_IN=/gpfs/in\n", time_limit=2 * 1440)
    assert got == Result(-1, {}, ["site: jobs may run at most one day here: submit with "
                                  "-t 1-0 or less"])


def test_the_rsas_refusal_keeps_its_own_message(lua: str, tmp_path: Path) -> None:
    got = _submit(lua, _site(tmp_path), tmp_path, "#!/bin/sh\n#RSA_NODES=two\n",
                  time_limit=60)
    assert got.rc == -1 and "admin_comment" not in got.sets, got
    assert got.msgs == ["2: RSA_NODES must be a whole number of RSA nodes, at least 1, "
                        "got 'two'"]


def test_a_job_without_directives_gets_the_sites_fields_only(lua: str, tmp_path: Path) -> None:
    got = _submit(lua, _site(tmp_path), tmp_path, "#!/bin/sh\necho hi\n")
    assert got == Result(0, {"time_limit": "30"})


def test_the_sites_settings_reach_the_module(lua: str, tmp_path: Path) -> None:
    """``rsa.configure{early_start = "fallback"}``: no start hold for the job; with
    ``wait`` (the default) it is held."""
    conf = _site(tmp_path, '  early_start = "wait",')
    script = "#!/bin/sh\n#RSA_DATA_IN=/gpfs/in\n"
    assert _submit(lua, conf, tmp_path, script).hold is not None
    shutil.rmtree(conf)
    conf = _site(tmp_path, '  early_start = "fallback",')
    assert _submit(lua, conf, tmp_path, script).hold is None


def test_a_setting_the_module_does_not_have_fails_the_load_in_one_line(
        lua: str, tmp_path: Path) -> None:
    conf = _site(tmp_path, "  lockin_qoss = 'rsa-lockin',")
    done = subprocess.run([lua, str(DRIVER), str(conf / "job_submit.lua"), "submit",
                           str(tmp_path / "none.sh")], capture_output=True, text=True,
                          timeout=30, check=False, cwd=tmp_path)
    assert done.returncode != 0
    message = done.stderr.splitlines()[0].split(": ", 1)[1]
    assert message.startswith('rsa job_submit.lua: rsa_job_submit.lua has no setting '
                              '"lockin_qoss": the settings are lockin_qos, '), message
