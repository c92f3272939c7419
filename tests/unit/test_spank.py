"""slurm_plugins/spank (the SPANK plugin) outside a running cluster.

* It builds with -Wall -Wextra -Werror against libslurm-dev's spank.h (its Makefile).
* Its value grammar (rsa_grammar.c, driven by rsa-spank-check) gives exactly the Python
  grammar's answers: every directive line of the shared vectors given as an option, and
  thousands of generated values against ``directives.parse_option``.
* Real ``sbatch`` (Slurm 22.05, no controller: a temporary slurm.conf whose SlurmctldHost
  is a closed port on 127.0.0.1 and whose PlugStackConfig names a temporary plugstack.conf)
  lists the options in ``--help``, refuses a bad value before contacting anything, and
  loads the plugin as ``optional`` and as ``required``.
* The job.env reader (rsa_jobenv.c) exports what jobstate.py writes, and refuses files
  and directories others could have written.

Without gcc, spank.h or sbatch the tests skip, except under CI=true, where that fails.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rsa_scheduler.core.directives import (
    C_SPACE,
    DIRECTIVES,
    MAX_LINE,
    PREFIX,
    DirectiveSpec,
    SubmissionErrors,
    check_submission,
    decode_script,
    option_of,
    parse_option,
)
from rsa_scheduler.node import jobstate
from tests.conftest import DATA
from tests.directive_inputs import SPLIT_TEXT
from tests.unit.test_job_submit_lua import GOOD, PIECES_VALUE

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "slurm_plugins" / "spank"
SPANK_H = Path("/usr/include/slurm/spank.h")
VECTORS = DATA / "directives"
JSON_KEY = {"input_writable": "input"}


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin and its test driver, built by the plugin's own Makefile (-Werror)."""
    if not shutil.which("gcc") or not shutil.which("make"):
        _missing("no gcc/make: apt-get install gcc make")
    if not SPANK_H.exists():
        _missing(f"no {SPANK_H}: apt-get install libslurm-dev")
    out = tmp_path_factory.mktemp("spank-build")
    done = subprocess.run(["make", "-s", "-C", str(SRC), f"BUILD={out}"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_builds_without_warnings(build: Path) -> None:
    assert (build / "rsa_spank.so").exists() and (build / "rsa-spank-check").exists()
    makefile = (SRC / "Makefile").read_text()
    assert re.search(r"^WARNINGS\s*:=.*-Wall.*-Wextra.*-Werror", makefile, re.M)
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(build / "rsa_spank.so")],
                             capture_output=True, text=True, check=True).stdout
    for sym in ("slurm_spank_init", "slurm_spank_init_post_opt",
                "slurm_spank_task_init_privileged", "slurm_spank_exit", "plugin_name",
                "plugin_type", "plugin_version", "spank_plugin_version"):
        assert re.search(rf"\b{sym}$", symbols, re.M), sym
    assert not re.search(r"\bspank_options$", symbols, re.M)  # registered, not a table
    # it runs as root in every job step: stack protector and fortified libc calls
    imports = subprocess.run(["nm", "-D", "--undefined-only", str(build / "rsa_spank.so")],
                             capture_output=True, text=True, check=True).stdout
    assert re.search(r"\b__stack_chk_fail\b", imports), "no -fstack-protector-strong"
    assert re.search(r"\b__\w+_chk\b", imports.replace("__stack_chk_fail", "")), \
        "no -D_FORTIFY_SOURCE"


# --- the value grammar ------------------------------------------------------------------


def check_values(build: Path, pairs: list[tuple[str, bytes]]) -> list[tuple[str, object]]:
    """(OK, canonical JSON value) or (ERR, message) for each (NAME, value bytes)."""
    data = b"".join(n.encode() + b"\0" + v + b"\0" for n, v in pairs)
    done = subprocess.run([str(build / "rsa-spank-check"), "values"], input=data,
                          capture_output=True, timeout=120, check=True)
    lines = done.stdout.decode("utf-8").rstrip("\n").split("\n")
    assert len(lines) == len(pairs)
    out: list[tuple[str, object]] = []
    for line in lines:
        kind, _, rest = line.partition(" ")
        out.append((kind, json.loads(rest) if kind == "OK" else rest))
    return out


