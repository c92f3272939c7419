"""The #RSA_* directive grammar: shared vectors through the parser and the real CLI,
serialisation round trips, and property tests over arbitrary scripts."""

from __future__ import annotations

import json
import shlex
import string
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsa_scheduler.core.directives import (
    DIRECTIVES,
    MAX_ERRORS,
    MAX_LINE,
    MAX_NODES,
    MAX_RESET,
    MAX_SCRIPT,
    MAX_WARNINGS,
    QUOTE_MAX,
    DirectiveError,
    DirectiveErrors,
    DirectiveSpec,
    Reset,
    SplitError,
    SubmissionErrors,
    check_submission,
    directive_warnings,
    normalise_path,
    parse_directives,
    parse_directives_bytes,
    quote,
    split_words,
)
from rsa_scheduler.core.policy import EarlyStart, StageOut, Tier
from tests.conftest import DATA
from tests.directive_inputs import SPLIT_TEXT, far_script

VECTORS = DATA / "directives"
NAMES = sorted(p.stem for p in VECTORS.glob("*.sh"))
JSON_KEYS = [
    "data_in",
    "data_out",
    "preprocess",
    "postprocess",
    "nodes",
    "tier",
    "capacity",
    "stage_out",
    "early_start",
    "input",
    "reset",
]


def expected(name: str) -> tuple[dict[str, Any] | None, list[str] | None]:
    """(expected JSON, None) for a valid vector, (None, expected error lines) otherwise."""
    js, err = VECTORS / f"{name}.json", VECTORS / f"{name}.err"
    assert js.exists() != err.exists(), f"{name}: need exactly one of .json and .err"
    if js.exists():
        return json.loads(js.read_text(encoding="utf-8")), None
    return None, err.read_text(encoding="utf-8").splitlines()


