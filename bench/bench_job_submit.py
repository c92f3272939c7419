"""Directive parsing cost on hostile scripts, in the three ports (issue 12.3).

job_submit.lua runs inside slurmctld under its locks, so its cost per submission is
slurmctld's: it must grow linearly with the script and stay bounded whatever is in it.
For each worst case and size this times:

* **Lua**: slurm_plugins/job_submit.lua's ``slurm_job_submit`` through the test driver
  (tests/lua/run_vector.lua) in lua5.1, the interpreter Slurm 22.05 links; the time of the
  same run on a one-line script is subtracted (interpreter start, loading the plugin);
* **Python**: ``parse_directives`` in-process (what rsad and ``rsa directives check`` run);
* with ``--before REV``, the same Lua and Python code at git revision REV (e.g. the
  commit before the fix), for the before/after ratio. Old code is only run up to
  ``--before-max`` bytes: it was quadratic.

Worst cases: ``line`` (one directive whose value is one N-byte word), ``escapes`` (N bytes
of ``"\\a`` escapes in one value, split word by word), ``unknown`` (N/12 lines of an
unknown directive: an error and a difflib hint each). Values above 16 KiB are refused
by size now, so the new code's ``line`` and ``escapes`` stay flat.

Prints a markdown table for docs/benchmarks.md. Not a test: nothing asserts.

    .venv/bin/python bench/bench_job_submit.py [--before REV] [--sizes 16384,65536,...]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "slurm_plugins" / "job_submit.lua"
DRIVER = ROOT / "tests" / "lua" / "run_vector.lua"
LUA = "lua5.1"


def script(kind: str, size: int) -> bytes:
    head = b"#!/bin/sh\n"
    if kind == "line":
        return head + b"#RSA_DATA_IN=/" + b"a" * size + b"\n"
    if kind == "escapes":
        return head + b"#RSA_PREPROCESS=/bin/x " + b'"\\a' * (size // 3) + b'"\n'
    if kind == "unknown":
        return head + b"#RSA_NOPE=1\n" * (size // 12)
    raise ValueError(kind)


def lua_seconds(plugin: Path, path: Path, tiny: Path, timeout: float,
                repeat: int) -> float | None:
    """Seconds per submission: ``repeat`` submissions in one interpreter, less the same
    number of one-line scripts, divided by ``repeat``."""
    def run(p: Path) -> float:
        t = time.perf_counter()
        subprocess.run([LUA, str(DRIVER), str(plugin), "many", *[str(p)] * repeat],
                       check=True, capture_output=True, timeout=timeout)
        return time.perf_counter() - t
    try:
        base = min(run(tiny) for _ in range(3))
        return max(0.0, min(run(path) for _ in range(2)) - base) / repeat
    except subprocess.TimeoutExpired:
        return None


def python_seconds(module: ModuleType, data: bytes) -> float:
    text = data.decode("utf-8", "surrogateescape")
    best = float("inf")
    for _ in range(2):
        t = time.perf_counter()
        with contextlib.suppress(module.DirectiveErrors):
            module.parse_directives(text)
        best = min(best, time.perf_counter() - t)
    return best


def old_code(rev: str, tmp: Path) -> tuple[Path, ModuleType]:
    """job_submit.lua (with the files it loads) and core/directives.py as they were at
    ``rev``."""
    def show(path: str) -> bytes:
        return subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"],
                              check=True, capture_output=True).stdout
    before = tmp / "before"
    before.mkdir()
    lua = before / "job_submit.lua"
    lua.write_bytes(show("slurm_plugins/job_submit.lua"))
    for part in ("rsa_grammar.lua", "rsa_text.lua", "rsa_directives.lua"):  # loaded beside it
        # absent at a revision before issue 19's split: job_submit.lua was one file
        with contextlib.suppress(subprocess.CalledProcessError):
            (before / part).write_bytes(show(f"slurm_plugins/{part}"))
    py = tmp / "directives_before.py"
    py.write_bytes(show("rsa_scheduler/core/directives.py"))
    spec = importlib.util.spec_from_file_location("directives_before", py)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["directives_before"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return lua, module


def fmt(seconds: float | None) -> str:
    if seconds is None:
        return "timeout"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="16384,65536,262144,1048576,4194304")
    ap.add_argument("--before", metavar="REV", help="also time the code at git revision REV")
    ap.add_argument("--before-max", type=int, default=262144,
                    help="largest size the old code is run on (default 256 KiB)")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--repeat", type=int, default=20,
                    help="submissions per Lua timing of the new code (default 20)")
    args = ap.parse_args()
    from rsa_scheduler.core import directives

    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="rsa-bench-") as tmp_name:
        tmp = Path(tmp_name)
        tiny = tmp / "tiny.sh"
        tiny.write_bytes(b"#!/bin/sh\ntrue\n")
        before: tuple[Path, ModuleType] | None = old_code(args.before, tmp) if args.before \
            else None
        cols = ["case", "size", "Lua", "Python"]
        if before:
            cols += [f"Lua @{args.before}", f"Python @{args.before}", "Lua before/after"]
        print(f"python {platform.python_version()}, {LUA}, {platform.machine()}\n")
        print("| " + " | ".join(cols) + " |")
        print("|" + "---|" * len(cols))
        for kind in ("line", "escapes", "unknown"):
            for size in sizes:
                data = script(kind, size)
                path = tmp / f"{kind}-{size}.sh"
                path.write_bytes(data)
                lua_new = lua_seconds(PLUGIN, path, tiny, args.timeout, args.repeat)
                row = [kind, f"{size // 1024} KiB", fmt(lua_new),
                       fmt(python_seconds(directives, data))]
                if before:
                    if size <= args.before_max:
                        lua_old = lua_seconds(before[0], path, tiny, args.timeout, 1)
                        ratio = ("" if lua_old is None or not lua_new else
                                 f"{lua_old / lua_new:.0f}x")
                        row += [fmt(lua_old), fmt(python_seconds(before[1], data)), ratio]
                    else:
                        row += ["not run", "not run", ""]
                print("| " + " | ".join(row) + " |", flush=True)

if __name__ == "__main__":
    main()
