"""Each man page's ENVIRONMENT lists exactly the variables its program reads.

Read statically: the modules (or functions) each program is made of, every name read from
a process environment there (``env.get("X")``, ``os.environ["X"]``, ``"X" in env``, a
constant such a call names, each name of a ``for key in (...)`` loop that reads
``environ[key]``) and every click option's ``envvar``. A variable read that its page
lacks fails, and so does one a page lists that no source of it reads.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import rsa_scheduler
from rsa_scheduler import manpages

PKG = Path(rsa_scheduler.__file__).resolve().parent

#: page -> what its program is made of, as far as the environment goes: a module, a
#: package (``dir/``) or one function (``module.py:function``). ``rsa-bb`` shares only
#: the address lookup of ``rsa-hook`` (hooks.py), not its Slurm variables.
SOURCES: dict[str, tuple[str, ...]] = {
    "rsa.1": ("cli/", "client.py", "config/loader.py", "core/jobkey.py", "node/check.py"),
    "rsad.8": ("daemon/", "config/loader.py", "slurm/cli.py"),
    "rsa-hook.8": ("hooks.py", "client.py", "config/loader.py", "core/jobkey.py"),
    "rsa-bb.8": ("bb.py", "hooks.py:_api_address", "hooks.py:_from_config", "client.py",
                 "config/loader.py"),
    "rsa-prolog.8": ("node/hooks.py", "client.py", "config/loader.py", "core/jobkey.py"),
    "rsa-epilog.8": ("node/hooks.py", "client.py", "config/loader.py", "core/jobkey.py"),
}

#: what counts as an environment variable of ours or Slurm's (not PATH, LANG, ...)
VARIABLE = re.compile(r"(RSA|SLURM|SLURMD|SPANK)_[A-Z0-9_]+|NOTIFY_SOCKET|WATCHDOG_[A-Z]+")


def _constants() -> dict[str, str]:
    """Module-level string constants of the package, by name (those named once)."""
    seen: dict[str, set[str]] = {}
    for path in PKG.rglob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            target = node.targets[0] if isinstance(node, ast.Assign) and \
                len(node.targets) == 1 else node.target if isinstance(node, ast.AnnAssign) \
                else None
            value = getattr(node, "value", None)
            if isinstance(target, ast.Name) and isinstance(value, ast.Constant) and \
                    isinstance(value.value, str):
                seen.setdefault(target.id, set()).add(value.value)
    return {k: next(iter(v)) for k, v in seen.items() if len(v) == 1}


def _is_env(expr: ast.expr) -> bool:
    if isinstance(expr, ast.Name):
        return expr.id in ("env", "environ")
    return isinstance(expr, ast.Attribute) and expr.attr == "environ"


def _nodes(spec: str) -> list[ast.AST]:
    """The syntax trees of a source spec of :data:`SOURCES`."""
    if spec.endswith("/"):
        return [ast.parse(p.read_text(encoding="utf-8")) for p in sorted((PKG / spec).glob(
            "*.py"))]
    file, _, func = spec.partition(":")
    tree = ast.parse((PKG / file).read_text(encoding="utf-8"))
    if not func:
        return [tree]
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == func]
    assert len(found) == 1, spec
    return list(found)


def _read(spec: str, constants: dict[str, str]) -> tuple[set[str], set[str]]:
    """(the variables the source reads, the prefixes it tests names for)."""
    names: set[str] = set()
    prefixes: set[str] = set()
    for tree in _nodes(spec):
        loops: dict[str, set[str]] = {}  # for key in ("A", "B"): the names of key
        for node in ast.walk(tree):
            if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and \
                    isinstance(node.iter, (ast.Tuple, ast.List)):
                loops.setdefault(node.target.id, set()).update(
                    e.value for e in node.iter.elts
                    if isinstance(e, ast.Constant) and isinstance(e.value, str))

        def values(expr: ast.expr, loops: dict[str, set[str]] = loops) -> set[str]:
            if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
                return {expr.value}
            if isinstance(expr, ast.Name):
                if expr.id in loops:
                    return loops[expr.id]
                if expr.id in constants:
                    return {constants[expr.id]}
            return set()

        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                for kw in node.keywords:
                    if kw.arg == "envvar":
                        names |= values(kw.value)
                if isinstance(f, ast.Attribute) and node.args and (
                        (f.attr in ("get", "pop") and _is_env(f.value)) or f.attr == "getenv"):
                    names |= values(node.args[0])
                if isinstance(f, ast.Attribute) and f.attr == "startswith" and node.args:
                    prefixes |= values(node.args[0])
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and \
                    _is_env(node.value):
                names |= values(node.slice)
            elif isinstance(node, ast.Compare) and len(node.ops) == 1 and \
                    isinstance(node.ops[0], (ast.In, ast.NotIn)) and \
                    _is_env(node.comparators[0]):
                names |= values(node.left)
    return {n for n in names if VARIABLE.fullmatch(n)}, prefixes


def _listed(page: str) -> set[str]:
    """Every variable the generated page lists under ENVIRONMENT."""
    text = manpages.pages()[page]()
    section = text.split(".SH ENVIRONMENT\n", 1)[1].split("\n.SH ", 1)[0]
    heads = re.findall(r"^\.TP\n(.+)$", section, re.M)
    return {v.replace("\\-", "-").strip()
            for head in heads for v in head.split(", ")}


@pytest.mark.parametrize("page", sorted(manpages.pages()))
def test_every_variable_a_program_reads_is_on_its_page_and_no_other(page: str) -> None:
    constants = _constants()
    read: set[str] = set()
    prefixes: set[str] = set()
    for spec in SOURCES[page]:
        got, pre = _read(spec, constants)
        read |= got
        prefixes |= pre
    listed = _listed(page)
    assert sorted(read - listed) == [], f"{page}: read, not in its ENVIRONMENT " \
                                        "(rsa_scheduler/manpages.py ENVIRONMENT)"
    stale = sorted(v for v in listed - read
                   if not (v.endswith("*") and v[:-1] in prefixes))
    assert stale == [], f"{page}: in its ENVIRONMENT, read by none of {SOURCES[page]}"


def test_every_page_is_scanned() -> None:
    assert set(SOURCES) == set(manpages.pages()) == set(manpages.ENVIRONMENT)
