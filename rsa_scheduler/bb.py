"""``rsa-bb``: the command slurm_plugins/burst_buffer.lua runs for each killable hook.

Owns the hook client of native mode (``slurm.mode: native``, docs/design/native-mode.md):
one rsad API call per hook (``POST /v1/bb/HOOK``), and for ``data_in``, ``data_out`` and
``teardown`` a blocking poll until rsad answers done or failed (Slurm 22.05 has no
test_data_in/out: the stage is done when the hook returns, and Slurm's StageInTimeout /
StageOutTimeout / OtherTimeout kill it). With ``--once`` (Slurm 24.05+, whose
slurm_bb_test_data_in/out Slurm itself calls every PollInterval), ``data_in`` and
``data_out`` ask rsad once and answer ``busy MESSAGE`` while the stage runs. It prints ONE
answer on stdout, ``ok MESSAGE``, ``busy MESSAGE`` or ``error MESSAGE`` (the message is
what Slurm shows: the job's Reason text on a failure), and nothing else there (whatever
else writes to stdout goes to stderr: :func:`answer_only_on_stdout`), and exits 0 (ok,
busy) or 1. It runs as SlurmUser in slurmscriptd; it never touches user data.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rsa_scheduler.errors import RsaError

#: hooks that block until rsad says done (or failed)
BLOCKING = frozenset({"data_in", "data_out", "teardown"})
#: hooks ``--once`` asks without blocking (Slurm 24.05+ polls them: test_data_in/out)
ONCE = frozenset({"data_in", "data_out"})
HOOKS = ("setup", "data_in", "real_size", "pre_run", "post_run", "data_out", "teardown",
         "status", "pools")
POLL = 1.0  # seconds between two questions to rsad while a stage runs
#: the least time rsa-bb waits for one answer of rsad's (client.DEFAULT_TIMEOUT): longer
#: than rsad waits for its loop (10 s for it to take a request, 10 more for its answer:
#: daemon/inbox.py), so that rsad's own answer to a busy moment (503, 504: TRANSIENT,
#: which says whether the request was done) comes before rsa-bb gives up on it. The hooks'
#: call timeout (RSA_HOOK_TIMEOUT, hooks.api_timeout: 2 s) counts only above it
ANSWER_WAIT = 30.0
#: how long rsad may be unreachable (or busy) before data_in / data_out give up (a
#: restarting rsad must not fail a stage; a dead one must not hold the job for
#: StageInTimeout without a word)
UNREACHABLE = 300.0
#: how long setup, real_size, pre_run and post_run ask again while rsad is unreachable,
#: busy, starting or not sure yet: under Slurm's OtherTimeout (default 300 s), which kills
#: the hook and counts it failed
OTHER_WAIT = 240.0
#: teardown answers before Slurm's OtherTimeout (default 300 s) kills it: Slurm retries
TEARDOWN_WAIT = 240.0
#: rsad's answers that say "not now" (429: too many requests, 503: busy or starting, 504:
#: its loop took the request but did not answer in time),
#: 401 (the credential was refused: munged restarting, clock skew) and 500 (rsad's
#: internal error: its event log could not be written, and rsad stops, its restart
#: replaying the log without the failed request; or a fault in serving it): asked again
#: within the hook's time. Every hook is safe to ask again (daemon/native.py: setup of a
#: job set up already changes nothing; the others read or wait), and only an answer
#: rsad signed (client.py: a 500 comes only signed) is taken for rsad's
TRANSIENT = frozenset({401, 429, 500, 503, 504})

#: what Slurm does when the hook fails, and the way out (``{job}``: the job id)
THEN = {
    "setup": "Slurm holds job {job} (BurstBufferOperation); once rsad answers, scancel it "
             "and submit it again",
    "real_size": "Slurm holds job {job} (BurstBufferOperation); once rsad answers, "
                 "scancel it and submit it again",
    "pre_run": "Slurm requeues job {job} (held after 3 tries) and sets its burst buffer "
               "up again",
    "post_run": "Slurm skips data_out and keeps job {job} in stage-out; rsad, once it "
                "runs again, stages the output out (`rsa job {job}`), then `scancel "
                "--hurry {job}` ends Slurm's stage-out",
    "data_in": "Slurm holds job {job} (BurstBufferOperation); once rsad answers, scancel "
               "it and submit it again",
    "data_out": "Slurm keeps job {job} in stage-out; rsad, once it runs again, stages the "
                "output out (`rsa job {job}`), then `scancel --hurry {job}` ends Slurm's "
                "stage-out",
    "teardown": "Slurm asks again (3 runs in all, then it drops the buffer); rsad keeps job "
                "{job}'s RAMDISK until its output is verified",
}

Post = Callable[[str, Mapping[str, Any]], Any]


class Unreachable(RsaError):
    """rsad did not answer (the transport's error text), or no credential could be made
    (munged not answering): asked again."""


class Refused(RsaError):
    """rsad answered with an error (its text, and the HTTP status)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def _budget(hook: str, unreachable: float, other_wait: float,
            teardown_wait: float) -> float:
    if hook == "teardown":
        return teardown_wait
    return unreachable if hook in BLOCKING else other_wait


def call_hook(post: Post, hook: str, body: Mapping[str, Any], *,
              sleep: Callable[[float], None] = time.sleep,
              clock: Callable[[], float] = time.monotonic,
              poll: float = POLL, unreachable: float = UNREACHABLE,
              other_wait: float = OTHER_WAIT,
              teardown_wait: float = TEARDOWN_WAIT) -> tuple[bool, str]:
    """Ask rsad, and ask again until done or failed.

    ``post(path, body)`` returns rsad's JSON answer or raises :class:`Unreachable` /
    :class:`Refused`. rsad unreachable, busy, starting or failing inside (an answer in
    :data:`TRANSIENT`), and "wait" answers are asked again: data_in and data_out while
    rsad stays without an answer (unreachable, or transient) less than ``unreachable``
    seconds (a stage may take as long as Slurm's StageInTimeout / StageOutTimeout allow);
    teardown for ``teardown_wait`` seconds in all, the other hooks ``other_wait``: both
    under Slurm's OtherTimeout. Returns (success, the one line for Slurm: on a failure,
    what Slurm then does and the way out)."""
    path = f"/v1/bb/{hook}"
    job = str(body.get("job_id"))
    budget = _budget(hook, unreachable, other_wait, teardown_wait)
    then = THEN.get(hook, "").format(job=job)
    started = last_contact = clock()
    last_wait = ""
    while True:
        trouble = ""
        try:
            answer = post(path, body)
        except Refused as e:
            if e.status not in TRANSIENT:
                return False, f"rsad refused {hook} of job {job}: {e}"
            trouble = f"rsad answered {e.status} ({e})"
        except Unreachable as e:
            trouble = f"rsad unreachable ({e})"
        if trouble:
            # no answer: data_in / data_out count from the last answer, the rest from
            # their start
            since = last_contact if hook in BLOCKING and hook != "teardown" else started
            waited = clock() - since
            if waited >= budget:
                return False, f"{hook} of job {job}: {trouble} for {waited:.0f}s; {then}"
            sleep(poll)
            continue
        last_contact = clock()
        verdict, message = read_answer(hook, answer)
        if verdict is not None:
            return verdict, message
        last_wait = message
        if hook not in BLOCKING or hook == "teardown":
            waited = clock() - started
            if waited >= budget:
                return False, (f"job {job}: after {waited:.0f}s rsad still says: "
                               f"{last_wait}; {then}")
        sleep(poll)


def ask_once(post: Post, hook: str, body: Mapping[str, Any]) -> tuple[bool | None, str]:
    """One question to rsad, for a hook Slurm polls (``--once``): (True, message) when
    done, (None, what rsad is doing) while it works or cannot answer now (unreachable,
    busy, starting, failing inside: :data:`TRANSIENT`; Slurm asks again at its next
    poll, up to StageInTimeout / StageOutTimeout), (False, the one line for Slurm) when
    it failed or refused."""
    job = str(body.get("job_id"))
    try:
        answer = post(f"/v1/bb/{hook}", body)
    except Refused as e:
        if e.status not in TRANSIENT:
            return False, f"rsad refused {hook} of job {job}: {e}"
        return None, f"rsad answered {e.status} ({e}); asked again at Slurm's next poll"
    except Unreachable as e:
        return None, f"rsad unreachable ({e}); asked again at Slurm's next poll"
    return read_answer(hook, answer)


def read_answer(hook: str, answer: Any) -> tuple[bool | None, str]:
    """rsad's answer to a hook: (True, message) done, (False, message) failed or not an
    answer rsa-bb knows, (None, what rsad is doing) while it works."""
    status = str(answer.get("status", "")) if isinstance(answer, dict) else ""
    message = str(answer.get("message", "")) if isinstance(answer, dict) else ""
    if status == "done":
        return True, message
    if status == "failed":
        return False, message
    if status == "wait":
        return None, message
    return False, f"rsad answered {hook} with {answer!r}: rsad and rsa-bb differ"


def request_body(hook: str, args: Sequence[str]) -> dict[str, Any]:
    """The API body from burst_buffer.lua's arguments (all strings, Slurm's order):
    ``setup JOB UID GID POOL SIZE``, ``teardown JOB HURRY``, else ``HOOK JOB``."""
    if not args or not args[0].isdigit():
        raise ValueError(f"rsa-bb {hook}: the first argument must be a job id, not "
                         f"{(args[0] if args else '')[:20]!r}")
    body: dict[str, Any] = {"job_id": args[0]}
    if hook == "setup":
        for key, value in zip(("uid", "gid", "pool", "size"), args[1:], strict=False):
            body[key] = value
    elif hook == "teardown":
        body["hurry"] = "true" if len(args) > 1 and args[1] == "true" else "false"
    return body


def status_text(status: Mapping[str, Any], *, jobs: bool = True) -> str:
    """``scontrol show bbstat``: rsad's RSA nodes and jobs, in a few lines. ``jobs``:
    name the job holding a node as ``status`` names it (rsad's view for the caller:
    another user's job is ``(hidden)`` there); otherwise a held node says ``held``."""
    nodes = list(status.get("nodes") or [])
    free = [n["name"] for n in nodes if n.get("state") == "up" and not n.get("job")]
    lines = [f"RSA nodes: {len(nodes)}, free {len(free)}"
             + (f" ({','.join(free)})" if free else "")]
    for node in nodes:
        if node.get("state") != "up" or node.get("job"):
            held = ("" if not node.get("job") else
                    f"job {node['job']}" if jobs else "held")
            lines.append(f"  {node['name']} {node.get('state')} {held}".rstrip())
    by_state = dict(status.get("jobs_by_rsa_state") or {})
    if by_state:
        lines.append("jobs: " + ", ".join(f"{k} {v}" for k, v in sorted(by_state.items())))
    return "\n".join(lines)


def status_of(get: Callable[[str], Any], uid: str | None) -> str:
    """``rsa-bb status [UID]``: with the caller's uid (Slurm 23.02 and later give it to
    slurm_bb_get_status), what rsad shows that uid: an operator every job, a user only
    their own; without one (22.05 says nothing of who asks), totals and no job at all."""
    if uid is None:
        return status_text(get("/v1/status"), jobs=False)
    if not uid.isdigit():
        raise ValueError(f"rsa-bb status: UID must be a number, not {uid[:20]!r}")
    return status_text(get(f"/v1/status?as={uid}"))


#: where burst_buffer.lua's slurm_bb_pools reads the pools (its CONFIG.pools_file)
POOLS_FILE = "/run/rsa/bb-pools.json"


def pools_text(answer: Any) -> str:
    """The pools file's text from rsad's ``GET /v1/bb/pools`` answer, as rsad writes it
    on its own host (native.pools_json); ValueError for anything else."""
    pools = answer.get("pools") if isinstance(answer, dict) else None
    if not isinstance(pools, list) or not all(
            isinstance(p, dict) and isinstance(p.get("id"), str)
            and all(isinstance(p.get(k), int) for k in ("quantity", "granularity", "free"))
            for p in pools):
        raise ValueError("rsad's answer is not a pools list")
    return json.dumps({"pools": pools}, sort_keys=True)


def replace_pools_file(path: Path, text: str) -> None:
    """Replace the pools file ``path`` with ``text`` and a newline atomically, mode 0644
    (slurmctld reads it as SlurmUser). rsad's own (native.NativeDriver.write_pools) and
    ``rsa-bb pools``'s copy on a slurmctld host without rsad are written so, as root.

    The new content goes to a file of its own, created (never opened: ``mkstemp``'s
    ``O_EXCL``) under a name no one can guess, and its mode is set on the open file:
    whoever else may write in the file's directory (a site's choice of
    ``slurm.bb_pools_file``: SlurmUser's state directory, a shared one) cannot have root
    write into, or make readable, a file a symlink of theirs names, as a fixed temporary
    name let them. The rename replaces ``path`` itself, a symlink there included."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o644)
            f.write(text + "\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_pools_file(path: Path, text: str) -> bool:
    """:func:`replace_pools_file` unless ``path`` holds ``text`` already; returns whether
    it wrote."""
    try:
        if path.read_text() == text + "\n":
            return False
    except OSError:
        pass
    replace_pools_file(path, text)
    return True


def sync_pools(get: Callable[[str], Any], path: Path, every: float | None, *,
               sleep: Callable[[float], None] = time.sleep,
               say: Callable[[str], None] = lambda line: print(line, file=sys.stderr,
                                                               flush=True),
               rounds: int | None = None) -> tuple[bool, str]:
    """``rsa-bb pools``: rsad's pools into ``path`` once, or every ``every`` seconds for
    ever (``rounds``: that many, for tests). A slurmctld host that does not run rsad
    has no pools file of rsad's, and slurm_bb_pools may read only a local file (it runs
    in slurmctld with its locks held): without this, Slurm sees no space and every
    burst buffer job pends (BurstBufferResources). A failed round says why on stderr and
    keeps the file as it was (rsad restarting: the next round writes it)."""
    done = 0
    message = ""
    while True:
        try:
            wrote = write_pools_file(path, pools_text(get("/v1/bb/pools")))
            ok, message = True, f"{path} {'written' if wrote else 'unchanged'}"
        except Exception as e:  # one line, the file kept
            ok, message = False, f"rsa-bb pools: {e} ({path} kept as it was)"
            if every is not None:
                say(message)
        done += 1
        if every is None or (rounds is not None and done >= rounds):
            return ok, message
        sleep(every)


USAGE = """usage: rsa-bb HOOK JOB_ID [ARGS...]   (HOOK: setup data_in real_size pre_run
                                       post_run data_out teardown)
       rsa-bb --once data_in|data_out JOB_ID  (ask once: `busy MESSAGE` while staging;
                                       Slurm 24.05+ polls test_data_in/out)
       rsa-bb status [UID]  (UID: the caller of `scontrol show bbstat`, Slurm 23.02+;
                             without it: totals only, no job ids)
       rsa-bb pools [FILE] [--every SECONDS]  (on a slurmctld host without rsad: rsad's
                             pools into FILE, default /run/rsa/bb-pools.json, which
                             burst_buffer.lua's slurm_bb_pools reads; the unit
                             rsa-bb-pools.service runs it every 15 s)