def run_cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "rsa_scheduler", "directives", "check", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="module")
def cli_results() -> dict[str, subprocess.CompletedProcess[bytes]]:
    """Every vector through the real CLI once, in parallel (each call is a fresh python)."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        runs = pool.map(lambda n: run_cli(str(VECTORS / f"{n}.sh"), "--json"), NAMES)
        return dict(zip(NAMES, runs, strict=True))


# --- vectors --------------------------------------------------------------------------


def test_vector_set_is_complete() -> None:
    assert len(NAMES) >= 40
    assert (VECTORS / "README.md").exists()
    stems = {p.stem for p in VECTORS.iterdir() if p.suffix in (".json", ".err")}
    assert stems == set(NAMES), "every .json/.err needs its .sh and vice versa"
    errs = [n for n in NAMES if expected(n)[1] is not None]
    assert len(errs) >= 15 and len(NAMES) - len(errs) >= 15


@pytest.mark.parametrize("name", NAMES)
def test_vector_parser(name: str) -> None:
    want_json, want_err = expected(name)
    data = (VECTORS / f"{name}.sh").read_bytes()
    if want_json is not None:
        spec = parse_directives_bytes(data, name)
        assert spec.to_json() == want_json
        assert list(spec.to_json()) == JSON_KEYS
    else:
        with pytest.raises(DirectiveErrors) as info:
            parse_directives_bytes(data, name)
        assert [str(e) for e in info.value.errors] == want_err


@pytest.mark.parametrize("name", NAMES)
def test_vector_cli(name: str, cli_results: dict[str, subprocess.CompletedProcess[bytes]]) -> None:
    want_json, want_err = expected(name)
    result = cli_results[name]
    path = str(VECTORS / f"{name}.sh")
    if want_json is not None:
        assert result.returncode == 0, result.stderr
        out = result.stdout.decode()
        assert out.endswith("\n") and out.count("\n") == 1, "exactly one JSON object"
        assert json.loads(out) == want_json
        assert result.stderr == b""
    else:
        assert want_err is not None
        assert result.returncode == 65
        assert result.stdout == b""
        assert result.stderr.decode().splitlines() == [f"{path}:{line}" for line in want_err]


# --- CLI details ----------------------------------------------------------------------


def test_cli_stdin() -> None:
    ok = run_cli("-", "--json", stdin=b"#!/bin/sh\n#RSA_DATA_IN=/gpfs/a//\n")
    assert ok.returncode == 0
    assert json.loads(ok.stdout)["data_in"] == "/gpfs/a"
    bad = run_cli("-", stdin=b"#RSA_DATA_IN=a\n#RSA_TIER=x\n")
    assert bad.returncode == 65
    assert bad.stderr.decode().splitlines() == [
        "-:1: RSA_DATA_IN must be an absolute path, got 'a'",
        "-:2: RSA_TIER must be one of ram, ssd, auto, got 'x'",
    ]


@pytest.mark.parametrize("where", ["missing", "directory"])
def test_cli_unreadable_script(tmp_path: Path, where: str) -> None:
    target = tmp_path / "nope.sh" if where == "missing" else tmp_path
    result = run_cli(str(target))
    assert result.returncode == 66
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{target}: cannot read script: ")


def test_cli_human_summary(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n#RSA_DATA_IN=/gpfs/in\n#RSA_CAPACITY=3.5T\n#RSA_RESET=10m\n"
        "# RSA_DATA_OUT=/gpfs/out\nsrun app\n#RSA_NODES=2\n"
    )
    result = run_cli(str(script))
    assert result.returncode == 0
    out = result.stdout.decode()
    assert "RSA directives OK" in out and "3.5T" in out and "00:10:00" in out
    warnings = result.stderr.decode().splitlines()
    assert warnings[0].startswith(f"{script}:5: warning: '# RSA_DATA_OUT=/gpfs/out' is a plain")
    assert warnings[1].startswith(f"{script}:7: warning: #RSA_ line after the first command")


def test_cli_no_directives(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nsrun app\n")
    result = run_cli(str(script))
    assert result.returncode == 0
    assert "does not use the RSA" in result.stdout.decode()


# --- parser details -------------------------------------------------------------------


def test_errors_are_value_errors_with_source() -> None:
    with pytest.raises(ValueError, match=r"^job\.sh:2: RSA_DATA_IN must be an absolute"):
        parse_directives("#!/bin/sh\n#RSA_DATA_IN=x\n", "job.sh")


def test_warnings() -> None:
    text = "#!/bin/sh\n#rsa_data_in=/x\n#RSA_TIER=ssd\nsrun a\n#RSA_NODES=1\n"
    assert [(w.line, w.message.split(" ")[0]) for w in directive_warnings(text)] == [
        (2, "'#rsa_data_in=/x'"),
        (3, "RSA_TIER"),
        (5, "#RSA_"),
    ]


def test_every_directive_documented() -> None:
    guide = (Path(__file__).parents[2] / "docs" / "user-guide.md").read_text(encoding="utf-8")
    for name in DIRECTIVES:
        assert f"#RSA_{name}" in guide


@pytest.mark.parametrize(
    ("raw", "norm"),
    [("/a", "/a"), ("//a//b/", "/a/b"), ("/a b/c", "/a b/c"), ("/a/.b/..c", "/a/.b/..c")],
)
def test_normalise_path(raw: str, norm: str) -> None:
    assert normalise_path("P", raw) == norm


@pytest.mark.parametrize("raw", ["a", "", "/", "//", "/a/.", "/a/../b", "/a\0b", "/\udcff"])
def test_normalise_path_rejects(raw: str) -> None:
    with pytest.raises(ValueError, match=r"^P "):
        normalise_path("P", raw)


def test_long_paths_rejected() -> None:
    with pytest.raises(ValueError, match="component longer than 255"):
        normalise_path("P", "/" + "x" * 256)
    with pytest.raises(ValueError, match="longer than 4095"):
        normalise_path("P", "/x" * 2048)


# --- serialised forms -------------------------------------------------------------------


def test_admin_comment_example() -> None:
    spec = DirectiveSpec(
        data_in="/gpfs/alice/in",
        data_out="/gpfs/alice/my out",
        preprocess=("/bin/prep", "a,b", "ü"),
        nodes=2,
        tier=Tier.SSD,
        capacity=3 << 40,
        early_start=EarlyStart.WAIT,
        input_writable=False,
        reset=Reset(600),
    )
    text = spec.to_admin_comment()
    assert text == (
        "rsa1:i=/gpfs/alice/in;o=/gpfs/alice/my%20out;pre=/bin/prep,a%2Cb,%C3%BC;n=2;t=ssd;"
        "c=3298534883328;es=wait;im=ro;r=600s"
    )
    assert DirectiveSpec.from_admin_comment(text) == spec
    assert DirectiveSpec().to_admin_comment() == "rsa1:"
    assert DirectiveSpec.from_admin_comment("rsa1:") == DirectiveSpec()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "rsa2:i=/a",
        "rsa1:i=/a;",
        "rsa1:o=/b;i=/a",  # order
        "rsa1:i=/a;i=/b",
        "rsa1:x=1",
        "rsa1:i",
        "rsa1:i=/a%2c",  # lowercase hex
        "rsa1:i=/%61",  # needless escape
        "rsa1:i=/a b",
        "rsa1:i=/a//b",
        "rsa1:i=a",
        "rsa1:n=0",
        "rsa1:n=02",
        "rsa1:t=nvme",
        "rsa1:r=10m",
        "rsa1:i=/%FF",
        "rsa1:pre=",
        "rsa1:post=/p;so=tar",
    ],
)
def test_admin_comment_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        DirectiveSpec.from_admin_comment(text)


@pytest.mark.parametrize(
    "data",
    [
        {"bogus": 1},
        {"data_in": "rel"},
        {"data_in": 3},
        {"preprocess": "/bin/x"},
        {"preprocess": []},
        {"nodes": True},
        {"nodes": 1.0},
        {"capacity": 0},
        {"tier": "RAM"},
        {"input": True},
        {"reset": 600},
    ],
)
def test_from_json_rejects(data: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        DirectiveSpec.from_json(data)


def test_reset_text_form() -> None:
    assert str(Reset(None)) == "input-done" and Reset(None).on_input_done
    assert Reset.from_str("90s") == Reset(90)
    for bad in ("0s", "90", "1m", "input_done", "-1s"):
        with pytest.raises(ValueError):
            Reset.from_str(bad)


# --- properties -----------------------------------------------------------------------

_COMPONENT_CHARS = st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/")
_components = st.text(_COMPONENT_CHARS, min_size=1, max_size=12).filter(
    lambda c: c not in (".", "..")
)
paths = st.lists(_components, min_size=1, max_size=5).map(lambda cs: "/" + "/".join(cs))
_args = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=10)
argvs = st.tuples(paths, st.lists(_args, max_size=4)).map(lambda t: (t[0], *t[1]))
resets = st.one_of(st.just(Reset(None)), st.integers(1, MAX_RESET).map(Reset))


@st.composite
def specs(draw: st.DrawFn) -> DirectiveSpec:
    def maybe(strategy: st.SearchStrategy[Any]) -> Any:
        return draw(st.one_of(st.none(), strategy))

    postprocess = maybe(argvs)
    return DirectiveSpec(
        data_in=maybe(paths),
        data_out=maybe(paths),
        preprocess=maybe(argvs),
        postprocess=postprocess,
        nodes=maybe(st.integers(1, MAX_NODES)),
        tier=maybe(st.sampled_from(Tier)),
        capacity=maybe(st.integers(1, 2**43).map(lambda k: k * 1024)),
        stage_out=None if postprocess is not None else maybe(st.sampled_from(StageOut)),
        early_start=maybe(st.sampled_from(EarlyStart)),
        input_writable=maybe(st.booleans()),
        reset=maybe(resets),
    )


def render(spec: DirectiveSpec, sep: str) -> str:
    """A batch script that should parse back to ``spec``."""
    js = spec.to_json()
    lines = ["#!/bin/bash", "#SBATCH -N 4"]
    for name, d in DIRECTIVES.items():
        key = "input" if d.field == "input_writable" else d.field
        value = js[key]
        if value is None:
            continue
        if isinstance(value, list):
            text = " ".join(shlex.quote(v) for v in value)
        elif key == "capacity":
            text = f"{value // 1024}K"
        else:
            text = shlex.quote(str(value))
        lines.append(f"#RSA_{name}{sep}{text}")
    return "\n".join([*lines, "srun ./app", "#RSA_BOGUS"]) + "\n"


@given(paths.map(lambda p: p.replace("/", "//") + "/"))
def test_normalise_is_idempotent(raw: str) -> None:
    once = normalise_path("P", raw)
    assert normalise_path("P", once) == once
    assert "//" not in once and not once.endswith("/")


@given(specs())
def test_json_round_trip(spec: DirectiveSpec) -> None:
    data = json.loads(json.dumps(spec.to_json()))
    assert list(data) == JSON_KEYS
    assert DirectiveSpec.from_json(data) == spec


@given(specs())
def test_admin_comment_round_trip(spec: DirectiveSpec) -> None:
    text = spec.to_admin_comment()
    assert text.isascii() and text.isprintable() and " " not in text
    assert DirectiveSpec.from_admin_comment(text) == spec
    assert DirectiveSpec.from_admin_comment(text).to_admin_comment() == text


@settings(deadline=None)
@given(specs(), st.sampled_from(["=", " ", " = ", "\t"]))
def test_rendered_script_parses_back(spec: DirectiveSpec, sep: str) -> None:
    assert parse_directives(render(spec, sep)) == spec


def _check_errors(errors: list[DirectiveError], n_lines: int) -> None:
    for e in errors:
        assert 1 <= e.line <= n_lines
        assert e.message and "\n" not in e.message and "\r" not in e.message


_directive_lines = st.one_of(
    st.text(max_size=30),
    st.builds(
        lambda n, sep, v: f"#RSA_{n}{sep}{v}",
        st.sampled_from([*DIRECTIVES, "", "X", "data_in"]),
        st.sampled_from(["=", " ", "", "\t= "]),
        st.text(string.printable + "é\udcff\0\"'\\", max_size=20),
    ),
)


@settings(deadline=None)
@given(st.lists(_directive_lines, max_size=12).map("\n".join))
def test_parser_only_raises_directive_errors(text: str) -> None:
    try:
        spec = parse_directives(text)
    except DirectiveErrors as e:
        assert e.errors
        _check_errors(e.errors, text.count("\n") + 1)
    else:
        assert DirectiveSpec.from_json(spec.to_json()) == spec
        assert DirectiveSpec.from_admin_comment(spec.to_admin_comment()) == spec


@settings(deadline=None)
@given(st.binary(max_size=200))
def test_parser_on_arbitrary_bytes(data: bytes) -> None:
    try:
        parse_directives_bytes(b"#RSA_" + data)
    except DirectiveErrors as e:
        _check_errors(e.errors, data.count(b"\n") + 1)


# --- bounded work: the linear splitter and the caps (issue 12) ---------------------------

_SPLIT_ALPHABET = st.sampled_from([*" \t\r\n\v\f'\"\\#=/a-b", "é", "\udcff", "\x00"])


def _shlex(text: str) -> list[str] | str:
    try:
        return shlex.split(text)
    except ValueError as e:
        return str(e)


def _ours(text: str) -> list[str] | str:
    try:
        return split_words(text)
    except SplitError as e:
        return str(e)


@settings(max_examples=3000, deadline=None)
@given(SPLIT_TEXT | st.text(_SPLIT_ALPHABET, max_size=40) | st.text(max_size=40))
def test_split_words_is_shlex_split(text: str) -> None:
    assert _ours(text) == _shlex(text)


@pytest.mark.parametrize("text", [
    "", " ", "a", "''", '""', "'' ''", "a''b", 'a"b"c', "'a'\"b\"", "\\", "a\\", "'\\'",
    '"\\"', '"\\', '"\\\\"', '"\\a"', "\\\\", "\\ a", "a\\\n b", "'", '"', "a'b", "\v a \f",
    '"a\\"b"', "'a\\'b", "x # y", " \t\r\n ",
])
def test_split_words_edge_cases(text: str) -> None:
    assert _ours(text) == _shlex(text)


def _time(fn: Any, *args: Any) -> float:
    """CPU seconds of this thread for ``fn(*args)``: wall time counts the time the thread
    waited for a CPU, which on a loaded 2-CPU machine (make test's unit lane beside image
    builds) made the big run 255 times the small one (median; 29 of 40 tries over 40)."""
    import time
    t = time.thread_time()
    fn(*args)
    return time.thread_time() - t


def test_split_words_is_linear() -> None:
    """Ten times the input costs about ten times as long (a quadratic splitter: 100), in
    CPU time (``_time``)."""
    small, big = "a" * 40_000 + ' "b\\"c" ', "a" * 400_000 + ' "b\\"c" '
    t_small = min(_time(split_words, small) for _ in range(5))
    t_big = min(_time(split_words, big) for _ in range(3))
    assert t_big < 40 * max(t_small, 1e-5)


def _errors(text: str) -> list[str]:
    with pytest.raises(DirectiveErrors) as e:
        parse_directives(text)
    return [str(x) for x in e.value.errors]


def test_a_directive_line_over_the_cap_is_one_error_and_never_split() -> None:
    line = "#RSA_DATA_IN=/" + "a" * (MAX_LINE - len("#RSA_DATA_IN=/") + 1)
    assert len(line.encode()) == MAX_LINE + 1
    assert _errors(f"#!/bin/sh\n{line}\n") == [
        f"2: directive line is {MAX_LINE + 1} bytes long, more than the {MAX_LINE} allowed; "
        "shorten it"]
    at_cap = line[:-1]  # exactly MAX_LINE bytes: parsed (and refused for its path length)
    assert "path component longer than 255" in _errors(f"#!/bin/sh\n{at_cap}\n")[0]


def test_the_cap_counts_bytes_not_characters() -> None:
    prefix = "#RSA_DATA_IN=/"
    n = (MAX_LINE - len(prefix)) // 2 + 1  # two bytes each: just over in bytes
    line = prefix + "é" * n
    assert len(line) < MAX_LINE < len(line.encode())
    assert "bytes long, more than the" in _errors(line + "\n")[0]
    raw = prefix.encode() + b"\xff" * (MAX_LINE - len(prefix) + 1)  # undecodable: 1 each
    with pytest.raises(DirectiveErrors) as e:
        parse_directives_bytes(raw)
    assert f"is {MAX_LINE + 1} bytes long" in str(e.value)


def test_an_option_value_over_the_cap() -> None:
    with pytest.raises(SubmissionErrors) as e:
        check_submission(None, {"DATA_IN": "/" + "a" * MAX_LINE})
    assert e.value.lines == [f"--rsa-data-in: RSA_DATA_IN is {MAX_LINE + 1} bytes long, more "
                             f"than the {MAX_LINE} allowed; shorten it"]


def test_checking_stops_after_max_errors() -> None:
    script = "#!/bin/sh\n" + "#RSA_NOPE=1\n" * 1000 + "#RSA_DATA_IN=relative\n"
    errors = _errors(script)
    assert len(errors) == MAX_ERRORS + 1
    assert errors[-1] == (f"{MAX_ERRORS + 2}: more than {MAX_ERRORS} errors, checking stopped "
                          "at this line; fix the ones above and submit again")


def test_exactly_max_errors_has_no_stop_line() -> None:
    script = "#!/bin/sh\n" + "#RSA_NOPE=1\n" * MAX_ERRORS + "echo\n#RSA_NOPE=1\n"
    assert len(_errors(script)) == MAX_ERRORS


def test_warnings_are_bounded() -> None:
    script = "#!/bin/sh\n# RSA_X\necho\n" + "#RSA_DATA_IN=/late\n" * 5000
    warnings = directive_warnings(script)
    assert len(warnings) == MAX_WARNINGS + 1
    assert warnings[-1].message == f"{5000 + 1 - MAX_WARNINGS} more warnings not listed"
    assert warnings[-1].line == max(w.line for w in warnings)


def test_quoted_user_text_is_cut() -> None:
    long = "x" * (QUOTE_MAX + 50)
    assert quote(long) == "'" + "x" * QUOTE_MAX + "'..."
    assert quote("x" * QUOTE_MAX) == "'" + "x" * QUOTE_MAX + "'"
    msg = _errors(f"#RSA_TIER={long}\n")[0]
    assert msg.endswith("'...") and len(msg) < 400


def test_a_huge_script_is_checked_quickly() -> None:
    """4 MB (Slurm's default max_script_size) of the worst text we know: bounded, i.e.
    linear (a quadratic pass over 2M lines would take hours). CPU seconds of this process,
    not wall time: on a loaded 2-CPU machine the long header took 6.5 s of wall time for
    3.2 s of CPU. The speed itself is a benchmark (docs/benchmarks.md, "Directive parsing
    on hostile scripts")."""
    import time
    worst = [
        "#!/bin/sh\n#RSA_DATA_IN=/" + "a" * (4 << 20) + "\n",  # one huge line
        "#!/bin/sh\n" + ("#RSA_PREPROCESS=/x " + '"\\a' * 5000 + '"\n') * 250,  # many big ones
        "#!/bin/sh\n" + "#RSA_FOO=1\n" * 380_000,  # many unknown names
        "#!/bin/sh\n" + "#\n" * 2_000_000,  # a long header
    ]
    for text in worst:
        t = time.process_time()
        try:
            parse_directives(text)
        except DirectiveErrors as e:
            assert len(e.errors) <= MAX_ERRORS + 1
        directive_warnings(text)
        assert time.process_time() - t < 15, text[:40]


@pytest.mark.parametrize("pad", ["#", "# \u00e9\u00e9\u00e9"])
def test_directives_beyond_the_scanned_bytes_are_an_error(pad: str) -> None:
    assert parse_directives(far_script(MAX_SCRIPT - 1, pad)).data_in == "/far"
    line = far_script(MAX_SCRIPT, pad).count("\n")
    assert _errors(far_script(MAX_SCRIPT, pad)) == [
        f"{line}: #RSA_ line starts after the first {MAX_SCRIPT} bytes of the script, where "
        "checking stops; move the #RSA_ lines to the top"]


# --- a DATA_IN/DATA_OUT the node would refuse to mount over (issue 36) ---------------


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """A fresh directory under /srv: not under /tmp, where `rsa config check` refuses
    allowed_roots (RSA nodes' user commands get a private /tmp), nor a system path."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="rsa-test-", dir="/srv"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_check_warns_before_submission_about_a_directory_that_is_not_yours(
        tmp_path: Path, run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Checked as the calling user by the Prolog's own rule: a directory someone else
    owns (here: the test's, seen by another uid) is named with its line and the fix;
    a missing one and an array template are left to the job."""
    from rsa_scheduler.cli.main import cli
    from tests.clirunner import cli_runner

    root = run_dir / "proj"
    (root / "team" / "in").mkdir(parents=True)
    conf = tmp_path / "rsa.yaml"
    conf.write_text(f"pool:\n  nodes:\n    - {{names: rsa1, capacity: 2G}}\n"
                    f"staging:\n  allowed_roots: [{root}]\n")
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\n#SBATCH -N1\n#RSA_DATA_IN={root}/team/in\n"
                      f"#RSA_DATA_OUT={root}/team/out-%a\n")
    monkeypatch.setenv("RSA_CONFIG", str(conf))
    mine = cli_runner().invoke(cli, ["directives", "check", str(script)])
    assert mine.exit_code == 0 and "warning" not in mine.output, mine.output
    monkeypatch.setattr("os.getuid", lambda: 4_000_001)
    theirs = cli_runner().invoke(cli, ["directives", "check", str(script)])
    assert theirs.exit_code == 0  # a warning: the job still runs, from the PFS
    (line,) = [ln for ln in theirs.output.splitlines() if "warning" in ln]
    assert line.startswith(f"{script}:3: warning: #RSA_DATA_IN={root}/team/in is owned by ")
    assert "not you" in line and "staging.shared_dirs" in line
    assert line.endswith("(the job would use it on the PFS, without the RAMDISK)")
