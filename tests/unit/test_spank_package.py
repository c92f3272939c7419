"""The SPANK package's version names the Slurm release it is built for (debian/rules:
``<source version>+slurm<X.Y>``), and that version orders right for dpkg and apt: above the
plain ``0.1.0`` every build had before (and the cluster lab's ``~git`` previous release),
one Slurm release's build below the next's, every build of a newer source above every
build of an older one; and apt, given Slurm 24.11 and the 24.11 build, replaces the 22.05
build with it when Slurm is upgraded (issue 31). debian/rules' own computation
(``spank-release``) on a slurm_version.h of each release, real dpkg and apt (simulated, in
an apt root of the test's own)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.unit,
              pytest.mark.skipif(not (shutil.which("dpkg") and shutil.which("apt-get")
                                      and Path("/usr/share/dpkg/pkg-info.mk").exists()),
                                 reason="needs dpkg, dpkg-dev and apt (Debian)")]

ROOT = Path(__file__).resolve().parents[2]
#: SLURM_VERSION_NUMBER of Debian 12's, 13's and testing's libslurm-dev
RELEASES = {"22.05": 0x160508, "24.11": 0x180B05, "26.05": 0x1A0505}
SLURM = {"22.05": "22.05.8-4+deb12u3", "24.11": "24.11.5-1", "26.05": "26.05.5-1"}


Built = dict[tuple[str, str], tuple[str, str]]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """debian/rules' (version, Depends) of rsa-scheduler-spank for (source version, Slurm
    release); source ``""``: the changelog's, as a build reads it."""
    tmp = tmp_path_factory.mktemp("spank")
    got: Built = {}
    for version, release in [("", "22.05"), ("0.1.0", "22.05"), ("0.1.0", "24.11"),
                             ("0.1.0", "26.05"), ("0.1.1", "22.05")]:
        header = tmp / f"slurm_version-{release}.h"
        header.write_text(f"#define SLURM_VERSION_NUMBER {RELEASES[release]:#x}\n")
        argv = ["make", "-s", "-f", "debian/rules", "spank-release",
                f"SLURM_VERSION_H={header}", *([f"DEB_VERSION={version}"] if version else [])]
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False,
                              timeout=60)
        assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr}"
        lines = done.stdout.splitlines()
        assert len(lines) == 2, lines
        got[version, release] = (lines[0], lines[1])
    return got


def older(a: str, b: str) -> bool:
    return subprocess.run(["dpkg", "--compare-versions", a, "lt", b],
                          check=False, timeout=10).returncode == 0


def test_the_version_names_the_slurm_release_and_orders_right(built: Built) -> None:
    source = subprocess.run(["dpkg-parsechangelog", "-SVersion"], cwd=ROOT, check=True,
                            capture_output=True, text=True, timeout=10).stdout.strip()
    assert built["", "22.05"] == (f"{source}+slurm22.05", "slurm-wlm-basic-plugins "
                                  "(>= 22.05), slurm-wlm-basic-plugins (<< 22.06~)")
    assert built["0.1.0", "24.11"][0] == "0.1.0+slurm24.11"
    assert built["0.1.0", "26.05"][1].endswith("(<< 26.06~)")
    ours = [built["0.1.0", r][0] for r in ("22.05", "24.11", "26.05")]
    # above the plain version of the builds before, and the lab's previous release
    for before in ("0.1.0", "0.1.0~git20261129.e161e5a"):
        assert all(older(before, v) for v in ours), (before, ours)
    # one source: each Slurm release's build below the next's
    assert older(ours[0], ours[1]) and older(ours[1], ours[2])
    # a newer source's build for an older Slurm is still newer than every old build
    newer = built["0.1.1", "22.05"][0]
    assert newer == "0.1.1+slurm22.05" and all(older(v, newer) for v in ours)


def _apt(root: Path, *args: str) -> str:
    env = {**os.environ, "APT_CONFIG": str(root / "apt.conf"), "LC_ALL": "C"}
    done = subprocess.run(["apt-get", "-q", *args], env=env, capture_output=True, text=True,
                          check=False, timeout=60)
    assert done.returncode == 0, f"apt-get {' '.join(args)}: {done.stdout}{done.stderr}"
    return done.stdout


