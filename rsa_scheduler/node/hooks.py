"""The node Prolog and Epilog: ``rsa-prolog`` and ``rsa-epilog`` (run by slurmd as root).

Owns :func:`prolog` and :func:`epilog`. Both are thin: read Slurm's environment, ask rsad
(``POST /v1/hooks/prolog``), carry out at most one mount instruction, report it
(``POST /v1/hooks/mounted``), start the job's node agent, and exit. Every request names
the hook protocol they speak (``node.plan.PROTOCOL``). Both ALWAYS exit 0:
a non-zero node Prolog drains the node and requeues the job held, and the RSA must never
hurt a job — when anything is wrong (rsad unreachable, a path refused, a mount failing)
the job runs from the PFS and the reason goes to rsad (which tells the user) and stderr
(slurmd's log). A hard timeout (``hooks.timeout``) bounds every run; what a Prolog that
does not finish (its timeout, an error) had mounted is unwound, and rsad is told so.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NamedTuple

from rsa_scheduler.core.jobkey import from_env
from rsa_scheduler.errors import RsaError
from rsa_scheduler.node.plan import PROTOCOL

if TYPE_CHECKING:  # imported when needed: the nothing-to-do path stays fast
    from rsa_scheduler.node.mounts import JobMounts
    from rsa_scheduler.node.namespace import JobNamespace
    from rsa_scheduler.node.paths import Who

AGENT_MODULE = "rsa_scheduler.node.agent"
DEFAULT_BASE = "/run/rsa/node"  # = rsa_scheduler.node.mounts.DEFAULT_BASE
#: the Epilog's hard timeout when the configuration cannot be read (hooks.timeout's default)
FALLBACK_TIMEOUT = 10.0


class HookTimeout(RsaError):
    """The hook's hard timeout expired."""


class Settings(NamedTuple):
    address: str
    api_timeout: float
    timeout: float
    allowed_roots: tuple[str, ...]
    base: str
    mounts: str = "node"  # hooks.mounts: node-wide, or in the job's own mount namespace
    shared_dirs: tuple[str, ...] = ()  # staging.shared_dirs: group project directories


def settings(env: Mapping[str, str]) -> Settings:
    """Everything a node hook needs, from RSA_* variables or the configuration file."""
    base = env.get("RSA_NODE_DIR", DEFAULT_BASE)
    if env.get("RSA_API") and env.get("RSA_ALLOWED_ROOTS"):
        return Settings(env["RSA_API"], float(env.get("RSA_HOOK_TIMEOUT", "2")),
                        float(env.get("RSA_PROLOG_TIMEOUT", "10")),
                        tuple(env["RSA_ALLOWED_ROOTS"].split(":")), base,
                        "job" if env.get("RSA_MOUNTS") == "job" else "node",
                        tuple(d for d in env.get("RSA_SHARED_DIRS", "").split(":") if d))
    from rsa_scheduler.client import Found, locate
    from rsa_scheduler.config import load_config

    cfg = load_config(env.get("RSA_CONFIG"), env=env)
    listen = cfg.daemon.api.listen
    here = os.path.exists(cfg.daemon.api.socket)
    # rsad's address: RSA_API, else /etc/rsa/client.conf (what every host's clients use),
    # else daemon.api of the configuration
    address = locate(env, lambda: Found(
        str(cfg.daemon.api.socket) if here or not listen else f"{listen.host}:{listen.port}",
        str(cfg.source))).address
    mounts = env.get("RSA_MOUNTS") or str(cfg.hooks.mounts)
    return Settings(address, cfg.hooks.api_timeout, cfg.hooks.timeout,
                    tuple(str(r) for r in cfg.staging.allowed_roots), base,
                    "job" if mounts == "job" else "node",
                    tuple(str(d) for d in cfg.staging.shared_dirs))


