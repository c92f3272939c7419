"""The Python environment the lab's users and hooks run rsa-scheduler from.

The repository's .venv is used when the lab user and the slurm user can execute it (its
parent directories are traversable). A CI clone or a home directory may not be: then the
lab installs the package into its own world-readable venv under /var/lib/rsa-lab and
points RSA_LAB_VENV at it, so `rsa` as rsauser and `rsa-hook` as slurm still work.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from .common import DATA, REPO, Settings, log

LAB_VENV = DATA / "venv"


def usable_by(user: str, python: Path) -> bool:
    done = subprocess.run(["runuser", "-u", user, "--", str(python), "-c",
                           "import rsa_scheduler"], capture_output=True, timeout=60,
                          check=False, cwd="/")
    return done.returncode == 0


def ensure(s: Settings) -> None:
    python = s.venv / "bin" / "python"
    if all(usable_by(u, python) for u in (s.user, "slurm")):
        return
    log(f"{s.venv} is not usable by {s.user}/slurm: installing the package into {LAB_VENV}")
    if not (LAB_VENV / "bin" / "python").exists():
        subprocess.run(["/usr/bin/python3", "-m", "venv", str(LAB_VENV)], check=True)
    subprocess.run([str(LAB_VENV / "bin" / "pip"), "install", "-q", str(REPO)], check=True,
                   timeout=900)
    LAB_VENV.chmod(0o755)
    s.venv = LAB_VENV
    if not usable_by(s.user, LAB_VENV / "bin" / "python"):
        raise RuntimeError(f"{LAB_VENV} is not usable by {s.user} either")