def _stanza(package: str, version: str, depends: str = "", **more: str) -> str:
    fields = {"Package": package, **more, "Version": version, "Architecture": "amd64",
              "Maintainer": "x <x@localhost>", "Description": "x"}
    if depends:
        fields["Depends"] = depends
    return "".join(f"{k}: {v}\n" for k, v in fields.items()) + "\n"


def _apt_root(root: Path, installed: list[str], archive: list[str]) -> Path:
    """An apt root of its own: ``installed`` stanzas as dpkg's status, ``archive`` as a
    flat file: repository (trusted), its lists fetched."""
    for d in ("state/lists/partial", "cache/archives/partial", "etc/apt.conf.d",
              "etc/sources.list.d", "etc/preferences.d", "log", "repo"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "status").write_text("".join(
        s.replace("\nVersion:", "\nStatus: install ok installed\nVersion:", 1)
        for s in installed))
    (root / "repo" / "Packages").write_text("".join(
        s.replace("\nVersion:", f"\nFilename: ./{i}.deb\nSize: 1\nVersion:", 1)
        for i, s in enumerate(archive)))
    (root / "etc" / "sources.list").write_text(f"deb [trusted=yes] file:{root}/repo ./\n")
    conf = {"Dir::State": root / "state", "Dir::State::status": root / "status",
            "Dir::Cache": root / "cache", "Dir::Etc": root / "etc", "Dir::Log": root / "log",
            "Dir::Etc::SourceList": root / "etc" / "sources.list",
            "Dir::Etc::SourceParts": root / "etc" / "sources.list.d",
            "Dir::Etc::Parts": root / "etc" / "apt.conf.d",
            "Dir::Etc::PreferencesParts": root / "etc" / "preferences.d",
            "APT::Architecture": "amd64", "Debug::NoLocking": "true",
            "APT::Sandbox::User": "root" if os.geteuid() == 0 else ""}
    (root / "apt.conf").write_text("".join(f'{k} "{v}";\n' for k, v in conf.items())
                                   + 'APT::Architectures { "amd64"; };\n')
    _apt(root, "update")
    return root


def test_apt_replaces_the_22_05_build_when_slurm_24_11_comes_with_it(
        tmp_path: Path, built: Built) -> None:
    old_version, old_depends = built["0.1.0", "22.05"]
    new_version, new_depends = built["0.1.0", "24.11"]
    installed = [_stanza("slurm-wlm-basic-plugins", SLURM["22.05"]),
                 _stanza("rsa-scheduler-spank", old_version, old_depends)]
    slurm = _stanza("slurm-wlm-basic-plugins", SLURM["24.11"])
    # the new Debian release's archive and the site's repository of the 24.11 build: the
    # upgrade takes both (rsa-scheduler-spank upgraded, not removed nor kept back)
    both = _apt_root(tmp_path / "both", installed,
                     [slurm, _stanza("rsa-scheduler-spank", new_version, new_depends)])
    for how in (["dist-upgrade"], ["install", "slurm-wlm-basic-plugins"]):
        out = _apt(both, "-s", *how)
        assert f"Inst rsa-scheduler-spank [{old_version}] ({new_version} " in out, out
        assert f"Inst slurm-wlm-basic-plugins [{SLURM['22.05']}] ({SLURM['24.11']} " in out
        assert "Remv" not in out, out
    # without the 24.11 build: the upgrade removes the plugin (why it is built first)
    alone = _apt_root(tmp_path / "alone", installed, [slurm])
    out = _apt(alone, "-s", "dist-upgrade")
    assert f"Remv rsa-scheduler-spank [{old_version}]" in out, out
    # and apt upgrades the plugin alone only with its Slurm: the 24.11 build is not
    # installable beside Slurm 22.05, the 22.05 one stays
    held = _apt_root(tmp_path / "held", installed,
                     [_stanza("rsa-scheduler-spank", new_version, new_depends)])
    out = _apt(held, "-s", "upgrade")
    assert "Inst rsa-scheduler-spank" not in out and "rsa-scheduler-spank" in out, out