def who_of(env: Mapping[str, str]) -> Who:
    import pwd

    from rsa_scheduler.node.paths import Who

    uid = int(env.get("SLURM_JOB_UID", "-1"))
    try:
        pw = pwd.getpwuid(uid)
        gids = frozenset(os.getgrouplist(pw.pw_name, pw.pw_gid))
    except KeyError:
        gids = frozenset({int(env.get("SLURM_JOB_GID", "-1"))})
    return Who(uid, gids)


def _alarm(seconds: float) -> None:
    def on_alarm(_sig: int, _frame: FrameType | None) -> None:
        raise HookTimeout(f"hard timeout of {seconds:.0f}s")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.1))


def _say(hook: str, job: str, text: str) -> None:
    sys.stderr.write(f"rsa-{hook} job {job}: {text}\n")


def execute(ins: Mapping[str, Any], jm: JobMounts, who: Who,
            roots: Sequence[str], shared_dirs: Sequence[str] = ()) -> dict[str, Any]:
    """Carry out one instruction; the report for rsad (never raises for node problems)."""
    from rsa_scheduler.node.mounts import MountError
    from rsa_scheduler.node.paths import UnsafePath

    seq = int(ins.get("seq", 0))
    try:
        if ins["do"] == "mount":
            if ins.get("user") and who.uid >= 0:
                import pwd

                try:
                    name = pwd.getpwuid(who.uid).pw_name
                except KeyError:
                    name = ins["user"]
                if name != ins["user"]:
                    raise MountError(f"instruction for {ins['user']} but the job "
                                     f"runs as uid {who.uid}")
            msg = jm.mount(dict(ins), who, roots, shared_dirs)
            return {"seq": seq, "ok": True, "message": msg}
        if ins["do"] == "release":
            rel = jm.release(lazy=False)
            return {"seq": seq, "ok": rel.ok, "busy": rel.busy, "message": rel.message}
        return {"seq": seq, "ok": False, "message": f"unknown instruction {ins['do']!r}"}
    except UnsafePath as e:
        return {"seq": seq, "ok": False, "message": f"refused: {e}"}
    except MountError as e:
        return {"seq": seq, "ok": False, "message": str(e)}


def start_agent(job: str, node: str, nodes: str, jm: JobMounts,
                env: Mapping[str, str]) -> None:
    """Start the job's node agent, detached (own session, no inherited descriptors)."""
    import subprocess

    jm.prepare()
    keep = {k: v for k, v in env.items()
            if k.startswith(("RSA_", "SLURM_JOB_", "SLURM_ARRAY_"))}
    keep.update(PATH="/usr/sbin:/usr/bin:/sbin:/bin", SLURMD_NODENAME=node,
                SLURM_NODELIST=nodes)
    proc = subprocess.Popen(  # detached on purpose: it outlives the Prolog
        [sys.executable, "-m", AGENT_MODULE, job], env=keep, start_new_session=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        close_fds=True, cwd="/")
    (jm.dir / "agent.pid").write_text(f"{proc.pid}\n")


def inside(ns: JobNamespace | None) -> contextlib.AbstractContextManager[None]:
    """Run a block in the job's mount namespace (``hooks.mounts: job``), else right here."""
    return ns.entered() if ns is not None else contextlib.nullcontext()


def job_namespace(jm: JobMounts) -> JobNamespace:
    """Make (or find) the job's own mount namespace on this node."""
    from rsa_scheduler.node.namespace import JobNamespace

    jm.prepare()
    ns = JobNamespace(jm.dir)
    ns.create()
    return ns


def note_start(jm: JobMounts | None, st: Settings, job: str, node: str,
               ans: Mapping[str, Any], report: Mapping[str, Any] | None,
               env: Mapping[str, str]) -> None:
    """Tell the job's tasks what they got (job.env, read by the SPANK plugin)."""
    options = any(k.startswith("SPANK_RSA_") for k in env)
    if (ans.get("do") == "nothing" and not ans.get("agent") and not options
            and not ans.get("declined")):
        return  # not an RSA job: untouched
    from rsa_scheduler.node import jobstate
    from rsa_scheduler.node.mounts import JobMounts

    state = jobstate.at_start(ans, report, job=job, has_options=options, mounts=st.mounts)
    if state is None:
        return
    jm = jm or JobMounts(job, node, st.base)
    jm.prepare()
    jobstate.write(jm.dir, state)


