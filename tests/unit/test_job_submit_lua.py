"""slurm_plugins/job_submit.lua outside Slurm: every shared directive vector, a differential
run against the Python grammar, --rsa-* options merged with the script (against
directives.check_submission), and the lock-in rules of slurm_job_modify.

The plugin runs in a real Lua interpreter with a stubbed ``slurm`` table
(tests/lua/run_vector.lua). Slurm 22.05's job_submit_lua.so links liblua5.1, so Lua 5.1 is
the target (Debian package ``lua5.1``); every other ``lua5.x`` found runs the same tests.
Without any interpreter the tests skip, except under CI=true where that is a failure.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rsa_scheduler.config import load_defaults
from rsa_scheduler.core.dependency import (
    LATER_BASE,
    later_begin,
    later_hold,
    own_begin,
    read_dep_mark,
)
from rsa_scheduler.core.directives import (
    MAX_LINE,
    MAX_SCRIPT,
    DirectiveErrors,
    DirectiveSpec,
    SubmissionErrors,
    check_submission,
    decode_script,
    parse_directives_bytes,
    split_hold,
)
from tests.conftest import DATA
from tests.directive_inputs import SPLIT_TEXT, far_script

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "slurm_plugins" / "job_submit.lua"
MODULE = PLUGIN.parent / "rsa_job_submit.lua"  # job_submit.lua loads it; a site's calls it
# job_submit.lua, its module and, in the order the module loads them, the files it reads
# from its own directory
PLUGIN_FILES = [PLUGIN, MODULE, *(PLUGIN.parent / f for f in (
    "rsa_grammar.lua", "rsa_text.lua", "rsa_directives.lua"))]
DRIVER = ROOT / "tests" / "lua" / "run_vector.lua"
VECTORS = DATA / "directives"
NAMES = sorted(p.stem for p in VECTORS.glob("*.sh"))

TARGET = "lua5.1"  # what Debian's job_submit_lua.so links (ldd); the one that matters
INTERPRETERS = [n for n in (TARGET, "lua5.2", "lua5.3", "lua5.4") if shutil.which(n)]
LUA_PARAMS: list[str | None] = [*INTERPRETERS] or [None]  # None: skip (or fail in CI)
NO_VAL = 4294967294
NICE_OFFSET = 2**31
ACCESS_DENIED = 2002  # ESLURM_ACCESS_DENIED in 22.05's slurm_errno.h
# the grammar vectors run with early_start=fallback: no start hold (tested on its own)
VECTOR_ENV = {**os.environ, "RSA_LUA_CONFIG": "early_start=fallback"}


def _no_lua() -> None:
    reason = f"no Lua interpreter ({TARGET} is Slurm 22.05's): apt-get install {TARGET}"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(params=LUA_PARAMS)
def lua(request: pytest.FixtureRequest) -> str:
    if request.param is None:
        _no_lua()
    return str(request.param)


def test_slurm_target_interpreter_present() -> None:
    """The interpreter Slurm links must be among those tested (CI installs it)."""
    if TARGET not in INTERPRETERS:
        _no_lua()


@dataclass
class Result:
    rc: int
    sets: dict[str, str] = field(default_factory=dict)
    msgs: list[str] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    hold: int | None = None  # the start hold's deadline (early start wait), taken out of sets


def _parse(lines: list[str]) -> Result:
    res = Result(rc=int(lines[0].removeprefix("RC ")))
    for line in lines[1:]:
        kind, _, rest = line.partition(" ")
        if kind == "SET":
            key, _, value = rest.partition(" ")
            res.sets[key] = value
        elif kind == "MSG":
            res.msgs.append(rest)
        elif kind == "LOG":
            res.logs.append(rest)
        else:
            raise AssertionError(f"unexpected driver output {line!r}")
    if "begin_time" in res.sets and "admin_comment" in res.sets and \
            " hold=after:" not in res.sets["admin_comment"]:  # not the dependency hold
        # the start hold: begin time and the marker agree; the grammar tests compare the rest
        spec, deadline = split_hold(res.sets["admin_comment"])
        assert deadline is not None and str(deadline) == res.sets.pop("begin_time"), res
        res.sets["admin_comment"], res.hold = spec, deadline
    return res


def run_many(lua: str, scripts: list[Path]) -> dict[str, Result]:
    """Submit every script through slurm_job_submit in one interpreter."""
    done = subprocess.run([lua, str(DRIVER), str(PLUGIN), "many", *map(str, scripts)],
                          capture_output=True, timeout=120, check=False, env=VECTOR_ENV)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    out: dict[str, Result] = {}
    chunks = done.stdout.decode("utf-8").split("FILE ")[1:]
    for chunk in chunks:
        path, *lines = chunk.rstrip("\n").split("\n")
        out[path] = _parse(lines)
    assert len(out) == len(scripts)
    return out


def run_modify(lua: str, uid: int, **fields: object) -> Result:
    return run_modify_in(VECTOR_ENV, lua, uid, fields)


def run_modify_in(env: dict[str, str], lua: str, uid: int,
                  fields: dict[str, object]) -> Result:
    args = [f"{k.replace('__', '.', 1)}={v}" for k, v in fields.items()]
    done = subprocess.run([lua, str(DRIVER), str(PLUGIN), "modify", str(uid), *args],
                          capture_output=True, text=True, timeout=30, check=False, env=env)
    assert done.returncode == 0, done.stderr
    return _parse(done.stdout.rstrip("\n").split("\n"))


# --- the shared vectors -----------------------------------------------------------------


def test_every_vector(lua: str) -> None:
    results = run_many(lua, [VECTORS / f"{n}.sh" for n in NAMES])
    failures = []
    for name in NAMES:
        got = results[str(VECTORS / f"{name}.sh")]
        js, err = VECTORS / f"{name}.json", VECTORS / f"{name}.err"
        if js.exists():
            spec = DirectiveSpec.from_json(json.loads(js.read_text(encoding="utf-8")))
            want_sets = {} if spec.is_empty else {"admin_comment": spec.to_admin_comment()}
            if (got.rc, got.sets, got.msgs) != (0, want_sets, []):
                failures.append(f"{name}: want rc 0 {want_sets}, got {got}")
        else:
            want = err.read_text(encoding="utf-8").splitlines()
            if (got.rc, got.sets, got.msgs) != (-1, {}, want):
                failures.append(f"{name}: want rc -1 {want}, got {got}")
    assert not failures, "\n".join(failures)
    assert len(NAMES) >= 70  # the vectors are all there


def test_messages_are_not_format_strings(lua: str, tmp_path: Path) -> None:
    script = tmp_path / "pct.sh"
    script.write_bytes(b"#!/bin/sh\n#RSA_TIER=%s%d%%\n")
    got = run_many(lua, [script])[str(script)]
    assert got.msgs == ["2: RSA_TIER must be one of ram, ssd, auto, got '%s%d%%'"]


def test_non_batch_jobs_untouched(lua: str, tmp_path: Path) -> None:
    script = tmp_path / "empty.sh"
    script.write_bytes(b"")  # salloc/srun: job_desc.script is nil or empty
    assert run_many(lua, [script])[str(script)] == Result(rc=0)


# --- differential: random scripts through Python and Lua ----------------------------------

PIECES_NAME = ["DATA_IN", "DATA_OUT", "PREPROCESS", "POSTPROCESS", "NODES", "TIER", "CAPACITY",
               "STAGE_OUT", "EARLY_START", "INPUT", "RESET", "data_in", "NODE", "TEIR", "RSET",
               "INPT", "DATA_IN/x", "NODES\u00e9", "\u00dfTAGE_OUT", "DATA_\u0131N", "", "X",
               "STAGE\u2126OUT", "EARLY_ST\ufb06RT", "DATA\xff_IN", "CAPACITY\x01",
               "EARLY_STARTT" * 2, "data_out" * 3, "\u0390TIER", "PRE\u1f52CESS", "T\u0130ER"]
PIECES_SEP = ["=", " ", " = ", "\t=\t", "", "==", "\v", " =  "]
PIECES_VALUE = [
    "/gpfs/in", "//gpfs//in//", "/gpfs/./in", "/", "gpfs/in", '"/a b/c"', "'/a b'", "/a\\ b",
    "/a b", "'unclosed", '"/x\\', "\\", "''", '""', "/caf\u00e9", "/x\x01y", "/x\u0085y",
    "/bad\xff\xfe", "/bin/prog arg1 'two words' \"q\\\"x\" a,b%c", "prog --x", "/p a\xff",
    "2", "0", "007", "2147483648", "two", "1 2", "512G", "3.5T", "1.5TiB", "3.5tb", "1", "0K",
    "9007199254740993K", "1e3G", "8P", "0.0000001K", "ram", "RAM", "ssd", "rma", "sd",
    "r\u0130m", "rsync", "TAR", "tra", "fallbac\u212a", "fallback", "wait", "union", "unoin",
    "Ro", "rw", "r", "input-done", "INPUT-DONE", "10m", "30s", "1.5s", "1000ms", "1500ms",
    "2h", "1d", "366d", "0", "5", "1:30", "1:2:3", "1-2", "1-2:3:4", "1:2:3:4", "10x",
    "1.5", "#hash", "a # b", "\u00e9t\u00e9", "x" * 300, "/" + "a" * 256, "/" + "a/" * 2100,
]
PIECES_OTHER = ["#!/bin/bash", "", "# comment", "  #RSA_NODES=2", "#SBATCH -N 1", "\t", "\r",
                "echo hi", "# RSA_DATA_IN=/x", "\ufeff#x", "#RSA_NODES=2\r"]


def _random_script(rng: random.Random) -> bytes:
    lines = []
    if rng.random() < 0.7:
        lines.append("#!/bin/sh")
    for _ in range(rng.randint(0, 7)):
        if rng.random() < 0.75:
            value = " ".join(rng.choice(PIECES_VALUE) for _ in range(rng.choice((1, 1, 1, 2))))
            lines.append("#RSA_" + rng.choice(PIECES_NAME) + rng.choice(PIECES_SEP) + value)
        else:
            lines.append(rng.choice(PIECES_OTHER))
    text = "\n".join(lines) + rng.choice(["\n", "", "\necho done\n#RSA_NODES=x\n"])
    # surrogate escapes stand for raw bytes (\xff above is one byte, not U+00FF)
    data = text.encode("utf-8", "surrogateescape").replace(b"\xc3\xbf", b"\xff")
    return data.replace(b"\xc3\xbe", b"\xfe")


GOOD = {
    "DATA_IN": ["/gpfs/in", "//gpfs//in//", '"/a b/c d"', "/caf\u00e9/x,y;z%", "/a\\ b"],
    "DATA_OUT": ["/gpfs/out/", "'/o=ut'", "/\u00fc/\u4e2d"],
    "PREPROCESS": ["/bin/unpack.sh", "/bin/x a,b '' \"c d\" %41 \u00e9", "//usr//bin/x -v"],
    "POSTPROCESS": ["/bin/pack.sh out.tar", "/p ,"],
    "NODES": ["1", "2", "0007", "2147483647"],
    "TIER": ["ram", "SSD", "Ram"],
    "CAPACITY": ["512G", "3.5T", "1.5TiB", "3.5tb", "1k", "8P", "0.5K", "12345678901234567890K"],
    "STAGE_OUT": ["rsync", "TAR"],
    "EARLY_START": ["fallback", "WAIT", "Union", "fallbac\u212a"],
    "INPUT": ["ro", "RW"],
    "RESET": ["input-done", "Input-Done", "10m", "30s", "1000ms", "2h", "1d", "5", "1:30",
              "1:2:3", "1-2", "1-0:0:1", "365d", "0.5m", "1.5H"],
}


def _valid_script(rng: random.Random) -> bytes:
    lines = ["#!/bin/bash"]
    for name in rng.sample(sorted(GOOD), rng.randint(1, 6)):
        sep = rng.choice(["=", " ", " = ", "\t"])
        lines.append(f"#RSA_{name}{sep}{rng.choice(GOOD[name])}")
        if rng.random() < 0.2:
            lines.append(rng.choice(PIECES_OTHER[:5]))
    return ("\n".join(lines) + "\nsrun hostname\n").encode()


def _python(data: bytes) -> tuple[int, dict[str, str], list[str]]:
    try:
        spec = parse_directives_bytes(data)
    except DirectiveErrors as e:
        return -1, {}, [str(err) for err in e.errors]
    return 0, ({} if spec.is_empty else {"admin_comment": spec.to_admin_comment()}), []


def test_differential_random_scripts(lua: str, tmp_path: Path) -> None:
    rng = random.Random(20261104)
    scripts = []
    for i in range(2500):
        path = tmp_path / f"s{i}.sh"
        path.write_bytes(_random_script(rng) if i % 2 else _valid_script(rng))
        scripts.append(path)
    results = run_many(lua, scripts)
    failures = []
    for path in scripts:
        want = _python(path.read_bytes())
        got = results[str(path)]
        if (got.rc, got.sets, got.msgs) != want:
            failures.append(f"{path.read_bytes()!r}\n  python {want}\n  lua    {got}")
    assert not failures, f"{len(failures)} differ, first:\n" + "\n".join(failures[:5])



# --- lock-in protection (slurm_job_modify) -----------------------------------------------

USER = 1001
SLURM_UID = 64030


@pytest.mark.parametrize("change", [
    {"desc__qos": "normal"},
    {"desc__priority": 1},
    {"desc__priority": 0},  # scontrol hold
    {"desc__nice": NICE_OFFSET + 10},
    {"desc__qos": "normal", "desc__nice": NICE_OFFSET},
])
def test_user_cannot_undo_lockin(lua: str, change: dict[str, object]) -> None:
    got = run_modify(lua, USER, job__qos="rsa-lockin", **change)
    assert got.rc == ACCESS_DENIED
    assert got.sets == {} and got.msgs == []  # job_modify cannot talk to the user (22.05)
    assert "locked in by the RSA" in got.logs[0] and "job 42" in got.logs[0]


@pytest.mark.parametrize("change", [
    {"desc__time_limit": 30},
    {"desc__comment": "mine"},
    {"desc__priority": NO_VAL, "desc__nice": NO_VAL},  # not part of this request
])
def test_user_may_change_other_fields_of_locked_job(lua: str, change: dict[str, object]) -> None:
    assert run_modify(lua, USER, job__qos="rsa-lockin", **change) == Result(rc=0)


@pytest.mark.parametrize("job_qos", ["normal", "nil"])
def test_unlocked_job_is_free(lua: str, job_qos: str) -> None:
    got = run_modify(lua, USER, job__qos=job_qos, desc__qos="normal", desc__nice=NICE_OFFSET + 5)
    assert got == Result(rc=0)


def test_root_may_unlock(lua: str) -> None:
    got = run_modify(lua, 0, job__qos="rsa-lockin", desc__qos="normal", desc__priority=1)
    assert got == Result(rc=0)


def test_slurm_user_may_unlock_when_configured(lua: str) -> None:
    change = {"job__qos": "rsa-lockin", "desc__qos": "normal"}
    assert run_modify(lua, SLURM_UID, **change).rc == ACCESS_DENIED  # not configured
    got = run_modify(lua, SLURM_UID, config__slurm_user_uid=SLURM_UID, **change)
    assert got == Result(rc=0)


def test_lockin_qos_is_configurable(lua: str) -> None:
    change = {"job__qos": "pinned", "desc__qos": "normal"}
    assert run_modify(lua, USER, **change).rc == 0
    assert run_modify(lua, USER, config__lockin_qos="pinned", **change).rc == ACCESS_DENIED


def test_priority_mode_lockin(lua: str) -> None:
    job = {"job__qos": "nil", "job__priority": 1_000_000, "desc__nice": NICE_OFFSET + 1}
    assert run_modify(lua, USER, **job).rc == 0  # below the default lockin_priority
    assert run_modify(lua, USER, config__lockin_priority=1_000_000, **job).rc == ACCESS_DENIED
    job["job__priority"] = 999_999
    assert run_modify(lua, USER, config__lockin_priority=1_000_000, **job).rc == 0
    assert run_modify(lua, USER, config__lockin_priority="nil", **{  # nil: off
        **job, "job__priority": 4_294_967_000}).rc == 0


def test_the_default_guards_rsads_default_priority_lock_in(lua: str) -> None:
    """rsad locks in by priority by default (slurm.lockin.priority): the plugin's default
    lockin_priority is that value, so a stock install refuses the owner of a locked-in job
    lowering its priority to just below the lock-in's (Slurm lets users lower a job's
    priority; rsad's restore leaves a priority no longer the lock-in's alone: a fixed
    place above every other job) or changing its nice."""
    lockin = load_defaults().slurm.lockin.priority
    job = {"job__qos": "normal", "job__priority": lockin}
    for change in ({"desc__priority": lockin - 1}, {"desc__nice": NICE_OFFSET + 1}):
        got = run_modify(lua, USER, **job, **change)
        assert got.rc == ACCESS_DENIED, change
    assert run_modify(lua, 0, **job, desc__priority=1234).rc == 0  # rsad's restore
    assert run_modify(lua, USER, job__qos="normal", job__priority=lockin - 1,
                      desc__priority=5).rc == 0  # its own priority back: the user's again
    assert f"lockin_priority = {lockin}," in PLUGIN.read_text()


def _code(path: Path) -> str:
    text = re.sub(r"--\[\[.*?\]\]", "", path.read_text(), flags=re.S)
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def test_plugin_uses_no_io(lua: str) -> None:
    """Runs inside slurmctld under its locks (style.md): no I/O, no processes, no modules;
    job_submit.lua reads its module and the module its three files, once, at load (one
    loadfile each, the module's in sibling(); debug.getinfo only to find their own
    directory)."""
    # os.time (a clock read, for the start hold's deadline) is the one os function
    banned = (r"\bio\.", r"\bos\.(?!time\b)", r"\brequire\b", r"\bdofile\b",
              r"\bloadfile\b", r"\bprint\b", r"\bdebug\.", r"\bloadstring\b", r"\bload\(")
    for path in PLUGIN_FILES:
        code = _code(path)
        if path == MODULE:
            assert len(re.findall(r"\bloadfile\(", code)) == 1
            assert re.search(r"local function sibling\(.*?\bloadfile\(HERE \.\. name\)",
                             code, re.S)
            code = re.sub(r"\bloadfile\(|\bdebug\.getinfo\b|\bdebug and\b", "", code)
        if path == PLUGIN:
            assert len(re.findall(r"\bloadfile\(", code)) == 1
            assert re.search(r"\bloadfile\(MODULE\)", code)
            code = re.sub(r"\bloadfile\(|\bdebug\.getinfo\b|\bdebug and\b", "", code)
        for pattern in banned:
            assert not re.search(pattern, code), (path.name, pattern)


def test_the_plugin_files_are_the_ones_installed_everywhere() -> None:
    """job_submit.lua loads its module, the module its siblings, by name: the wheel and
    the .deb (pyproject's data-files), the lab and the install test ship exactly those,
    beside it."""
    loaded = ["rsa_job_submit.lua",
              *re.findall(r'\bsibling\("([a-z_]+\.lua)"', MODULE.read_text())]
    assert '"rsa_job_submit.lua"' in PLUGIN.read_text()
    assert [p.name for p in PLUGIN_FILES] == ["job_submit.lua", *loaded]
    shipped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "data-files"]["share/rsa-scheduler/slurm"]
    assert {f"slurm_plugins/{p.name}" for p in PLUGIN_FILES} <= set(shipped)
    lab = (ROOT / "lab" / "rsalab" / "slurm.py").read_text()
    parts = re.search(r"JOB_SUBMIT_PARTS = \(([^)]*)\)", lab)
    assert parts is not None and re.findall(r'"([a-z_]+\.lua)"', parts.group(1)) == loaded
    inside = (ROOT / "tests" / "install" / "inside").read_text()
    assert f"for f in {' '.join(p.name for p in PLUGIN_FILES)}; do" in inside


def _installed(tmp_path: Path) -> Path:
    """The four files as a site installs them: copied into one directory (not the repo's)."""
    conf = tmp_path / "etc-slurm"
    conf.mkdir()
    for path in PLUGIN_FILES:
        shutil.copyfile(path, conf / path.name)
    return conf


def test_the_plugin_finds_its_files_beside_itself(lua: str, tmp_path: Path) -> None:
    """Wherever job_submit.lua is (here not the repository, and not the working
    directory), it loads its files from its own directory."""
    conf = _installed(tmp_path)
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#RSA_DATA_IN=/gpfs/in\n#RSA_NODES=2\n")
    done = subprocess.run([lua, str(DRIVER), str(conf / "job_submit.lua"), "submit",
                           str(script)], capture_output=True, text=True, timeout=30,
                          check=False, env=VECTOR_ENV, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _parse(done.stdout.rstrip("\n").split("\n")) == Result(
        0, {"admin_comment": "rsa1:i=/gpfs/in;n=2"})


@pytest.mark.parametrize(("uid", "script"), [(1002, "#!/bin/sh\necho hi\n"),
                                           (1002, "#!/bin/sh\n#RSA_DATA_IN=/gpfs/in\n"),
                                           (0, "#!/bin/sh\necho hi\n")])
def test_an_admin_comment_brought_at_submission_is_refused(
        lua: str, tmp_path: Path, uid: int, script: str) -> None:
    """Issue 36: rsad reads a job's directives and its start hold from its admin_comment,
    and trusts it as this plugin's or an operator's. A user submitting through libslurm
    or slurmrestd could set one (sbatch has no option for it): refused; root may."""
    path = tmp_path / "job.sh"
    path.write_text(script)
    forged = "rsa1:i=/gpfs/other-user/in hold=1"
    done = subprocess.run([lua, str(DRIVER), str(PLUGIN), "submit", str(path), str(uid),
                           forged], capture_output=True, text=True, timeout=30,
                          check=False, env=VECTOR_ENV)
    assert done.returncode == 0, done.stderr
    got = _parse(done.stdout.rstrip("\n").split("\n"))
    if uid == 0:
        assert got.rc == 0 and got.msgs == [], got
    else:
        assert got.rc == -1 and got.sets == {}, got
        assert got.msgs == ["rsa: an admin_comment is set by the site, not at submission: "
                            "submit the job without one"]


@pytest.mark.parametrize(("damage", "line"), [
    ("missing", "cannot load {conf}/rsa_text.lua ("),
    ("old grammar", "{conf}/rsa_grammar.lua has no QUOTE_MAX: install job_submit.lua, "
                    "rsa_job_submit.lua, rsa_grammar.lua, rsa_text.lua and "
                    "rsa_directives.lua of one rsa-scheduler version together"),
    ("broken", "{conf}/rsa_directives.lua failed to load: "),  # then Lua's "...:1: boom"
])
def test_a_missing_or_mismatched_file_fails_the_load_in_one_line(
        lua: str, tmp_path: Path, damage: str, line: str) -> None:
    """slurmctld logs the load error of job_submit.lua and keeps the previous script (or,
    at start-up, refuses to start): the error is one line naming the file and the fix."""
    conf = _installed(tmp_path)
    if damage == "missing":
        (conf / "rsa_text.lua").unlink()
    elif damage == "old grammar":
        grammar = conf / "rsa_grammar.lua"
        grammar.write_text(grammar.read_text().replace("  QUOTE_MAX = 200,\n", ""))
    else:
        (conf / "rsa_directives.lua").write_text('error("boom")\n')
    done = subprocess.run([lua, str(DRIVER), str(conf / "job_submit.lua"), "submit",
                           str(tmp_path / "none.sh")], capture_output=True, text=True,
                          timeout=30, check=False, env=VECTOR_ENV, cwd=tmp_path)
    assert done.returncode != 0
    message = done.stderr.splitlines()[0].split(": ", 1)[1]  # after "lua5.x: "
    assert message.startswith("rsa job_submit.lua: " + line.format(conf=conf)), message
    assert message.endswith('(docs/job_submit.md, "Deploying on a cluster")'), message
    assert damage != "broken" or 'rsa_directives.lua:1: boom (' in message


# --- --rsa-* options (SPANK plugin) merged with the script: directives.check_submission ----


def _submission(script: bytes | None, options: dict[str, bytes]) -> tuple[int, dict[str, str],
                                                                            list[str]]:
    """What job_submit.lua must answer, from the Python reference."""
    text = None if script is None else decode_script(script)
    opts = {k: v.decode("utf-8", "surrogateescape") for k, v in options.items()}
    try:
        spec = check_submission(text, opts)
    except SubmissionErrors as e:
        return -1, {}, e.lines
    return 0, ({} if spec.is_empty else {"admin_comment": spec.to_admin_comment()}), []


def _write_job(path: Path, script: bytes | None, env: list[bytes]) -> Path:
    if script is not None:
        path.write_bytes(script)
    if env:
        Path(f"{path}.spank").write_bytes(b"\0".join(env))
    return path


def _first_wins(env: list[bytes]) -> dict[str, bytes]:
    known = {f"RSA_{n}".encode() for n in GOOD}
    out: dict[str, bytes] = {}
    for entry in env:
        key, sep, value = entry.partition(b"=")
        if sep and key in known and key[4:].decode() not in out:
            out[key[4:].decode()] = value
    return out


def test_options_merge_cases(lua: str, tmp_path: Path) -> None:
    cases: list[tuple[bytes | None, list[bytes], int, list[str] | str]] = [
        # salloc/srun: no script, options only
        (None, [b"RSA_DATA_IN=/pfs/in", b"RSA_NODES=2"], 0, "rsa1:i=/pfs/in;n=2"),
        # same value as the script after normalisation: fine
        (b"#!/bin/sh\n#RSA_DATA_IN=/pfs//in/\ntrue\n", [b"RSA_DATA_IN=/pfs/in"], 0,
         "rsa1:i=/pfs/in"),
        # options add to the script's directives
        (b"#!/bin/sh\n#RSA_DATA_IN=/pfs/in\n", [b"RSA_TIER=SSD"], 0, "rsa1:i=/pfs/in;t=ssd"),
        (b"#!/bin/sh\n#RSA_DATA_IN=/pfs/a\ntrue\n", [b"RSA_DATA_IN=/pfs/b"], -1,
         ["2: #RSA_DATA_IN='/pfs/a' conflicts with --rsa-data-in='/pfs/b'; keep one"]),
        (None, [b"RSA_TIER=nvme", b"RSA_NODES=x"], -1,
         ["--rsa-nodes: RSA_NODES must be a whole number of RSA nodes, at least 1, got 'x'",
          "--rsa-tier: RSA_TIER must be one of ram, ssd, auto, got 'nvme'"]),
        (b"#!/bin/sh\n#RSA_STAGE_OUT=tar\n", [b"RSA_POSTPROCESS=/bin/pack"], -1,
         ["2: RSA_STAGE_OUT and RSA_POSTPROCESS both choose how output is staged out "
          "(line 2 and --rsa-postprocess); keep one"]),
        (None, [b"RSA_STAGE_OUT=tar", b"RSA_POSTPROCESS=/bin/pack"], -1,
         ["--rsa-postprocess: RSA_STAGE_OUT and RSA_POSTPROCESS both choose how output is "
          "staged out (--rsa-stage-out and --rsa-postprocess); keep one"]),
        # not ours, or a second entry for one name: ignored; index 0 is read
        (None, [b"RSA_NODES=3", b"RSA_NODES=4", b"RSA_FOO=1", b"OTHER=x",
                b"_SLURM_SPANK_OPTION_rsa_rsa_nodes=3"], 0, "rsa1:n=3"),
        (None, [b"OTHER=x"], 0, ""),
        # a bad script line and a bad option are both reported, options first
        (b"#!/bin/sh\n#RSA_NODES=two\n", [b"RSA_DATA_IN=rel"], -1,
         ["--rsa-data-in: RSA_DATA_IN must be an absolute path, got 'rel'",
          "2: RSA_NODES must be a whole number of RSA nodes, at least 1, got 'two'"]),
    ]
    paths = [_write_job(tmp_path / f"job{i}.sh", script, env)
             for i, (script, env, _rc, _want) in enumerate(cases)]
    results = run_many(lua, paths)
    for path, (script, env, rc, want) in zip(paths, cases, strict=True):
        got = results[str(path)]
        assert (got.rc, got.sets, got.msgs) == _submission(script, _first_wins(env))
        assert got.rc == rc
        if rc == 0:
            assert got.sets == ({"admin_comment": want} if want else {})
        else:
            assert got.msgs == want


def test_differential_options(lua: str, tmp_path: Path) -> None:
    """Random scripts with random --rsa-* options: Lua answers exactly as Python."""
    rng = random.Random(20261122)
    names = sorted(GOOD)
    jobs: list[tuple[Path, bytes | None, list[bytes]]] = []
    for i in range(1500):
        if rng.random() < 0.2:
            script: bytes | None = None
        elif i % 3 == 0:
            script = _random_script(rng)
        else:
            script = _valid_script(rng)
        env = []
        for name in rng.sample(names, rng.randint(0, 4)):
            pool = GOOD[name] if rng.random() < 0.6 else PIECES_VALUE
            value = " ".join(rng.choice(pool) for _ in range(rng.choice((1, 1, 1, 2))))
            data = value.encode("utf-8", "surrogateescape").replace(b"\xc3\xbf", b"\xff")
            env.append(f"RSA_{name}=".encode() + data.replace(b"\0", b""))
        if rng.random() < 0.1 and script:  # an option copying a line of the script
            m = re.search(rb"^#RSA_([A-Z_]+)[ =]+(.*)$", script, re.M)
            if m and m.group(1).decode() in GOOD:
                env.insert(0, b"RSA_" + m.group(1) + b"=" + m.group(2))
        jobs.append((_write_job(tmp_path / f"o{i}.sh", script, env), script, env))
    results = run_many(lua, [p for p, _s, _e in jobs])
    failures = []
    for path, script, env in jobs:
        want = _submission(script, _first_wins(env))
        got = results[str(path)]
        if (got.rc, got.sets, got.msgs) != want:
            failures.append(f"{script!r} {env!r}\n  python {want}\n  lua    {got}")
    assert not failures, f"{len(failures)} differ, first:\n" + "\n".join(failures[:5])


# --- invalid bytes stay invalid after shlex (Python decodes before splitting) -------------

SPLIT_BYTES = [
    ("DATA_IN", b"/a\xd4\\\xb2"),              # a backslash between two invalid bytes
    ("DATA_IN", b'"/a\xd4\\\xb2"'),            # the same inside double quotes
    ("DATA_OUT", b'/o\xc3"\xa9"'),             # a quote between them
    ("DATA_OUT", b"'/o\xc3'\xa9"),             # split across single quotes
    ("DATA_IN", b"/a\xe2''\x82\"\"\xac"),      # three bytes of a euro sign, apart
    ("PREPROCESS", b"/bin/x a\xc3''\xa9"),     # in an argument
    ("PREPROCESS", b"/bin/\xc3\\\xa9 a"),      # in the program
    ("POSTPROCESS", b"'\xc3'\xa9x /p"),        # a program that is not absolute
    ("TIER", b'r\xc3"\xa9"am'),                # only in a message
    ("EARLY_START", b"fallbac\xe2\\\x84\\\xaa"),  # KELVIN SIGN apart: not 'fallback'
    ("RESET", b"\xe2\\\x84\\\xaa"),            # the same, alone
    ("NODES", b"'\xed'\xb2\x80"),              # the bytes of a surrogate escape, apart
    ("NODES", b"\xed\xb2\x80 2"),              # ... together: three invalid bytes
    ("CAPACITY", b'5\xc3"\xa9"G'),             # inside a size
    ("STAGE_OUT", b"\\\xf0\\\x9f\\\x98\\\x80"),  # four bytes, each after a backslash
    ("INPUT", b"r\xc3'\xa9' \xc3\\\xa9"),      # two words, both in the message
]


def _write_script(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"#!/bin/sh\n" + b"\n".join(lines) + b"\nsrun true\n")
    return path


@pytest.mark.parametrize(("name", "value"), SPLIT_BYTES)
def test_invalid_bytes_stay_invalid_after_splitting(lua: str, tmp_path: Path, name: str,
                                                    value: bytes) -> None:
    """Removing quotes and backslashes must not join invalid bytes into a character: the
    script line is refused, with Python's message (b'/a\\xd4\\\\\\xb2' is not '/a\\u0532')."""
    script = _write_script(tmp_path / "s.sh", [f"#RSA_{name}=".encode() + value])
    option = _write_job(tmp_path / "o.sh", None, [f"RSA_{name}=".encode() + value])
    results = run_many(lua, [script, option])
    want = _python(script.read_bytes())
    assert want[0] == -1
    assert (results[str(script)].rc, results[str(script)].sets,
            results[str(script)].msgs) == want
    got = results[str(option)]
    assert (got.rc, got.sets, got.msgs) == _submission(None, {name: value})


def test_invalid_bytes_example_message(lua: str, tmp_path: Path) -> None:
    script = _write_script(tmp_path / "s.sh", [b"#RSA_DATA_IN=/a\xd4\\\xb2"])
    got = run_many(lua, [script])[str(script)]
    assert (got.rc, got.sets, got.msgs) == (-1, {}, [
        "2: RSA_DATA_IN must be valid UTF-8, found byte 0xd4 in '/a\\xd4\\xb2'"])


def test_escape_bytes_in_the_script_are_three_bytes(lua: str, tmp_path: Path) -> None:
    """The bytes decode() writes for an invalid byte (ED B2 xx), found in a script or an
    option, are three invalid bytes like any others: in a name, a value, an option."""
    cases: list[tuple[bytes | None, list[bytes]]] = [
        (b"#!/bin/sh\n#RSA_DATA_IN\xed\xb2\x80=/x\n", []),
        (b"#!/bin/sh\n#RSA_N\xed\xb3\xbfODES=2\n", []),
        (b"#!/bin/sh\n#RSA_TIER=r\xed\xb2\xa1m\n", []),
        (b"#!/bin/sh\n#RSA_DATA_IN=/a/\xed\xb2\x80\n", [b"RSA_DATA_IN=/b\xed\xb2\xb2"]),
        (None, [b"RSA_PREPROCESS=/bin/x '\xed'\\\xb2\x80"]),
    ]
    paths = [_write_job(tmp_path / f"e{i}.sh", script, env)
             for i, (script, env) in enumerate(cases)]
    results = run_many(lua, paths)
    for path, (script, env) in zip(paths, cases, strict=True):
        got = results[str(path)]
        want = _submission(script, _first_wins(env))
        assert want[0] == -1
        assert (got.rc, got.sets, got.msgs) == want


# quotes, backslashes and pieces of UTF-8 sequences that the splitting can bring together
ADVERSARIAL = [b"'", b'"', b"\\", b" ", b"/", b"a", b"\xc3", b"\xa9", b"\xe2", b"\x84",
               b"\xaa", b"\xed", b"\xb2", b"\xb3", b"\x80", b"\xbf", b"\xff", b"\xf0", b"\x9f",
               b"\xc2\x85", b"\xd4", b"1", b"k", b"G", b"s", b"r", b"."]


# characters whose bytes, kept apart by quotes or backslashes, must not come together
APART = ["\u00e9", "\u0532", "\u20ac", "\u212a", "\u0130", "\ufb06", "\U0001f600", "\u0085",
         "\udcb2"]  # the last: the three bytes of a surrogate escape
SEPARATORS = [b"\\", b"''", b'""', b"'", b'"', b"", b"\\'", b'"\\']


def _apart(rng: random.Random) -> bytes:
    """The bytes of one character with quotes and backslashes between them."""
    data = rng.choice(APART).encode("utf-8", "surrogatepass")
    out = data[:1]
    for b in data[1:]:
        out += rng.choice(SEPARATORS) + bytes([b])
    return out


def _adversarial_value(rng: random.Random, name: str) -> bytes:
    """A random value of quotes, backslashes and UTF-8 fragments, often in a good one."""
    noise = b"".join(_apart(rng) if rng.random() < 0.3 else rng.choice(ADVERSARIAL)
                     for _ in range(rng.randrange(1, 8)))
    if rng.random() < 0.5:
        return noise
    good = rng.choice(GOOD[name]).encode()
    cut = rng.randrange(len(good) + 1)
    return good[:cut] + noise + good[cut:]


def test_differential_invalid_bytes(lua: str, tmp_path: Path) -> None:
    """Values full of invalid bytes, quotes and backslashes, in the script and as --rsa-*
    options: Lua answers exactly as Python."""
    rng = random.Random(20261123)
    names = sorted(GOOD)
    jobs: list[tuple[Path, bytes | None, list[bytes]]] = []
    for i in range(800):
        lines = [f"#RSA_{name}{rng.choice(['=', ' '])}".encode()
                 + _adversarial_value(rng, name).replace(b"\n", b"")
                 for name in rng.sample(names, rng.randint(0, 3))]
        env = [f"RSA_{name}=".encode() + _adversarial_value(rng, name)
               for name in rng.sample(names, rng.choice((0, 0, 1, 2)))]
        script = b"#!/bin/sh\n" + b"\n".join(lines) + b"\ntrue\n" if lines or not env else None
        jobs.append((_write_job(tmp_path / f"b{i}.sh", script, env), script, env))
    results = run_many(lua, [p for p, _s, _e in jobs])
    failures = []
    for path, script, env in jobs:
        want = _submission(script, _first_wins(env))
        got = results[str(path)]
        if (got.rc, got.sets, got.msgs) != want:
            failures.append(f"{script!r} {env!r}\n  python {want}\n  lua    {got}")
    assert not failures, f"{len(failures)} differ, first:\n" + "\n".join(failures[:5])


def test_option_value_cap_and_quote_cut(lua: str, tmp_path: Path) -> None:
    """An --rsa-* value over the cap is refused by size, undecoded and unsplit; a long
    value is quoted cut, as Python does (issue 12)."""
    cases: list[tuple[bytes | None, dict[str, bytes]]] = [
        (None, {"DATA_IN": b"/" + b"\xff" * MAX_LINE}),
        (None, {"PREPROCESS": b"/x " + b'"' * (MAX_LINE - 2)}),
        (b"#!/bin/sh\n#RSA_TIER=" + "\u00e9".encode() * 400 + b"\n", {}),
        (b"#!/bin/sh\n#RSA_DATA_IN=/a\n", {"DATA_IN": b"/" + b"b" * 300}),
    ]
    jobs = []
    for k, (script, options) in enumerate(cases):
        env = [f"RSA_{n}=".encode() + v for n, v in options.items()]
        jobs.append(_write_job(tmp_path / f"job{k}", script, env))
    got = run_many(lua, jobs)
    for job, (script, options) in zip(jobs, cases, strict=True):
        rc, _sets, msgs = _submission(script, options)
        assert (got[str(job)].rc, got[str(job)].msgs) == (rc, msgs)
        assert rc != 0
    assert got[str(jobs[0])].msgs == [
        f"--rsa-data-in: RSA_DATA_IN is {MAX_LINE + 1} bytes long, more than the "
        f"{MAX_LINE} allowed; shorten it"]


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(SPLIT_TEXT, min_size=40, max_size=40))
def test_splitting_agrees_with_python(lua: str, tmp_path: Path, values: list[str]) -> None:
    """Generated quoting and escaping, as an --rsa-preprocess value (its words show in the
    admin_comment) and as a script line: the Lua splitter gives Python's words and errors."""
    jobs, expected = [], []
    for k, text in enumerate(values):
        raw = text.encode("utf-8", "surrogateescape")
        if "\n" not in text and "\r" not in text:
            script = b"#!/bin/sh\n#RSA_PREPROCESS=" + raw + b"\n#RSA_DATA_IN=/in\n"
            jobs.append(_write_job(tmp_path / f"s{k}.sh", script, []))
            expected.append(_submission(script, {}))
        jobs.append(_write_job(tmp_path / f"o{k}.sh", None, [b"RSA_PREPROCESS=" + raw]))
        expected.append(_submission(None, {"PREPROCESS": raw}))
    got = run_many(lua, jobs)
    for job, (rc, sets, msgs) in zip(jobs, expected, strict=True):
        assert (got[str(job)].rc, got[str(job)].sets, got[str(job)].msgs) == (rc, sets, msgs)


def test_directives_beyond_the_scanned_bytes(lua: str, tmp_path: Path) -> None:
    """The 4 MiB scan limit counts bytes, as Python does (issue 12)."""
    jobs, expected = [], []
    for k, (start, pad) in enumerate([(MAX_SCRIPT - 1, "#"), (MAX_SCRIPT, "#"),
                                      (MAX_SCRIPT - 1, "# \u00e9\u00e9"),
                                      (MAX_SCRIPT, "# \u00e9\u00e9")]):
        script = far_script(start, pad).encode()
        jobs.append(_write_job(tmp_path / f"far{k}.sh", script, []))
        expected.append(_submission(script, {}))
    got = run_many(lua, jobs)
    for job, (rc, sets, msgs) in zip(jobs, expected, strict=True):
        assert (got[str(job)].rc, got[str(job)].sets, got[str(job)].msgs) == (rc, sets, msgs)
    assert [rc for rc, _s, _m in expected] == [0, -1, 0, -1]


# --- early start wait: the start hold ----------------------------------------------------

NOW = 1_790_000_000


def run_hold(lua: str, comment: str, begin: object = 0, **config: object) -> tuple[str, Result]:
    env = {**os.environ, "RSA_LUA_NOW": str(NOW),
           "RSA_LUA_CONFIG": ",".join(f"{k}={v}" for k, v in config.items())}
    done = subprocess.run([lua, str(DRIVER), str(PLUGIN), "hold", comment, str(begin)],
                          capture_output=True, text=True, timeout=30, check=False, env=env)
    assert done.returncode == 0, done.stderr
    first, *rest = done.stdout.rstrip("\n").split("\n")
    return first.removeprefix("COMMENT "), _parse(rest)


@pytest.mark.parametrize(("comment", "begin", "config", "held"), [
    ("rsa1:i=/home/a/in", 0, {}, True),  # the default policy is wait
    ("rsa1:o=/home/a/out", 0, {}, True),  # output only: its RAMDISK is built first
    ("rsa1:i=/home/a/in;es=wait", 0, {"early_start": "fallback"}, True),  # the job's own
    ("rsa1:i=/home/a/in;es=fallback", 0, {}, False),
    ("rsa1:i=/home/a/in;es=union", 0, {}, False),
    ("rsa1:i=/home/a/in", 0, {"early_start": "fallback"}, False),
    ("rsa1:n=2", 0, {}, False),  # no work for the RSA
    ("rsa1:i=/home/a/in", NOW + 3600, {}, False),  # the user's own --begin stays
    ("rsa1:i=/home/a/in", NOW, {}, True),  # --begin=now is no begin time
    ("rsa1:i=/home/a/in", NO_VAL, {}, True),
    ("rsa1:i=/home/a/in", "nil", {}, True),
    ("rsa1:i=/home/a/es%3Dwait;es=fallback", 0, {}, False),  # only the field counts
])
def test_wait_jobs_are_held_at_submission_until_the_deadline(
        lua: str, comment: str, begin: object, config: dict[str, object], held: bool) -> None:
    """Issue 14: an RSA job under early start wait is held from submission (begin time =
    now + wait_timeout) and its admin_comment says until when; rsad releases it when its
    RAMDISK is ready, Slurm at the deadline."""
    got, res = run_hold(lua, comment, begin, wait_timeout=600, **config)
    if held:
        assert got == f"{comment} hold={NOW + 600}"
        assert res.sets == {"begin_time": str(NOW + 600)}
        spec, deadline = split_hold(got)
        assert spec == comment and deadline == NOW + 600
    else:
        assert got == comment and res.sets == {}


def test_the_default_policy_agrees_with_rsad() -> None:
    """The plugin's early_start and wait_timeout defaults are rsad's (staging.*)."""
    from rsa_scheduler.config import load_config_text

    cfg = load_config_text("pool:\n  nodes:\n    - names: rsa1\n      capacity: 2G\n")
    for text in (PLUGIN.read_text(), MODULE.read_text()):  # CONFIG and the defaults
        assert f'early_start = "{cfg.staging.early_start.value}",' in text
        assert f"wait_timeout = {int(cfg.staging.wait_timeout)}," in text


# --- dependents: held at submission until rsad looked at their parents (issue 32) --------

HELD = f";held={NOW + 600}"  # the hold's own begin time, in the marker

@pytest.mark.parametrize(("script", "dependency", "begin", "want"), [
    # a job without RSA work: the marker alone, with the parents the dependency names
    # (";named=": Slurm stops printing one once it counts it fulfilled); rsad releases it
    # at its next cycle when no parent has output on a RAMDISK
    ("#!/bin/sh\necho hi\n", "afterok:12", None, f" hold=after:{HELD};named=12"),
    ("#!/bin/sh\necho hi\n", "afterany:12?afternotok:13", None,
     f" hold=after:{HELD};named=12,13"),
    ("#!/bin/sh\necho hi\n", "aftercorr:12", None, f" hold=after:{HELD};named=12"),
    ("#!/bin/sh\necho hi\n", "afterok:12_3:14_*:15+5,after:16", None,
     f" hold=after:{HELD};named=12_3,14,15"),
    ("#!/bin/sh\necho hi\n", "singleton", None, f" hold=after:{HELD}"),  # none named
    ("#!/bin/sh\necho hi\n", "afterok:12,singleton", None, f" hold=after:{HELD}"),
    ("#!/bin/sh\necho hi\n", "afterok:" + ":".join(str(n) for n in range(1, 66)), None,
     f" hold=after:{HELD}"),  # too many to name: its user's in-flight jobs instead
    ("#!/bin/sh\necho hi\n", "after:12+5", None, None),  # the parent's start only
    ("#!/bin/sh\necho hi\n", None, None, None),
    # its own --begin: held too, its time kept in the marker (on main it was not held:
    # rsad's later hold then lost the time)
    ("#!/bin/sh\necho hi\n", "afterok:12", NOW + 60,
     f" hold=after:;begin={NOW + 60}{HELD};named=12"),
    ("#!/bin/sh\necho hi\n", "afterok:12", NOW - 60, f" hold=after:{HELD};named=12"),
    ("-", "afterok:12", None, f" hold=after:{HELD};named=12"),  # salloc/srun: no script
    # an RSA job under wait: the dependency's marker in place of the start hold's (rsad
    # puts the start hold back when it releases it)
    ("#!/bin/sh\n#RSA_DATA_IN=/gpfs/in\n", "afterok:12", None,
     f"rsa1:i=/gpfs/in hold=after:{HELD};named=12"),
    ("#!/bin/sh\n#RSA_DATA_IN=/gpfs/in\n", "afterok:12", NOW + 60,
     f"rsa1:i=/gpfs/in hold=after:;begin={NOW + 60}{HELD};named=12"),
])
def test_a_job_with_a_data_dependency_is_held_at_submission(
        lua: str, tmp_path: Path, script: str, dependency: str | None, begin: int | None,
        want: str | None) -> None:
    """On main nothing held it at submission: a dependent submitted less than one rsad
    cycle before its parent ended could start on the parent's half-staged output."""
    path = tmp_path / "job.sh"
    if script != "-":
        path.write_text(script)
    env = {**os.environ, "RSA_LUA_NOW": str(NOW), "RSA_LUA_CONFIG": "dependency_hold=600"}
    if dependency is not None:
        env["RSA_LUA_DEPENDENCY"] = dependency
    if begin is not None:
        env["RSA_LUA_BEGIN"] = str(begin)
    done = subprocess.run([lua, str(DRIVER), str(PLUGIN), "submit", str(path), "1001"],
                          capture_output=True, text=True, timeout=30, check=False, env=env)
    assert done.returncode == 0, done.stderr
    got = _parse(done.stdout.rstrip("\n").split("\n"))
    assert got.rc == 0, got
    if want is None:
        assert "begin_time" not in got.sets or got.sets["begin_time"] != str(NOW + 600), got
        assert " hold=after:" not in got.sets.get("admin_comment", ""), got
    else:
        assert got.sets["admin_comment"] == want and got.sets["begin_time"] == str(NOW + 600)
        assert split_hold(want) == (want.partition(" hold=after:")[0], None)
        mark = read_dep_mark(want)  # what rsad reads of it
        assert mark is not None and mark.held == NOW + 600 and mark.parents == []
        assert mark.begin == (begin if begin is not None and begin > NOW else None)
        named = want.partition(";named=")[2]
        assert mark.named == (named.split(",") if named else None)


def test_the_dependency_hold_of_the_plugin_agrees_with_rsad() -> None:
    """The plugin's default hold is rsad's own (daemon/dephold.py DEP_HOLD), its types
    rsad's (core/dependency.py DATA_KINDS)."""
    from rsa_scheduler.core.dependency import DATA_KINDS
    from rsa_scheduler.daemon.dephold import DEP_HOLD

    assert f"dependency_hold = {DEP_HOLD // 86400} * 86400," in PLUGIN.read_text()
    text = MODULE.read_text()
    assert f"dependency_hold = {DEP_HOLD // 86400} * 86400," in text
    table = re.search(r"DATA_DEPENDENCY = \{(.*?)\}", text, re.S)
    assert table is not None
    assert set(re.findall(r"(\w+) = true", table.group(1))) == DATA_KINDS


# --- dependents: a dependency added later (slurm_job_modify) -----------------------------

LATER = 2**32  # core/dependency.py LATER_BASE
PENDING, RUNNING = 0, 1  # Slurm's job_state (& JOB_STATE_BASE)
REQUEUED_FLAG = 0x400  # JOB_REQUEUE: a flag above the base state


@pytest.mark.parametrize(("uid", "fields", "want"), [
    # scontrol update JobId=42 Dependency=afterok:12, by its owner: held by the begin time
    # alone (on main the job was not held: Slurm could start it on 12's half-staged output)
    (USER, {"desc__dependency": "afterok:12"}, LATER),
    (USER, {"desc__dependency": "afterany:12?afternotok:13"}, LATER),
    (USER, {"desc__dependency": "singleton"}, LATER),
    (USER, {"desc__dependency": "afterok:12", "job__job_state": PENDING + REQUEUED_FLAG}, LATER),
    (0, {"desc__dependency": "aftercorr:12"}, LATER),  # root (an admin) too
    # its own StartTime in the same update: kept in the hold's begin time
    (USER, {"desc__dependency": "afterok:12", "desc__begin_time": NOW + 60}, LATER + NOW + 60),
    # StartTime=now (or passed): start as soon as it may, not at the begin time it had
    (USER, {"desc__dependency": "afterok:12", "desc__begin_time": NOW - 60}, LATER + 1),
    (USER, {"desc__dependency": "afterok:12", "desc__begin_time": 0}, LATER),  # none asked
    # a locked-in job: the dependency is the user's (rsad's lock-in ends at the demotion)
    (USER, {"desc__dependency": "afterok:12", "job__qos": "rsa-lockin"}, LATER),
    # not held: the parent's start only, the dependency removed, no dependency in the
    # update, a job that is not pending (Slurm refuses the dependency), the hold off
    (USER, {"desc__dependency": "after:12+5"}, None),
    (USER, {"desc__dependency": ""}, None),
    (USER, {"desc__time_limit": 30}, None),
    (USER, {"desc__begin_time": NOW + 60}, None),
    (USER, {"desc__comment": "afterok:12"}, None),
    (USER, {"desc__dependency": "afterok:12", "job__job_state": RUNNING}, None),
    (USER, {"desc__dependency": "afterok:12", "job__job_state": "nil"}, None),
    (USER, {"desc__dependency": "afterok:12", "config__dependency_hold": "nil"}, None),
])
def test_a_dependency_added_later_holds_the_pending_job(
        lua: str, uid: int, fields: dict[str, object], want: int | None) -> None:
    env = {**os.environ, "RSA_LUA_NOW": str(NOW)}
    got = run_modify_in(env, lua, uid, {"job__job_state": PENDING, **fields})
    assert got.rc == 0 and got.msgs == [], got
    if want is None:
        assert "begin_time" not in got.sets, got
        return
    assert got.sets == {"begin_time": str(want)}, got  # nothing else: admin_comment is refused
    assert "job 42" in got.logs[0] and "held until rsad has looked" in got.logs[0], got
    assert later_hold(want) and later_begin(want) == (want - LATER or None)
    assert own_begin(None, want, now=NOW) == (want - LATER if want - LATER > NOW else None)


def test_a_locked_in_job_is_still_refused_with_a_dependency_in_the_update(lua: str) -> None:
    got = run_modify(lua, USER, job__qos="rsa-lockin", job__job_state=PENDING,
                     desc__qos="normal", desc__dependency="afterok:12")
    assert got.rc == ACCESS_DENIED and got.sets == {}, got


def test_the_later_hold_of_the_plugin_agrees_with_rsad() -> None:
    assert LATER_BASE == LATER
    assert f"local LATER_BASE = {LATER_BASE}\n" in MODULE.read_text()
