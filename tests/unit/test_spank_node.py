"""The node side of the SPANK plugin: job.env (jobstate) and private-mount bookkeeping.

What the node Prolog and the node agent tell a job's tasks (rsa_scheduler.node.jobstate,
read by slurm_plugins/spank/rsa_jobenv.c), when they write it and when they leave a job
untouched; the mountinfo reading of rsa_scheduler.node.namespace; the Prolog's choices in
``hooks.mounts: job`` mode with the namespace faked (test_spank_ns.py has the real one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler.node import agent, hooks, jobstate
from rsa_scheduler.node.mounts import JobMounts
from rsa_scheduler.node.namespace import NamespaceError, propagation
from rsa_scheduler.node.plan import MOUNTPOINT, PROTOCOL
from tests.unit.test_node_hooks import FakeClient, env, fake  # noqa: F401

INPUT = {"seq": 1, "do": "mount", "role": "input", "target": "/pfs/a/in", "mode": "ro"}
OUTPUT = {"seq": 2, "do": "mount", "role": "output", "target": "/pfs/a/out", "mode": "rw"}


# --- jobstate: pure ---------------------------------------------------------------------


@pytest.mark.parametrize(("ins", "mounts", "want"), [
    (INPUT, "node", {"RSA_STATE": "input", "RSA_RAMDISK": "/pfs/a/in",
                     "RSA_DATA_IN": "/pfs/a/in", "RSA_INPUT": "ro", "RSA_MOUNTS": "node"}),
    ({**INPUT, "mode": "union"}, "job", {"RSA_STATE": "union", "RSA_RAMDISK": "/pfs/a/in",
                                         "RSA_DATA_IN": "/pfs/a/in", "RSA_INPUT": "union",
                                         "RSA_MOUNTS": "job"}),
    (OUTPUT, "job", {"RSA_STATE": "output", "RSA_RAMDISK": "/pfs/a/out",
                     "RSA_DATA_OUT": "/pfs/a/out", "RSA_MOUNTS": "job"}),
])
def test_what_a_mount_tells_the_job(ins: dict[str, Any], mounts: str,
                                    want: dict[str, str]) -> None:
    assert jobstate.at_start(ins, {"ok": True}, job="7", has_options=False,
                             mounts=mounts) == want


def test_start_without_the_ramdisk_says_why() -> None:
    failed = jobstate.at_start(INPUT, {"ok": False, "message": "refused: /pfs/a/in has a\n"
                                       "symlink component"}, job="7", has_options=False,
                               mounts="node")
    assert failed == {"RSA_STATE": "pfs", "RSA_DATA_IN": "/pfs/a/in",
                      "RSA_MESSAGE": "refused: /pfs/a/in has a symlink component"}
    waited = jobstate.at_start({"do": "wait"}, None, job="7", has_options=False, mounts="node")
    assert waited is not None and waited["RSA_STATE"] == "pfs"
    later = jobstate.at_start({"do": "nothing", "agent": True}, None, job="7",
                              has_options=False, mounts="node")
    assert later is not None and "rsa job 7" in later["RSA_MESSAGE"]


def test_a_job_the_rsa_does_not_serve() -> None:
    nothing = {"do": "nothing", "agent": False}
    assert jobstate.at_start(nothing, None, job="7", has_options=False, mounts="node") is None
    asked = jobstate.at_start(nothing, None, job="7", has_options=True, mounts="node")
    assert asked == {"RSA_STATE": "pfs",
                     "RSA_MESSAGE": "the RSA does not serve this job (rsa job 7 says why)"}


def test_the_reset_as_the_agent_records_it() -> None:
    start = jobstate.mounted(INPUT, "job")
    released = jobstate.after(start, {"do": "release"}, {"ok": True}, "job")
    assert released["RSA_STATE"] == "pfs" and "RSA_RAMDISK" not in released
    assert "RSA_INPUT" not in released and released["RSA_DATA_IN"] == "/pfs/a/in"
    busy = jobstate.after(start, {"do": "release"}, {"ok": False, "busy": True}, "job")
    assert busy == start
    out = jobstate.after(released, OUTPUT, {"ok": True}, "job")
    assert out == {"RSA_STATE": "output", "RSA_RAMDISK": "/pfs/a/out",
                   "RSA_DATA_IN": "/pfs/a/in", "RSA_DATA_OUT": "/pfs/a/out",
                   "RSA_MOUNTS": "job"}
    failed = jobstate.after(released, OUTPUT, {"ok": False, "message": "x"}, "job")
    assert failed["RSA_STATE"] == "pfs" and failed["RSA_MESSAGE"] == "x"


def test_file_round_trip_and_permissions(tmp_path: Path) -> None:
    state = {**jobstate.mounted(INPUT, "job"), "RSA_MESSAGE": "é\x00" + "x" * 5000}
    jobstate.write(tmp_path, state)
    f = tmp_path / jobstate.FILE
    assert f.stat().st_mode & 0o777 == 0o600
    text = f.read_text()
    assert text.startswith("# rsa-scheduler") and "\x00" not in text
    back = jobstate.read(tmp_path)
    assert {k: v for k, v in back.items() if k != "RSA_MESSAGE"} == jobstate.mounted(INPUT,
                                                                                     "job")
    assert len(back["RSA_MESSAGE"].encode()) <= jobstate.MAX_VALUE
    assert not list(tmp_path.glob(".*tmp"))
    assert jobstate.has_options({"SPANK_RSA_DATA_IN": "/x"})
    assert not jobstate.has_options({"SPANK_OTHER": "x", "SLURM_JOB_ID": "1"})


@pytest.mark.parametrize("sep", ["\u2028", "\u2029", "\x85"])
def test_file_lines_are_split_on_newline_only(tmp_path: Path, sep: str) -> None:
    """job.env lines end at \\n only, as rsa_jobenv.c reads them: a value with another
    line break of str.splitlines() (a DATA_IN path may hold U+2028) must not turn into a
    line of its own when the agent reads the file back and rewrites it."""
    target = f"/pfs/a{sep}RSA_STATE=input{sep}RSA_RAMDISK=/elsewhere"
    state = jobstate.on_pfs("the RAMDISK could not be mounted", {**INPUT, "target": target})
    jobstate.write(tmp_path, state)
    back = jobstate.read(tmp_path)
    assert back["RSA_STATE"] == "pfs" and "RSA_RAMDISK" not in back
    assert back == state


# --- namespace: mountinfo ---------------------------------------------------------------

MOUNTINFO = """\
22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:30 / /run rw shared:5 - tmpfs tmpfs rw
41 30 0:30 /rsa/node/c1 /run/rsa/node/c1 rw - tmpfs tmpfs rw
42 30 0:30 /x /run/a\\040b rw master:5 - tmpfs tmpfs rw
"""


def test_propagation_of_a_mount_point() -> None:
    assert propagation(MOUNTINFO, "/") == "shared"
    assert propagation(MOUNTINFO, "/run/rsa/node/c1") == "private"
    assert propagation(MOUNTINFO, "/run/a b") == "slave"
    assert propagation(MOUNTINFO, "/run/rsa") is None


# --- the Prolog and the agent write job.env ---------------------------------------------


@pytest.fixture
def no_agent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    started: list[str] = []
    monkeypatch.setattr(hooks, "start_agent", lambda job, *_a: started.append(job))
    return started


def jobdir(tmp_path: Path) -> Path:
    return tmp_path / "n" / "c1" / "42"


def test_non_rsa_job_gets_nothing(tmp_path: Path, fake: type[FakeClient]) -> None:  # noqa: F811
    fake.answers = [{"do": "nothing", "agent": False}]
    assert hooks.prolog(env(tmp_path)) == 0
    assert not (tmp_path / "n").exists()


def test_job_with_options_the_rsa_does_not_serve(tmp_path: Path,
                                                 fake: type[FakeClient]) -> None:  # noqa: F811
    fake.answers = [{"do": "nothing", "agent": False}]
    assert hooks.prolog(env(tmp_path, SPANK_RSA_DATA_IN="/pfs/in")) == 0
    assert jobstate.read(jobdir(tmp_path))["RSA_STATE"] == "pfs"


def test_refused_mount_is_told_to_the_job(tmp_path: Path, fake: type[FakeClient],  # noqa: F811
                                          no_agent: list[str]) -> None:
    (tmp_path / "elsewhere").mkdir()
    fake.answers = [{"seq": 1, "do": "mount", "job_id": "42", "user": "", "role": "input",
                     "target": str(tmp_path / "elsewhere"), "mode": "ro", "agent": True,
                     "client_argv": ["/bin/false", MOUNTPOINT], "client_umount_argv": []}]
    assert hooks.prolog(env(tmp_path)) == 0
    state = jobstate.read(jobdir(tmp_path))
    assert state["RSA_STATE"] == "pfs" and state["RSA_MESSAGE"].startswith("refused:")
    assert no_agent == ["42"]


def test_job_mode_without_a_namespace_mounts_nothing(
        tmp_path: Path, fake: type[FakeClient], no_agent: list[str],  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    def no_namespace(_jm: JobMounts) -> None:
        raise NamespaceError("cannot make the job's mount namespace: denied")

    monkeypatch.setattr(hooks, "job_namespace", no_namespace)
    (tmp_path / "pfs" / "in").mkdir(parents=True)
    fake.answers = [{"seq": 1, "do": "mount", "job_id": "42", "user": "", "role": "input",
                     "target": str(tmp_path / "pfs" / "in"), "mode": "ro", "agent": True,
                     "client_argv": ["/bin/true", MOUNTPOINT], "client_umount_argv": []}]
    assert hooks.prolog(env(tmp_path, RSA_MOUNTS="job")) == 0
    mounted = [body for path, body in fake.posts if path == "/v1/hooks/mounted"]
    assert mounted == [{"job_id": "42", "node": "c1", "seq": 1, "ok": False,
                        "message": "cannot make the job's mount namespace: denied",
                        "protocol": PROTOCOL}]
    assert jobstate.read(jobdir(tmp_path))["RSA_STATE"] == "pfs"
    assert JobMounts("42", "c1", str(tmp_path / "n")).entries() == []


def test_settings_read_the_mount_scope(tmp_path: Path) -> None:
    assert hooks.settings(env(tmp_path)).mounts == "node"
    assert hooks.settings(env(tmp_path, RSA_MOUNTS="job")).mounts == "job"
    assert hooks.settings(env(tmp_path, RSA_MOUNTS="bogus")).mounts == "node"


def test_agent_keeps_job_env_current(tmp_path: Path) -> None:
    jm = JobMounts("42", "c1", str(tmp_path))
    jm.prepare()
    agent.note(jm, INPUT, {"ok": True}, "node")
    assert not (jm.dir / jobstate.FILE).exists()  # nothing to update: no job.env
    jobstate.write(jm.dir, jobstate.mounted(INPUT, "node"))
    agent.note(jm, {"do": "release"}, {"ok": True}, "node")
    agent.note(jm, OUTPUT, {"ok": True}, "node")
    assert jobstate.read(jm.dir)["RSA_STATE"] == "output"
    jm.remove()
    assert not jm.dir.exists()  # job.env is the Epilog's to remove too


def test_a_declined_job_is_told_why() -> None:
    """Issue 13: a job whose directives the RSA declined gets RSA_STATE=pfs and the reason
    its user was told, not silence."""
    ans = {"do": "nothing", "agent": False,
           "declined": "RSA_DATA_IN /etc/x is outside staging.allowed_roots"}
    env = jobstate.at_start(ans, None, job="7", has_options=False, mounts="node")
    assert env == {"RSA_STATE": "pfs", "RSA_MESSAGE": "the RSA declined this job: RSA_DATA_IN "
                   "/etc/x is outside staging.allowed_roots (rsa job 7)"}