def load_guard(job: str, options: str, timeout: float, base: str = DEFAULT_BASE) -> None:
    """The nftables guard rsad names (the RSA nodes' servers, mfsmount's proxy), loaded
    before any job starts here, whatever the job: a user of a plain job on this node is
    kept off another user's RAMDISK servers as on a node that mounted one. A node that
    cannot load it says so in slurmd's log; the job runs (it mounts nothing)."""
    from rsa_scheduler.node.mounts import MountError, guard_proxy

    try:
        guard_proxy(["mfsmount", "-o", options], timeout=timeout, mounting=False,
                    keep=Path(base))
    except MountError as e:
        _say("prolog", job, str(e))


def prolog(env: Mapping[str, str]) -> int:
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or ""
    node = env.get("SLURMD_NODENAME", "")
    # a hetjob leader's nodes see every component's nodes; another component's, its own
    nodes = (env.get("SLURM_HET_JOB_NODELIST") or env.get("SLURM_NODELIST")
             or env.get("SLURM_JOB_NODELIST") or node)
    if not job or not node:
        _say("prolog", job or "?", "no SLURM_JOB_ID/SLURMD_NODENAME; nothing to do")
        return 0
    jm: JobMounts | None = None
    ns: JobNamespace | None = None
    client: Any = None
    mounting: Mapping[str, Any] | None = None  # the mount instruction being carried out
    report: dict[str, Any] | None = None
    try:
        st = settings(env)
        _alarm(st.timeout)
        from rsa_scheduler.client import ApiClient

        client = ApiClient(st.address, timeout=st.api_timeout, trust_uid=0)
        deadline = time.monotonic() + st.timeout - st.api_timeout - 0.5
        # the job's user: rsad answers nothing of another user's earlier job of this id
        body = {**from_env(env), "node": node, "nodes": nodes,
                "user": env.get("SLURM_JOB_USER", ""), "protocol": PROTOCOL}
        ans = client.post("/v1/hooks/prolog", body)
        if ans.get("do") == "wait" and float(ans.get("hold") or 0) > 0:
            # early start "wait": hold the job's start while the stage-in finishes
            hold = float(ans["hold"])
            _alarm(hold + st.timeout)
            deadline = time.monotonic() + hold
            _say("prolog", job, f"holding the start up to {hold:.0f}s for the stage-in")
        while ans.get("do") == "wait" and time.monotonic() < deadline:
            time.sleep(float(ans.get("retry", 0.5)))
            ans = client.post("/v1/hooks/prolog", body)
        if ans.get("guard"):
            # first, whatever follows: a mount the node refuses (a path swapped for a
            # symlink, not the user's) never reaches the mount's own load, and its job
            # runs here all the same (the mount loads it again: the same table)
            load_guard(job, str(ans["guard"]), st.timeout, st.base)
        if ans.get("do") in ("mount", "wait") or ans.get("agent"):
            from rsa_scheduler.node.mounts import JobMounts

            jm = JobMounts(job, node, st.base)
        if ans.get("do") == "mount" and jm is not None:
            mounting = ans
            who = who_of(env)
            try:
                if st.mounts == "job":
                    ns = job_namespace(jm)
                with inside(ns):
                    report = execute(ans, jm, who, st.allowed_roots, st.shared_dirs)
            except HookTimeout:
                raise  # the hard timeout unwinds the whole hook (below)
            except RsaError as e:  # the namespace: nothing was mounted
                report = {"seq": int(ans.get("seq", 0)), "ok": False, "message": str(e)}
            if not report["ok"]:
                _say("prolog", job, f"{report['message']}; the job uses the PFS")
            # the epoch of the rsad whose instruction it answers (a restarted rsad's
            # instruction numbers start again: NodeSide.report)
            epoch = {"epoch": str(ans["epoch"])} if ans.get("epoch") else {}
            client.post("/v1/hooks/mounted", {**from_env(env), "node": node,
                                              "protocol": PROTOCOL, **report, **epoch})
        elif ans.get("do") == "wait":
            _say("prolog", job, "RAMDISK not ready in time; the job starts from the PFS")
        if ans.get("agent") and jm is not None:
            if st.mounts == "job" and ns is None:
                try:  # the agent's mounts go where the tasks will be
                    ns = job_namespace(jm)
                except HookTimeout:
                    raise
                except RsaError as e:
                    _say("prolog", job, f"{e}; the job uses the PFS")
            with inside(ns):
                start_agent(job, node, nodes, jm, env)
        note_start(jm, st, job, node, ans, report, env)
    except HookTimeout as e:
        _say("prolog", job, f"{e}; unwinding, the job uses the PFS")
        if jm is not None:
            undo(jm, ns, mounting, report, str(e), client=client, env=env, node=node)
    except Exception as e:  # never fail the job or drain the node because of the RSA
        _say("prolog", job, f"{e}; the job uses the PFS")
        if jm is not None and mounting is not None:  # what it says: nothing mounted
            signal.setitimer(signal.ITIMER_REAL, 0)
            undo(jm, ns, mounting, report, str(e), client=client, env=env, node=node)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return 0