def python_value(name: str, value: bytes) -> tuple[str, object]:
    try:
        typed = parse_option(name, decode_script(value))
    except SubmissionErrors as e:
        return "ERR", e.errors[0].message
    field = DIRECTIVES[name].field
    return "OK", DirectiveSpec(**{field: typed}).to_json()[JSON_KEY.get(field, field)]


def directive_lines(data: bytes) -> Iterator[tuple[int, str, bytes]]:
    """(line, NAME, value text) of each known directive's first line in a script header."""
    seen = set()
    for no, line in enumerate(data.split(b"\n"), start=1):
        if not line.startswith(PREFIX.encode()):
            if line.strip(C_SPACE.encode()) and not line.lstrip(C_SPACE.encode()
                                                                ).startswith(b"#"):
                return
            continue
        rest = line[len(PREFIX):]
        m = re.match(rb"([^ \t\n\v\f\r=]*)", rest)
        assert m is not None
        name = m.group(1).decode("utf-8", "surrogateescape")
        if name not in DIRECTIVES or name in seen:
            continue
        seen.add(name)
        value = rest[m.end():].lstrip(C_SPACE.encode())
        yield no, name, value[1:] if value.startswith(b"=") else value


def vector_values() -> Iterator[tuple[str, str, bytes, tuple[str, object] | str]]:
    """(vector, NAME, value text, expected) for every directive line of the shared vectors
    whose outcome depends on its value alone; expected is ("OK", value), ("ERR", message)
    or just "OK" (a good line in a script that has errors elsewhere)."""
    for sh in sorted(VECTORS.glob("*.sh")):
        data = sh.read_bytes()
        if data.startswith(b"\xef\xbb\xbf") or b"\r\n" in data or b"\0" in data:
            continue  # script-level errors: not about a value
        err = sh.with_suffix(".err")
        errors: dict[int, str] = {}
        if err.exists():
            for msg in err.read_text(encoding="utf-8").splitlines():
                num, _, text = msg.partition(": ")
                errors[int(num)] = text
        js = {} if err.exists() else json.loads(sh.with_suffix(".json").read_text("utf-8"))
        for no, name, value in directive_lines(data):
            field = DIRECTIVES[name].field
            if no in errors:
                if not any(script_level in errors[no] for script_level in (
                        "both choose how output is staged out",  # about two lines
                        "directive line is",  # about the line, not the value
                        "checking stopped at this line")):
                    yield sh.stem, name, value, ("ERR", errors[no])
            elif js:
                yield sh.stem, name, value, ("OK", js[JSON_KEY.get(field, field)])
            else:
                yield sh.stem, name, value, "OK"


def test_shared_vectors(build: Path) -> None:
    """Each directive line of the shared vectors, given as an option instead."""
    cases = list(vector_values())
    got = check_values(build, [(n, v) for _s, n, v, _w in cases])
    failures = [f"{stem} {name}={value!r}: want {want}, got {g}"
                for (stem, name, value, want), g in zip(cases, got, strict=True)
                if g != want and not (want == "OK" and g[0] == "OK")]
    assert not failures, "\n".join(failures)
    assert sum(1 for *_x, w in cases if w != "OK" and w[0] == "ERR") >= 35
    assert sum(1 for *_x, w in cases if w != "OK" and w[0] == "OK") >= 80
    assert {n for _s, n, _v, _w in cases} == set(DIRECTIVES)


def _raw(text: str) -> bytes:
    # as in test_job_submit_lua: U+00FF / U+00FE stand for the raw bytes 0xff / 0xfe
    data = text.encode("utf-8", "surrogateescape")
    return data.replace(b"\xc3\xbf", b"\xff").replace(b"\xc3\xbe", b"\xfe").replace(b"\0", b"")