Run by slurm_plugins/burst_buffer.lua (native mode, slurm.mode: native) as SlurmUser.
Prints `ok MESSAGE` or `error MESSAGE` on stdout, nothing else there (anything else goes
to stderr, which burst_buffer.lua logs in slurmctld's log), and exits 0 or 1. rsad's
address: --api ADDR, RSA_API, else /etc/rsa/client.conf (RSA_CLIENT_CONFIG), else
daemon.api of the configuration (RSA_CONFIG, default /etc/rsa/rsa.yaml), which SlurmUser
must then read.
"""


def _post_with(address: str | None, timeout: float) -> tuple[Post, Callable[[str], Any]]:
    from rsa_scheduler.client import ApiClient, ApiRefused, ApiUnavailable
    from rsa_scheduler.munge import MungeError

    # SlurmUser acts on these answers (Slurm starts a job whose data_in said done, ends
    # one whose data_out did): only rsad's, signed with its MUNGE credential (root's),
    # count; an impostor on rsad's TCP port while rsad is down cannot sign one
    client = ApiClient(address, timeout=timeout, trust_uid=0)

    def post(path: str, body: Mapping[str, Any]) -> Any:
        try:
            return client.post(path, dict(body))
        except ApiRefused as e:
            raise Refused(str(e), e.status) from e
        except (ApiUnavailable, MungeError) as e:  # munged restarting: asked again
            raise Unreachable(str(e)) from e

    return post, client.get


def pools_args(args: Sequence[str]) -> tuple[Path, float | None]:
    """``[FILE] [--every SECONDS]`` of ``rsa-bb pools``."""
    rest = list(args)
    every: float | None = None
    if "--every" in rest:
        i = rest.index("--every")
        try:
            every = float(rest[i + 1])
        except (IndexError, ValueError):
            raise ValueError("--every: give SECONDS, e.g. --every 15") from None
        if not 1 <= every <= 3600:
            raise ValueError("--every: SECONDS between 1 and 3600")
        del rest[i:i + 2]
    if len(rest) > 1 or (rest and not rest[0].startswith("/")):
        raise ValueError("give one absolute FILE (burst_buffer.lua's "
                         "CONFIG.pools_file) or none")
    return Path(rest[0] if rest else POOLS_FILE), every


def run(argv: Sequence[str], env: Mapping[str, str]) -> tuple[bool | None, str]:
    """rsa-bb's answer: (True, message) ok, (False, message) error, (None, message) busy
    (``--once`` only)."""
    args = list(argv)
    address: str | None = None
    if len(args) >= 2 and args[0] == "--api":
        address, args = args[1], args[2:]
    once = bool(args) and args[0] == "--once"
    if once:
        args = args[1:]
    if not args or args[0] not in HOOKS:
        return False, f"rsa-bb: unknown hook {(args[0] if args else '')[:20]!r}; see rsa-bb -h"
    hook, rest = args[0], args[1:]
    if once and hook not in ONCE:
        return False, f"rsa-bb --once: only for {' and '.join(sorted(ONCE))}, not {hook}"
    try:
        if address is None:
            from rsa_scheduler.hooks import _api_address

            address, timeout = _api_address(env)
        else:
            timeout = ANSWER_WAIT
        post, get = _post_with(address, max(timeout, ANSWER_WAIT))
        if hook == "status":
            return True, status_of(get, rest[0] if rest else None)
        if hook == "pools":
            path, every = pools_args(rest)
            return sync_pools(get, path, every)
        if once:
            return ask_once(post, hook, request_body(hook, rest))
        return call_hook(post, hook, request_body(hook, rest))
    except Exception as e:  # one line for Slurm, whatever went wrong
        return False, f"rsa-bb {hook}: {e}"


def main() -> None:
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        sys.stdout.write(USAGE)
        sys.exit(0)
    if sys.argv[1:] == ["--version"]:
        from rsa_scheduler import __version__

        sys.stdout.write(f"rsa-bb {__version__}\n")
        sys.exit(0)
    answer = answer_only_on_stdout()
    ok, message = run(sys.argv[1:], os.environ)
    line = " ".join(message.split()) if "\n" not in message else message
    word = "busy" if ok is None else "ok" if ok else "error"
    os.write(answer, f"{word} {line}\n".encode(errors="replace"))
    sys.exit(1 if ok is False else 0)


def answer_only_on_stdout() -> int:
    """Keep stdout for rsa-bb's answer alone: a duplicate of it is returned for the
    answer, and file descriptor 1 becomes stderr, so whatever else writes to stdout (a
    library's message, a ``print``) reaches stderr with the warnings. burst_buffer.lua
    reads the answer from stdout only and logs stderr (its ``command``): nothing but the
    answer can be taken for it."""
    sys.stdout.flush()
    answer = os.dup(1)
    os.dup2(2, 1)
    return answer