def undo(jm: JobMounts, ns: JobNamespace | None, ins: Mapping[str, Any] | None,
         report: Mapping[str, Any] | None, why: str, *, client: Any,
         env: Mapping[str, str], node: str) -> None:
    """A Prolog that does not finish undoes what it mounted: the job uses the PFS on this
    node, as its line says. rsad may have counted the mount already (its report went out,
    or the timeout struck while rsad answered it): a failed report to the same instruction,
    marked ``undone``, takes it back, or rsad would hold the node to a release its missing
    agent never gives (NodeSide.report). Never raises: the job runs all the same."""
    try:
        with inside(ns):
            jm.release(lazy=True)
        if client is None or ins is None or (report is not None and not report["ok"]):
            return  # no mount instruction, or its failure already said so
        # (the timeout may strike amid the mount: whatever of it was made is undone)
        msg = (f"the Prolog did not finish ({why}): what it had mounted of the RAMDISK "
               f"over {ins.get('target')} was undone; the job uses the PFS on {node}")
        epoch = {"epoch": str(ins["epoch"])} if ins.get("epoch") else {}
        client.post("/v1/hooks/mounted", {**from_env(env), "node": node, "protocol": PROTOCOL,
                                          "seq": int(ins.get("seq", 0)), "ok": False,
                                          "undone": True, "message": msg, **epoch})
    except Exception as e:
        _say("prolog", str(jm.job), f"rsad not told that the mount was undone: {e}")


#: seconds the word to rsad of :func:`prolog_killed` may take: it runs within what is left
#: of Slurm's PrologEpilogTimeout after the wrapper's backstop (340 s against 330 s + 2)
KILLED_API_TIMEOUT = 3.0