def test_differential_against_python(build: Path) -> None:
    rng = random.Random(20261122)
    pool = PIECES_VALUE + [v for values in GOOD.values() for v in values] + [
        "", " ", "=x", "'a b' c", '"/a\\"b"', "\\\\", "a\\ b", "\t/x\t", "\u212a", "\u0130",
        "in\u0130", "Input-Done", "INPUT-DONE", "1e3", "0.5", "12345678901234567890123G",
        "9007199254740992", "8191.999P", "8192P", "1.0000000000000000001K", "365d",
        "31536001s", "525600", "525601", "8760:00:00", "0-0:0:1", "00:00:00", "fall back",
        "fallbacK", "\u017fsd", "tars", "rsnyc", "RW ", "r w", "/a/\u00e9/\u00ff",
        "/a\u00c2\u0085", "/x/" + "y" * 255, "/x/" + "y" * 256, "/" + "z/" * 2047,
        "/bin/p '' \"\"", "/p \u00ff", "rel/prog -x", "\u00ffprog", "~/bin/x", "$HOME/x",
    ]
    pairs: list[tuple[str, bytes]] = []
    for name in DIRECTIVES:
        pairs += [(name, _raw(v)) for v in pool]
        for _ in range(400):
            words = [rng.choice(pool) for _ in range(rng.choice((1, 1, 2, 3)))]
            pairs.append((name, _raw(rng.choice((" ", "  ", "\t")).join(words))))
    got = check_values(build, pairs)
    failures = [f"{n} {v!r}\n  python {python_value(n, v)}\n  c      {g}"
                for (n, v), g in zip(pairs, got, strict=True) if g != python_value(n, v)]
    assert not failures, f"{len(failures)} of {len(pairs)} differ:\n" + "\n".join(failures[:8])


@pytest.mark.parametrize(("name", "value"), [
    ("DATA_IN", b"/a\xd4\\\xb2"),             # a backslash between two invalid bytes
    ("DATA_OUT", b'/o\xc3"\xa9"'),            # a quote between them
    ("PREPROCESS", b"/bin/x a\xc3''\xa9"),    # in an argument
    ("TIER", b"r\xc3\"\xa9\"am"),             # in a message only
    ("RESET", b"\xe2\\\x84\\\xaa"),           # three bytes of a KELVIN SIGN, apart
    ("NODES", b"'\xed'\xb2\x80"),             # the bytes of a surrogate escape, apart
])
def test_invalid_bytes_stay_invalid_after_splitting(build: Path, name: str,
                                                    value: bytes) -> None:
    """Python decodes the value before shlex removes quotes and backslashes, so invalid
    bytes that end up side by side do not become a valid character."""
    assert check_values(build, [(name, value)]) == [python_value(name, value)]
    assert python_value(name, value)[0] == "ERR"


def test_differential_random_bytes(build: Path) -> None:
    """Values of random bytes, quotes and backslashes, against Python."""
    rng = random.Random(20260517)
    alphabet = [b"'", b'"', b"\\", b" ", b"/", b"a", b"\xc3", b"\xa9", b"\xe2", b"\x84",
                b"\xaa", b"\xed", b"\xb2", b"\x80", b"\xff", b"\xc2\x85", b"1", b"s", b"."]
    pairs = [(name, b"".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 12))))
             for name in DIRECTIVES for _ in range(300)]
    pairs += [(name, bytes(rng.randrange(1, 256) for _ in range(rng.randrange(1, 30))))
              for name in DIRECTIVES for _ in range(100)]
    got = check_values(build, pairs)
    failures = [f"{n} {v!r}\n  python {python_value(n, v)}\n  c      {g}"
                for (n, v), g in zip(pairs, got, strict=True) if g != python_value(n, v)]
    assert not failures, f"{len(failures)} of {len(pairs)} differ:\n" + "\n".join(failures[:8])


