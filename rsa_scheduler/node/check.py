"""``rsa nodes check --compute``: what this compute node lacks for the RSA, one line each
with its fix. Run it as root on the compute node itself (as slurmd runs the hooks).

Owns the checks of a compute node: rsad's address in the world-readable client file and
rsad's API answering from here with an answer signed as the node hooks require; ``rsa`` on
the PATH a job gets from a login (jobs run ``rsa input-done`` bare); the node hooks'
configuration (rsa.yaml, read by the Prolog as root) and each tier's filesystem client;
slurm.conf's ``Prolog``/``Epilog``; every ``rsa_spank.so`` plugstack.conf names, built for
the Slurm that runs here (slurmstepd refuses a plugin of another major.minor release; the
line says what that means for the node's jobs, by ``optional`` or ``required``).
The pure parts (slurm.conf keys, plugstack lines, Slurm version numbers) are functions of
text. Changes nothing.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from rsa_scheduler.errors import RsaError
from rsa_scheduler.fs.nodecheck import NodeReport, check_script, parse_check

#: what a job's PATH holds after a login on Debian (/etc/profile), without a site's extras
LOGIN_PATH = "/usr/local/bin:/usr/bin:/bin"
SPANK_FIX = ("rebuild it on this node's image against this Slurm (make -C slurm_plugins/spank "
             "install, or the rsa-scheduler-spank package built for it)")


def conf_value(text: str, key: str) -> str | None:
    """The last ``Key=value`` of slurm.conf ``text`` (keys are case-insensitive)."""
    found = None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        name, sep, value = line.partition("=")
        if sep and name.strip().lower() == key.lower():
            found = value.strip()
    return found


#: what a plugin slurmstepd cannot load means for the node's jobs, by its plugstack.conf
#: word (seen in the cluster lab, tests/cluster/test_spank_release.py: with ``required``
#: slurmstepd aborts the batch step and slurmctld drains the node, on 22.05 and 24.11)
REFUSED = {
    "optional": "plugstack.conf has it optional: jobs run here without it, with no RSA_* "
                "variables and no private mounts",
    "required": "plugstack.conf requires it: no job step starts here, and a batch job "
                "drains this node",
}


def spank_entries(text: str) -> list[tuple[str, str]]:
    """``(optional|required, PATH)`` of each rsa_spank.so line of plugstack.conf ``text``."""
    out = []
    for raw in text.splitlines():
        words = raw.split("#", 1)[0].split()
        if len(words) >= 2 and words[0] in ("optional", "required") \
                and os.path.basename(words[1]).startswith("rsa_spank"):
            out.append((words[0], words[1]))
    return out


def spank_plugins(text: str) -> list[str]:
    """The rsa_spank.so paths of plugstack.conf ``text`` (``optional|required PATH ...``)."""
    return [path for _, path in spank_entries(text)]


def version_number(text: str) -> int | None:
    """SLURM_VERSION_NUMBER of ``slurmd -V`` output (``slurm-wlm 22.05.8``)."""
    for word in reversed(text.split()):
        parts = word.split(".")
        if len(parts) == 3 and all(p.isdigit() for p in parts):
            major, minor, micro = (int(p) for p in parts)
            return (major << 16) | (minor << 8) | micro
    return None


def release(number: int) -> str:
    return f"{number >> 16}.{(number >> 8) & 0xff:02d}"


def plugin_version(path: str) -> int:
    """``plugin_version`` of a SPANK plugin (SLURM_VERSION_NUMBER when it was built), read
    by loading it in a child Python (lazily bound, as slurmstepd loads it)."""
    code = ("import ctypes, os, sys; lib = ctypes.CDLL(sys.argv[1], mode=os.RTLD_LAZY); "
            "print(ctypes.c_uint.in_dll(lib, 'plugin_version').value)")
    done = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True,
                          timeout=30, check=False)
    if done.returncode != 0 or not done.stdout.strip().isdigit():
        tail = (done.stderr.strip().splitlines() or ["no plugin_version"])[-1]
        raise RsaError(f"cannot load it ({tail})")
    return int(done.stdout.strip())


def _slurm_version() -> int | None:
    for argv in (["slurmd", "-V"], ["sinfo", "-V"]):
        exe = shutil.which(argv[0], path="/usr/sbin:/usr/bin:/sbin:/bin")
        if exe:
            done = subprocess.run([exe, *argv[1:]], capture_output=True, text=True,
                                  timeout=30, check=False)
            if (number := version_number(done.stdout)) is not None:
                return number
    return None


def _client_lacks(env: Mapping[str, str]) -> list[str]:
    from rsa_scheduler.client import ApiClient, client_conf_path, locate, read_client_conf

    path = client_conf_path(env)
    lacks = []
    try:
        conf = read_client_conf(path)
    except RsaError as e:
        return [f"rsad's address: {e}"]
    if conf is None or not conf.get("api"):
        lacks.append(f"rsad's address in {path}: write it there, mode 0644 (api = HOST:PORT, "
                     "rsad's daemon.api.listen): jobs' rsa, the hooks and rsa-bb on hosts "
                     "without rsad's socket find rsad there")
    elif not os.stat(path).st_mode & stat.S_IROTH:
        lacks.append(f"{path} readable by everyone: chmod 0644 {path} (jobs read it as "
                     "their user)")
    try:
        found = locate(env)
        # as the node hooks ask: an answer is believed only when rsad signed it
        ApiClient(found, timeout=5).get("/v1/whoami")
    except RsaError as e:
        lacks.append(f"rsad's API from here ({e}): open rsad's daemon.api.listen port to "
                     "this node, keep munged running with the cluster's key, and name "
                     f"rsad's address in {path}")
    return lacks


def _hooks_lacks(config_file: str | None, env: Mapping[str, str]) -> list[str]:
    from rsa_scheduler.config import load_config
    from rsa_scheduler.config.backends import make_backend

    lacks = []
    slurm_conf = Path(env.get("SLURM_CONF") or "/etc/slurm/slurm.conf")
    try:
        text = slurm_conf.read_text()
    except OSError as e:
        return [f"slurm.conf {slurm_conf} ({e.strerror}): set SLURM_CONF or install it"]
    for key in ("Prolog", "Epilog"):
        value = conf_value(text, key)
        if not value:
            lacks.append(f"{key} in {slurm_conf}: {key}=/usr/lib/rsa-scheduler/"
                         f"rsa-{key.lower()} (it mounts the job's RAMDISK)")
        elif not os.access(value, os.X_OK):
            lacks.append(f"{key} {value} of {slurm_conf} (not an executable here): install "
                         "rsa-scheduler on this node")
    lacks += _spank_lacks(text, slurm_conf)
    try:
        cfg = load_config(config_file, env=env)
    except (RsaError, OSError) as e:
        return [*lacks, f"the node hooks' configuration ({str(e).splitlines()[0]}): the "
                        "Prolog reads staging.allowed_roots and hooks.* from it as root "
                        "(or give it RSA_API and RSA_ALLOWED_ROOTS in its wrapper)"]
    needs = {n.what: n for t in {m.tier for m in cfg.pool.members()}
             for n in make_backend(cfg, str(t), {}).compute_needs()}
    if needs:
        done = subprocess.run(["sh", "-c", check_script(list(needs.values()), "/")],
                              capture_output=True, text=True, timeout=30, check=False)
        lacks += [x for x in parse_check(done.stdout) if not x.startswith("pool directory")]
    return lacks


def _spank_lacks(slurm_text: str, slurm_conf: Path) -> list[str]:
    plugstack = Path(conf_value(slurm_text, "PlugStackConfig")
                     or slurm_conf.with_name("plugstack.conf"))
    try:
        plugins = spank_entries(plugstack.read_text())
    except FileNotFoundError:
        return []  # the plugin is optional: #RSA_ directives work without it
    except OSError as e:
        return [f"plugstack.conf {plugstack} ({e.strerror}): make it readable"]
    if not plugins:
        return []
    slurm = _slurm_version()
    if slurm is None:
        return ["the Slurm version of this node (slurmd -V): install slurmd"]
    lacks = []
    for mode, path in plugins:
        try:
            built = plugin_version(path)
        except RsaError as e:
            lacks.append(f"the SPANK plugin {path} of {plugstack} ({e}; {REFUSED[mode]}): "
                         f"{SPANK_FIX}")
            continue
        if built >> 8 != slurm >> 8:
            lacks.append(f"the SPANK plugin {path} for Slurm {release(slurm)} (it was built "
                         f"for {release(built)}; slurmstepd refuses it; {REFUSED[mode]}): "
                         f"{SPANK_FIX}")
    return lacks


def check_compute(config_file: str | None = None,
                  env: Mapping[str, str] = os.environ) -> NodeReport:
    """Every check of this compute node, one report named after its hostname."""
    lacks = _client_lacks(env)
    if not shutil.which("rsa", path=LOGIN_PATH):
        lacks.append(f"command rsa on a job's PATH ({LOGIN_PATH}): install rsa-scheduler "
                     "on this node (it puts rsa in /usr/bin): jobs run rsa input-done and "
                     "rsa job")
    lacks += _hooks_lacks(config_file, env)
    return NodeReport(socket.gethostname().split(".")[0], tuple(lacks))