def prolog_killed(env: Mapping[str, str]) -> int:
    """After the Prolog wrapper's backstop (``timeout`` in rsa-prolog) killed the Prolog:
    stuck where its own hard timeout could not unwind it (a call hung in the kernel, on a
    RAMDISK that does not answer), between a mount and its report, or after it. The
    job starts all the same (the wrapper exits 0); whatever the Prolog had mounted is
    undone first, lazily (a hung mount is detached, never touched), as its own unwind
    would have: the job uses the PFS on this node. Before, the mount stayed under the
    job while rsad, never told, did not count the node: a reset or a teardown destroyed
    the RAMDISK under it without asking it, and a stage-out did not wait for its Epilog
    (what the job wrote there after was lost with the RAMDISK). rsad may have counted
    the mount (the Prolog's report went out: then the mount over the job's directory is
    recorded, with the instruction's number and epoch): it is told the mount was taken
    back (NodeSide.report). Always exits 0."""
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or ""
    node = env.get("SLURMD_NODENAME", "")
    base = env.get("RSA_NODE_DIR", DEFAULT_BASE)
    if not job or not node or not os.path.isdir(os.path.join(base, node, job)):
        return 0  # it made nothing of the RSA here
    from rsa_scheduler.node.mounts import JobMounts
    from rsa_scheduler.node.namespace import JobNamespace

    jm = JobMounts(job, node, base)
    try:
        targets = [e for e in jm.entries() if e.get("kind") == "target"]
        ns = JobNamespace(jm.dir)
        with inside(ns if ns.exists() else None):
            rel = jm.release(lazy=True)
        if not rel.ok:  # still mounted: rsad keeps counting what it counted
            _say("prolog", job, f"killed by the wrapper's backstop; could not undo what it "
                                f"had mounted: {rel.message} (record kept in "
                                f"{jm.state_file})")
            return 0
        if not targets:
            _say("prolog", job, "killed by the wrapper's backstop; nothing of the "
                                "RAMDISK is left mounted over the job's directories; the "
                                "job uses the PFS")
            return 0
        last = targets[-1]
        msg = (f"the Prolog was killed by its wrapper's backstop (stuck past its hard "
               f"timeout): what it had mounted of the RAMDISK over {last.get('path')} was "
               f"undone; the job uses the PFS on {node}")
        _say("prolog", job, msg)
        st = settings(env)
        from rsa_scheduler.client import ApiClient

        epoch = {"epoch": str(last["epoch"])} if last.get("epoch") else {}
        ApiClient(st.address, timeout=min(st.api_timeout, KILLED_API_TIMEOUT),
                  trust_uid=0).post("/v1/hooks/mounted", {
                      **from_env(env), "node": node, "protocol": PROTOCOL,
                      "seq": int(last.get("seq") or 0), "ok": False, "undone": True,
                      "message": msg, **epoch})
    except Exception as e:  # never fail the job or drain the node
        _say("prolog", job, f"after the wrapper's backstop: {e}; rsad not told that the "
                            "mount was undone")
    return 0


def stop_agent(jm: JobMounts, grace: float = 1.0) -> None:
    """SIGTERM the job's node agent, SIGKILL it after ``grace``, and wait (``grace`` again)
    until it is gone: only if the recorded pid still runs the agent of this job (a
    reused pid is left alone). Reaped when it is this process's child (psutil's wait
    collects its exit status), else waited for until its pid is gone: the Epilog releases
    the job's mounts next, and a killed agent still in its mount or release holds them
    (its release would then fail busy). One that outlives SIGKILL (in an uninterruptible
    wait on a dead mount) is said on stderr, with its pid."""
    import psutil

    try:
        pid = int((jm.dir / "agent.pid").read_text().strip())
        proc = psutil.Process(pid)
        cmdline = proc.cmdline()
    except (OSError, ValueError, psutil.Error):
        return
    if AGENT_MODULE not in cmdline or jm.job not in cmdline:
        return  # the pid was reused: not ours
    try:
        proc.terminate()
        proc.wait(timeout=grace)
    except psutil.TimeoutExpired:
        try:
            proc.kill()
            proc.wait(timeout=grace)
        except psutil.NoSuchProcess:
            pass
        except psutil.TimeoutExpired:
            _say("epilog", str(jm.job), f"the node agent (pid {pid}) outlived SIGKILL for "
                                        f"{grace:g}s (stuck in the kernel on a mount?)")
    except psutil.NoSuchProcess:
        pass