def test_stage_out_with_postprocess_message(build: Path) -> None:
    done = subprocess.run([str(build / "rsa-spank-check"), "exclusive"],
                          capture_output=True, text=True, check=True)
    with pytest.raises(SubmissionErrors) as e:
        check_submission(None, {"STAGE_OUT": "tar", "POSTPROCESS": "/bin/pack"})
    assert e.value.lines == [f"--rsa-postprocess: {done.stdout.strip()}"]


def test_options_are_named_after_the_directives() -> None:
    source = (SRC / "rsa_grammar.c").read_text()
    for name in DIRECTIVES:
        assert f'{{"{name}", "{option_of(name)[2:]}",' in source


# --- real sbatch, no controller ---------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def slurm_conf(tmp_path: Path, build: Path) -> Path:
    """A slurm.conf of our own: no /etc/slurm, no lab; its controller is a closed port."""
    if not shutil.which("sbatch"):
        _missing("no sbatch: apt-get install slurm-client")
    conf = tmp_path / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=rsatest",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={_closed_port()}",
        "MessageTimeout=1",
        "AuthType=auth/munge",
        f"PlugStackConfig={tmp_path / 'plugstack.conf'}",
        "NodeName=n1 NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN",
        "PartitionName=p Nodes=n1 Default=YES",
        "",
    ]))
    plugstack(conf, f"required {build / 'rsa_spank.so'}")
    return conf


def plugstack(conf: Path, *lines: str) -> None:
    (conf.parent / "plugstack.conf").write_text("\n".join(lines) + "\n")


def sbatch(conf: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SLURM_CONF": str(conf),
           "HOME": str(conf.parent)}
    return subprocess.run(["sbatch", *args], capture_output=True, text=True, timeout=60,
                          env=env, cwd=conf.parent, check=False)


@pytest.mark.parametrize("how", ["required", "optional"])
def test_help_lists_every_option(slurm_conf: Path, build: Path, how: str) -> None:
    plugstack(slurm_conf, f"{how} {build / 'rsa_spank.so'}")
    done = sbatch(slurm_conf, "--help")
    assert done.returncode == 0, done.stderr
    plugins = done.stdout.split("Options provided by plugins:")[1]
    for name in DIRECTIVES:
        assert f"{option_of(name)}=" in plugins, name
        assert f"(#RSA_{name})" in re.sub(r"\s+", " ", plugins), name
    assert done.stderr == ""


@pytest.mark.parametrize(("args", "message"), [
    (["--rsa-data-in=data/in"],
     "--rsa-data-in: RSA_DATA_IN must be an absolute path, got 'data/in'"),
    (["--rsa-data-out=/a/../b"], "--rsa-data-out: RSA_DATA_OUT must not contain '.' or '..' "
     "components, got '/a/../b'; write the direct path"),
    (["--rsa-tier=nvme"], "--rsa-tier: RSA_TIER must be one of ram, ssd, auto, got 'nvme'"),
    (["--rsa-stage-out=tra"],
     "--rsa-stage-out: RSA_STAGE_OUT must be one of rsync, tar, got 'tra'; did you mean tar?"),
    (["--rsa-nodes", "two"],
     "--rsa-nodes: RSA_NODES must be a whole number of RSA nodes, at least 1, got 'two'"),
    (["--rsa-capacity=100"],
     "--rsa-capacity: RSA_CAPACITY needs a unit K, M, G, T or P, e.g. 512G; got '100'"),
    (["--rsa-reset=soon"], "--rsa-reset: RSA_RESET must be input-done or a duration such as "
     "30s, 10m, 2h or HH:MM:SS, got 'soon'"),
    (["--rsa-input="], "--rsa-input: RSA_INPUT has an empty value; write e.g. #RSA_INPUT=ro"),
    (["--rsa-preprocess=unpack.sh -x"], "--rsa-preprocess: RSA_PREPROCESS must start with "
     "the absolute path of a program, got 'unpack.sh'"),
    (["--rsa-data-in=/my input"], "--rsa-data-in: RSA_DATA_IN takes one value, got 2 words "
     "('/my' 'input'); put a path that contains spaces in double quotes"),
    (["--rsa-stage-out=tar", "--rsa-postprocess=/bin/pack"], "--rsa-postprocess: "
     "RSA_STAGE_OUT and RSA_POSTPROCESS both choose how output is staged out "
     "(--rsa-stage-out and --rsa-postprocess); keep one"),
])
def test_bad_value_is_refused_before_any_controller(slurm_conf: Path, args: list[str],
                                                    message: str) -> None:
    done = sbatch(slurm_conf, *args, "-t", "1", "--wrap", "true")
    assert done.returncode != 0
    lines = done.stderr.splitlines()
    assert lines[0] == f"sbatch: error: {message}"
    assert lines[1].startswith("sbatch: error: Invalid --rsa-")  # Slurm's own line
    assert "controller" not in done.stderr  # refused before any connection


def test_bad_value_in_an_sbatch_line_is_refused_too(slurm_conf: Path) -> None:
    script = slurm_conf.parent / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --rsa-tier=nvme\ntrue\n")
    done = sbatch(slurm_conf, "-t", "1", str(script))
    assert done.stderr.splitlines()[0] == (
        "sbatch: error: --rsa-tier: RSA_TIER must be one of ram, ssd, auto, got 'nvme'")


def test_good_values_pass_the_plugin(slurm_conf: Path) -> None:
    """Valid options get past the plugin; sbatch then fails only at the (closed) controller."""
    done = sbatch(slurm_conf, "--rsa-data-in=/pfs/in", "--rsa-data-out", "/pfs/out",
                  "--rsa-nodes=2", "--rsa-tier=SSD", "--rsa-capacity=3.5T",
                  "--rsa-stage-out=tar", "--rsa-early-start=union", "--rsa-input=rw",
                  "--rsa-reset=10m", "--rsa-preprocess=/bin/unpack -x 'a b'",
                  "-t", "1", "--wrap", "true")
    assert done.returncode != 0
    assert "--rsa" not in done.stderr and "Invalid" not in done.stderr
    assert "Batch job submission failed" in done.stderr


def test_optional_plugin_that_is_missing_is_ignored(slurm_conf: Path, tmp_path: Path) -> None:
    plugstack(slurm_conf, f"optional {tmp_path / 'nonexistent.so'}")
    done = sbatch(slurm_conf, "--help")
    assert done.returncode == 0 and "--rsa-data-in" not in done.stdout
    plugstack(slurm_conf, f"required {tmp_path / 'nonexistent.so'}")
    done = sbatch(slurm_conf, "--help")
    assert done.returncode != 0  # required: a plugin that cannot load stops sbatch


def test_unknown_plugstack_argument_is_reported_not_fatal(slurm_conf: Path,
                                                          build: Path) -> None:
    plugstack(slurm_conf, f"required {build / 'rsa_spank.so'} node_dir=/run/rsa/node frob=1")
    done = sbatch(slurm_conf, "--help")
    assert done.returncode == 0
    assert "unknown plugstack.conf argument 'frob=1'" in done.stderr


# --- job.env: what the node wrote, what a task gets -------------------------------------


def jobenv(build: Path, node_dir: Path, job: str = "42", options: bool = False) -> str:
    done = subprocess.run([str(build / "rsa-spank-check"), "jobenv", str(node_dir), "c1", job,
                           "1" if options else "0"], capture_output=True, text=True,
                          check=True)
    return done.stdout


def make_jobdir(tmp_path: Path) -> Path:
    jobdir = tmp_path / "node" / "c1" / "42"
    jobdir.mkdir(parents=True)
    for d in (tmp_path / "node", tmp_path / "node" / "c1", jobdir):
        d.chmod(0o755 if d != jobdir else 0o700)
    return jobdir