def epilog(env: Mapping[str, str]) -> int:
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or ""
    node = env.get("SLURMD_NODENAME", "")
    if not job or not node:
        return 0
    base = env.get("RSA_NODE_DIR", DEFAULT_BASE)
    if not os.path.isdir(os.path.join(base, node, job)):
        return 0  # nothing of the RSA on this node for this job: the fast path
    from rsa_scheduler.node.mounts import JobMounts
    from rsa_scheduler.node.namespace import JobNamespace

    jm = JobMounts(job, node, base)
    ns = JobNamespace(jm.dir)
    try:
        st: Settings | None = None
        unread: Exception | None = None
        try:
            st = settings(env)
        except Exception as e:  # the release needs none of it: done all the same
            unread = e
        _alarm(st.timeout if st is not None else FALLBACK_TIMEOUT)
        stop_agent(jm)
        kept = ""  # why the job's directory stays although its mounts are released
        if ns.exists():  # private mounts: they are all inside the job's namespace
            with ns.entered():
                rel = jm.release(lazy=True)
            try:  # (rsad is told of the release all the same: the RAMDISK is off)
                ns.destroy()
            except HookTimeout:
                raise
            except RsaError as e:
                kept = str(e)
        else:
            rel = jm.release(lazy=True)
        if not rel.ok:  # mounts.json stays: what is left, for the operator
            _say("epilog", job, f"could not release everything: {rel.message} (record "
                                f"kept in {jm.state_file})")
        elif kept:
            _say("epilog", job, f"{rel.message}, but {kept} (kept in {jm.dir})")
        else:
            jm.remove()
            if rel.message != "released":  # e.g. a mount the job moved: refused by path
                _say("epilog", job, rel.message)
        if st is None:
            _say("epilog", job, f"rsad not told of the release: {unread}")
            return 0
        from rsa_scheduler.client import ApiClient

        ApiClient(st.address, timeout=st.api_timeout, trust_uid=0).post(
            "/v1/hooks/epilog", {**from_env(env), "node": node, "ok": rel.ok,
                                 "message": rel.message, "protocol": PROTOCOL})
    except Exception as e:  # HookTimeout included: never drain the node
        _say("epilog", job, f"{e}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return 0


USAGE = """usage: rsa-{hook}

The compute node's Slurm {Hook} (slurmd, as root) for rsa-scheduler: {what}
It reads only Slurm's environment (SLURM_JOB_ID, SLURMD_NODENAME, ...), asks rsad, and
always exits 0 (a failing node {Hook} would drain the node; the job then uses the PFS).
slurm.conf: {Hook}=/usr/lib/rsa-scheduler/rsa-{hook} (the wrapper with the hard
timeout; prolog_epilog/README.md). Environment: RSA_CONFIG (default /etc/rsa/rsa.yaml),
RSA_API (rsad's address; with RSA_ALLOWED_ROOTS it spares reading the configuration),
RSA_MOUNTS (node|job). rsad's address: RSA_API, else /etc/rsa/client.conf
(RSA_CLIENT_CONFIG), else daemon.api of the configuration.
"""
_WHAT = {"prolog": "mounts the job's RAMDISK over its #RSA_DATA_IN/#RSA_DATA_OUT paths\n"
                   "and starts the node agent that follows rsad's later instructions.",
         "epilog": "unmounts the job's RAMDISK and tells rsad the node released it."}


def _main(hook: str) -> None:
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        sys.stdout.write(USAGE.format(hook=hook, Hook=hook.capitalize(), what=_WHAT[hook]))
        sys.exit(0)
    if any(a == "--version" for a in sys.argv[1:]):
        from rsa_scheduler import __version__

        sys.stdout.write(f"rsa-{hook} {__version__}\n")
        sys.exit(0)
    sys.exit({"prolog": prolog, "epilog": epilog}[hook](os.environ))


def main_prolog() -> None:
    _main("prolog")


def main_epilog() -> None:
    _main("epilog")


if __name__ == "__main__":
    hook_name = sys.argv.pop(1) if len(sys.argv) > 1 else ""
    if hook_name == "prolog-killed":  # rsa-prolog, after its backstop killed the Prolog
        sys.exit(prolog_killed(os.environ))
    if hook_name not in _WHAT:
        sys.stderr.write("usage: python -m rsa_scheduler.node.hooks prolog|epilog [--help]\n")
        sys.exit(0)
    _main(hook_name)