def test_task_gets_what_the_node_wrote(build: Path, tmp_path: Path) -> None:
    jobdir = make_jobdir(tmp_path)
    ins = {"do": "mount", "role": "input", "target": "/pfs/a b/in", "mode": "ro"}
    jobstate.write(jobdir, jobstate.mounted(ins, "job"))
    assert jobenv(build, tmp_path / "node") == (
        "RSA_STATE=input\nRSA_RAMDISK=/pfs/a b/in\nRSA_DATA_IN=/pfs/a b/in\n"
        "RSA_INPUT=ro\nRSA_MOUNTS=job\n")
    jobstate.write(jobdir, jobstate.on_pfs("refused: /pfs/x has a symlink\ncomponent"))
    assert jobenv(build, tmp_path / "node") == (
        "RSA_STATE=pfs\nRSA_MESSAGE=refused: /pfs/x has a symlink component\n")


def test_no_state_untouched_unless_options(build: Path, tmp_path: Path) -> None:
    make_jobdir(tmp_path)
    assert jobenv(build, tmp_path / "node") == ""
    assert jobenv(build, tmp_path / "node", job="7") == ""  # no directory at all
    out = jobenv(build, tmp_path / "node", job="7", options=True)
    assert out.startswith("RSA_STATE=unavailable\nRSA_MESSAGE=this node has no RSA state")


@pytest.mark.parametrize("spoil", ["group-writable file", "symlinked file",
                                   "world-writable dir", "symlinked dir"])
def test_state_others_could_write_is_ignored(build: Path, tmp_path: Path, spoil: str) -> None:
    jobdir = make_jobdir(tmp_path)
    jobstate.write(jobdir, jobstate.on_pfs("x"))
    if spoil == "group-writable file":
        (jobdir / jobstate.FILE).chmod(0o620)
    elif spoil == "symlinked file":
        (jobdir / "real").write_text("RSA_STATE=input\n")
        (jobdir / jobstate.FILE).unlink()
        (jobdir / jobstate.FILE).symlink_to(jobdir / "real")
    elif spoil == "world-writable dir":
        (tmp_path / "node" / "c1").chmod(0o777)
    else:
        (tmp_path / "node" / "c1").rename(tmp_path / "node" / "c1-real")
        (tmp_path / "node" / "c1").symlink_to(tmp_path / "node" / "c1-real")
    assert jobenv(build, tmp_path / "node", options=True).startswith("RSA_STATE=unavailable")


@pytest.mark.parametrize("name", [jobstate.FILE, "mnt"])
def test_a_fifo_in_the_job_directory_does_not_hang_the_step(build: Path, tmp_path: Path,
                                                            name: str) -> None:
    """Opening job.env or the namespace handle must not block (slurmstepd would hang
    before the job's tasks start): a FIFO is refused like any file that is not the
    expected kind."""
    jobdir = make_jobdir(tmp_path)
    os.mkfifo(jobdir / name, 0o600)
    if name == "mnt":
        jobstate.write(jobdir, jobstate.on_pfs("x"))
        argv = [str(build / "rsa-spank-check"), "join", str(tmp_path / "node"), "c1", "42",
                "--", "true"]
    else:
        argv = [str(build / "rsa-spank-check"), "jobenv", str(tmp_path / "node"), "c1", "42",
                "1"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"blocked opening a FIFO named {name}")
    if name == "mnt":
        assert done.returncode == 1 and "no namespace" in done.stderr
    else:
        assert done.stdout.startswith("RSA_STATE=unavailable\n")


def test_unknown_keys_and_control_characters_are_dropped(build: Path, tmp_path: Path) -> None:
    jobdir = make_jobdir(tmp_path)
    (jobdir / jobstate.FILE).write_bytes(
        b"# comment\nLD_PRELOAD=/evil.so\nRSA_STATE=output\nRSA_MESSAGE=a\x1bb\n"
        b"RSA_RAMDISK=/x\nRSA_RAMDISK=/y\n" + b"RSA_DATA_IN=/" + b"z" * 5000 + b"\n")
    (jobdir / jobstate.FILE).chmod(0o600)
    assert jobenv(build, tmp_path / "node") == "RSA_STATE=output\nRSA_RAMDISK=/y\n"


# --- the same under AddressSanitizer and UBSan (make asan) ------------------------------


@pytest.fixture(scope="module")
def asan(build: Path) -> Path:
    """rsa-spank-check built with -fsanitize=address,undefined (any finding aborts it)."""
    done = subprocess.run(["make", "-s", "-C", str(SRC), f"BUILD={build}", "asan"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return build / "asan"


def test_grammar_and_job_env_under_sanitizers(asan: Path, tmp_path: Path) -> None:
    test_shared_vectors(asan)
    test_differential_against_python(asan)
    test_differential_random_bytes(asan)
    test_unknown_keys_and_control_characters_are_dropped(asan, tmp_path)
    jobdir = tmp_path / "node" / "c1" / "42"
    (jobdir / jobstate.FILE).write_bytes(b"RSA_MESSAGE=" + b"x" * 70000)  # over 64 KiB
    assert jobenv(asan, tmp_path / "node") == "RSA_STATE=unavailable\n"
    (jobdir / jobstate.FILE).write_bytes(b"=\n\n=x\nRSA_STATE\nRSA_STATE=")  # no final \n
    assert jobenv(asan, tmp_path / "node") == "RSA_STATE=\n"


# --- the plugin in a stand-in slurmstepd (rsa_fake_stepd.c) -----------------------------

EXTERN_STEP = 0xFFFFFFFC  # SLURM_EXTERN_CONT


@pytest.fixture(scope="module")
def fake_stepd(build: Path) -> Path:
    """rsa_fake_stepd.c: loads rsa_spank.so and calls it as slurmstepd does for a step."""
    out = build / "rsa-fake-stepd"
    done = subprocess.run(["gcc", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-rdynamic",
                           "-o", str(out), str(SRC / "rsa_fake_stepd.c"), "-ldl"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return out


def step(fake_stepd: Path, build: Path, node_dir: Path, env: dict[str, str], *,
         job: int = 42, step_id: int = 0, options: tuple[str, ...] = ()
         ) -> tuple[list[str], dict[str, str], str]:
    """(callback lines, the task's RSA_* variables, slurmd's log) of one step on node c1."""
    stdin = "".join(f"{k}={v}\n" for k, v in env.items())
    stdin += "".join(f"OPTION {o}\n" for o in options)
    done = subprocess.run([str(fake_stepd), str(build / "rsa_spank.so"), str(job),
                           str(step_id), f"node_dir={node_dir}"], input=stdin,
                          capture_output=True, text=True, timeout=30, check=False,
                          env={**os.environ, "SLURMD_NODENAME": "c1"})
    assert done.returncode == 0, done.stderr
    calls = [ln for ln in done.stdout.splitlines() if not ln.startswith("ENV ")]
    task_env = dict(ln[4:].partition("=")[::2] for ln in done.stdout.splitlines()
                    if ln.startswith("ENV "))
    return calls, task_env, done.stderr


BATCH_STEP_ENV = {"RSA_STATE": "input", "RSA_RAMDISK": "/pfs/a/in", "RSA_DATA_IN": "/pfs/a/in",
                  "RSA_INPUT": "ro", "RSA_MOUNTS": "node", "PATH": "/usr/bin"}


def test_a_step_after_the_reset_keeps_no_variable_of_the_batch_step(
        fake_stepd: Path, build: Path, tmp_path: Path) -> None:
    """srun inherits the batch step's RSA_* variables; a step started after the reset
    must see only what the node says now (RSA_RAMDISK unset: there is none)."""
    if os.geteuid() != 0:
        _missing("job.env must belong to root, as on a node")
    jobdir = make_jobdir(tmp_path)
    released = jobstate.after(jobstate.mounted({"do": "mount", "role": "input",
                                                "target": "/pfs/a/in", "mode": "ro"}, "node"),
                              {"do": "release"}, {"ok": True}, "node")
    jobstate.write(jobdir, released)
    calls, task_env, log = step(fake_stepd, build, tmp_path / "node", BATCH_STEP_ENV)
    assert calls == ["init 0", "post_opt 0", "task 0", "exit 0"]
    assert task_env == released and "RSA_RAMDISK" not in task_env, log


def test_variables_of_the_submitting_job_do_not_reach_another_job(
        fake_stepd: Path, build: Path, tmp_path: Path) -> None:
    """sbatch run from an RSA job's task exports its RSA_* variables to the new job; they
    describe the other job. No state, no options: the new job gets none."""
    calls, task_env, _log = step(fake_stepd, build, tmp_path / "node", BATCH_STEP_ENV)
    assert calls == ["init 0", "post_opt 0", "task 0", "exit 0"]
    assert task_env == {}
    calls, task_env, _log = step(fake_stepd, build, tmp_path / "node", BATCH_STEP_ENV,
                                 options=("rsa-data-in=/pfs/b/in",))
    assert calls == ["init 0", "option 0", "post_opt 0", "task 0", "exit 0"]
    assert set(task_env) == {"RSA_STATE", "RSA_MESSAGE"}
    assert task_env["RSA_STATE"] == "unavailable"


def test_the_extern_step_is_left_alone(fake_stepd: Path, build: Path, tmp_path: Path) -> None:
    make_jobdir(tmp_path)
    calls, task_env, log = step(fake_stepd, build, tmp_path / "node", BATCH_STEP_ENV,
                                step_id=EXTERN_STEP)
    assert calls == ["init 0", "post_opt 0", "task 0", "exit 0"] and log == ""
    assert task_env == {k: v for k, v in BATCH_STEP_ENV.items() if k.startswith("RSA_")}


# --- the lab's plugstack.conf (lab/rsalab/slurm.py; the lab itself is not started) -------


def test_lab_plugstack_generation() -> None:
    import sys

    sys.path.insert(0, str(ROOT / "lab"))
    try:
        from rsalab import common, slurm  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(ROOT / "lab"))
    so = Path("/run/rsa-lab/slurm/rsa_spank.so")
    assert slurm.plugstack_conf("optional", so).splitlines()[1] == (
        f"optional {so} node_dir=/run/rsa/node")
    assert slurm.plugstack_conf("required", so).splitlines()[1].startswith("required ")
    assert not [ln for ln in slurm.plugstack_conf("off", so).splitlines()
                if not ln.startswith("#")]
    with pytest.raises(common.LabError):
        slurm.plugstack_conf("sometimes", so)
    assert f"PlugStackConfig={slurm.PLUGSTACK}" in slurm.slurm_conf(common.Settings())


def test_caps_match_python(build: Path) -> None:
    """The value cap (bytes, never split) and the quote cut (characters) of issue 12."""
    over = b"/" + b"a" * MAX_LINE
    pairs = [
        ("DATA_IN", over), ("PREPROCESS", b"/x " + b"'" * (MAX_LINE - 3)),  # at the cap
        ("PREPROCESS", b"/x " + b"'" * (MAX_LINE - 2)),  # over: no unmatched-quote error
        ("TIER", "\u00e9".encode() * 300), ("TIER", b"\xff" * 300), ("TIER", b"x" * 200),
        ("TIER", b"x" * 201), ("RESET", b"\\'" * 150), ("NODES", b"\x01" * 250),
    ]
    got = check_values(build, pairs)
    assert got == [python_value(n, v) for n, v in pairs]
    assert got[0] == ("ERR", f"RSA_DATA_IN is {MAX_LINE + 1} bytes long, more than the "
                             f"{MAX_LINE} allowed; shorten it")
    assert str(got[3][1]).endswith("'...") and str(got[5][1]).endswith("'")


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(SPLIT_TEXT, min_size=40, max_size=40))
def test_splitting_agrees_with_python(build: Path, values: list[str]) -> None:
    """Generated quoting and escaping: the C splitter gives Python's words and errors."""
    pairs = [("PREPROCESS", v.encode("utf-8", "surrogateescape")) for v in values]
    assert check_values(build, pairs) == [python_value(n, v) for n, v in pairs]
