"""The event catalogue (``core/events.py`` ``CATALOGUE``) is exactly what rsad writes.

Read statically, from the source: every construction of an ``Event`` in the package, the
name it is given (a literal, either branch of a conditional, or a parameter followed to
the calls that pass it, e.g. ``dephold.py``'s ``self._event(..., "job.dependency-held",
...)`` and ``machine.py``'s ``_issue_unlock(rec, now, "unlock.owed")``), the keys of its
context (a dict literal, followed through local assignments, ``ctx["key"] = ...``,
``ctx.update(key=...)``, spreads and parameters), the module that writes it and whether it
goes to the pool stream. A construction whose name cannot be told fails the test, unless
it re-makes an event that already exists (:data:`PASSTHROUGH`: the store). Nothing here
runs rsad: a name written on a path no other test reaches is still seen.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import rsa_scheduler
from rsa_scheduler.core.events import CATALOGUE, POOL, reference

PKG = Path(rsa_scheduler.__file__).resolve().parent
ROOT = PKG.parent

#: (module, function) that build an Event from one that already exists: the store gives
#: an appended event its seq and reads events back. Their names are other sites'.
PASSTHROUGH = frozenset({("store/sqlite.py", "append"), ("store/sqlite.py", "events"),
                         ("store/sqlite.py", "newest_events")})

FuncNode = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass
class Module:
    rel: str
    tree: ast.Module
    parents: dict[ast.AST, ast.AST] = field(default_factory=dict)
    ctors: set[str] = field(default_factory=set)  # local names of the Event class
    events_modules: set[str] = field(default_factory=set)  # local names of core.events
    imported: dict[str, str] = field(default_factory=dict)  # local name -> "module.name"

    def enclosing(self, node: ast.AST) -> FuncNode | None:
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return node
        return None

    def is_method(self, fn: FuncNode) -> bool:
        return isinstance(self.parents.get(fn), ast.ClassDef)


@dataclass
class Site:
    """One construction of an Event."""

    module: str
    line: int
    func: str
    names: set[str] | None  # None: cannot be told
    keys: set[str]
    closed: bool  # every key it may carry is known
    pool: bool


def _load() -> dict[str, Module]:
    mods: dict[str, Module] = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        mod = Module(rel, tree)
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                mod.parents[child] = node
            if isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    local = a.asname or a.name
                    mod.imported[local] = f"{node.module}.{a.name}"
                    if node.module == "rsa_scheduler.core.events" and a.name == "Event":
                        mod.ctors.add(local)
                    if node.module == "rsa_scheduler.core" and a.name == "events":
                        mod.events_modules.add(local)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == "rsa_scheduler.core.events" and a.asname:
                        mod.events_modules.add(a.asname)
        mods[rel] = mod
    return mods


def _module_name(rel: str) -> str:
    return "rsa_scheduler." + rel.removesuffix(".py").removesuffix("/__init__").replace(
        "/", ".")


class Scanner:
    def __init__(self, mods: dict[str, Module]) -> None:
        self.mods = mods
        self.by_name = {_module_name(rel): m for rel, m in mods.items()}

    # ---- where a function is called ---------------------------------------------------
    def callers(self, mod: Module, fn: FuncNode) -> list[tuple[Module, ast.Call, int]]:
        """(module, call, positional offset) of every call of ``fn``: a method through
        ``self.`` in its own class; a function by its name in its module or in a module
        that imports it by name."""
        out = []
        if mod.is_method(fn):
            cls = mod.parents[fn]
            for node in ast.walk(cls):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr == fn.name and isinstance(node.func.value, ast.Name) \
                        and node.func.value.id == "self":
                    out.append((mod, node, 1))
            return out
        full = f"{_module_name(mod.rel)}.{fn.name}"
        for other in self.mods.values():
            local = fn.name if other is mod else next(
                (k for k, v in other.imported.items() if v == full), None)
            if local is None:
                continue
            for node in ast.walk(other.tree):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                        and node.func.id == local:
                    out.append((other, node, 0))
        return out

    @staticmethod
    def argument(call: ast.Call, fn: FuncNode, param: str, offset: int) -> ast.expr | None:
        params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
        if param in params:
            i = params.index(param) - offset
            if 0 <= i < len(call.args) and not any(isinstance(a, ast.Starred)
                                                   for a in call.args[:i + 1]):
                return call.args[i]
        for kw in call.keywords:
            if kw.arg == param:
                return kw.value
        if param in params:  # its default
            defaults = fn.args.defaults
            j = params.index(param) - (len(params) - len(defaults))
            if 0 <= j < len(defaults):
                return defaults[j]
        for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True):
            if a.arg == param and d is not None:
                return d
        raise LookupError(f"no argument for {param}")

    @staticmethod
    def params(fn: FuncNode | None) -> set[str]:
        if fn is None:
            return set()
        a = fn.args
        return {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)}

    @staticmethod
    def assigned(fn: FuncNode, name: str) -> list[ast.expr]:
        """The values ``name`` is bound to by plain assignments in ``fn``."""
        out = []
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                out.append(value)
        return out

    # ---- a name ---------------------------------------------------------------------------
    def names(self, expr: ast.expr | None, mod: Module, fn: FuncNode | None,
              seen: frozenset[object] = frozenset()) -> set[str] | None:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return {expr.value}
        if isinstance(expr, ast.IfExp):
            a, b = self.names(expr.body, mod, fn, seen), self.names(expr.orelse, mod, fn, seen)
            return None if a is None or b is None else a | b
        if not isinstance(expr, ast.Name) or fn is None:
            return None
        key = (id(fn), expr.id)
        if key in seen:
            return None
        seen = seen | {key}
        if expr.id in self.params(fn):
            calls = self.callers(mod, fn)
            if not calls:
                return None
            out: set[str] = set()
            for cmod, call, offset in calls:
                try:
                    arg = self.argument(call, fn, expr.id, offset)
                except LookupError:
                    return None
                got = self.names(arg, cmod, cmod.enclosing(call), seen)
                if got is None:
                    return None
                out |= got
            return out
        values = self.assigned(fn, expr.id)
        if not values:
            return None
        found: set[str] = set()
        for v in values:
            got = self.names(v, mod, fn, seen)
            if got is None:
                return None
            found |= got
        return found

    # ---- a context's keys -----------------------------------------------------------------
    def keys(self, expr: ast.expr | None, mod: Module, fn: FuncNode | None,
             seen: frozenset[object] = frozenset()) -> tuple[set[str], bool]:
        """(the keys ``expr`` may hold, whether that is all of them)."""
        if expr is None:
            return set(), True
        if isinstance(expr, ast.Dict):
            out: set[str] = set()
            closed = True
            for k, v in zip(expr.keys, expr.values, strict=True):
                if k is None:  # **spread
                    sub, c = self.keys(v, mod, fn, seen)
                    out |= sub
                    closed = closed and c
                elif isinstance(k, ast.Constant) and isinstance(k.value, str):
                    out.add(k.value)
                else:
                    closed = False
            return out, closed
        if isinstance(expr, ast.IfExp):
            a, ca = self.keys(expr.body, mod, fn, seen)
            b, cb = self.keys(expr.orelse, mod, fn, seen)
            return a | b, ca and cb
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) \
                and expr.func.id == "dict" and len(expr.args) <= 1:
            out, closed = self.keys(expr.args[0] if expr.args else None, mod, fn, seen)
            for kw in expr.keywords:
                if kw.arg is None:
                    sub, c = self.keys(kw.value, mod, fn, seen)
                    out, closed = out | sub, closed and c
                else:
                    out.add(kw.arg)
            return out, closed
        if isinstance(expr, ast.DictComp) and len(expr.generators) == 1:
            gen = expr.generators[0]
            if isinstance(expr.key, ast.Name) and isinstance(gen.target, ast.Name) \
                    and expr.key.id == gen.target.id \
                    and isinstance(gen.iter, (ast.Tuple, ast.List)) \
                    and all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                            for e in gen.iter.elts):
                return {e.value for e in gen.iter.elts}, True  # type: ignore[attr-defined]
            return set(), False
        if not isinstance(expr, ast.Name) or fn is None:
            return set(), False
        key = (id(fn), expr.id, "keys")
        if key in seen:
            return set(), False
        seen = seen | {key}
        if expr.id in self.params(fn):
            calls = self.callers(mod, fn)
            if not calls:
                return set(), False
            out, closed = set(), True
            for cmod, call, offset in calls:
                try:
                    arg = self.argument(call, fn, expr.id, offset)
                except LookupError:
                    return out, False
                sub, c = self.keys(arg, cmod, cmod.enclosing(call), seen)
                out, closed = out | sub, closed and c
            return out, closed
        values = self.assigned(fn, expr.id)
        if not values:
            return set(), False
        out, closed = set(), True
        for v in values:
            sub, c = self.keys(v, mod, fn, seen)
            out, closed = out | sub, closed and c
        for node in ast.walk(fn):  # ctx["key"] = ..., ctx.update(key=...)
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) \
                            and t.value.id == expr.id:
                        if isinstance(t.slice, ast.Constant) and isinstance(t.slice.value,
                                                                            str):
                            out.add(t.slice.value)
                        else:
                            closed = False
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id == expr.id \
                    and node.func.attr in ("update", "setdefault", "__setitem__"):
                if node.func.attr == "update":
                    for arg in node.args:
                        sub, c = self.keys(arg, mod, fn, seen)
                        out, closed = out | sub, closed and c
                    for kw in node.keywords:
                        if kw.arg is None:
                            closed = False
                        else:
                            out.add(kw.arg)
                else:
                    first = node.args[0] if node.args else None
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        out.add(first.value)
                    else:
                        closed = False
        return out, closed

    # ---- every construction ---------------------------------------------------------------
    def is_ctor(self, mod: Module, call: ast.Call) -> bool:
        f = call.func
        if isinstance(f, ast.Name):
            return f.id in mod.ctors
        return isinstance(f, ast.Attribute) and f.attr == "Event" and \
            isinstance(f.value, ast.Name) and f.value.id in mod.events_modules

    def sites(self) -> Iterator[Site]:
        for mod in self.mods.values():
            for node in ast.walk(mod.tree):
                if not isinstance(node, ast.Call) or not self.is_ctor(mod, node):
                    continue
                fn = mod.enclosing(node)
                args = {k.arg: k.value for k in node.keywords if k.arg}
                name = node.args[2] if len(node.args) > 2 else args.get("name")
                job = node.args[1] if len(node.args) > 1 else args.get("job_id")
                ctx = node.args[3] if len(node.args) > 3 else args.get("context")
                keys, closed = self.keys(ctx, mod, fn)
                pool = (isinstance(job, ast.Name) and job.id in ("POOL_STREAM", "POOL")) or (
                    isinstance(job, ast.Constant) and job.value == POOL)
                yield Site(mod.rel, node.lineno, fn.name if fn else "<module>",
                           self.names(name, mod, fn), keys, closed, pool)


@pytest.fixture(scope="module")
def sites() -> list[Site]:
    return list(Scanner(_load()).sites())


def _written(sites: list[Site]) -> dict[str, list[Site]]:
    out: dict[str, list[Site]] = {}
    for s in sites:
        for n in s.names or ():
            out.setdefault(n, []).append(s)
    return out


def test_every_event_name_written_can_be_told(sites: list[Site]) -> None:
    untold = [f"{s.module}:{s.line} ({s.func})" for s in sites
              if s.names is None and (s.module, s.func) not in PASSTHROUGH]
    assert untold == [], "an Event whose name cannot be told statically: pass a literal " \
                         "(or a parameter every caller gives a literal)"


def test_every_event_name_written_is_catalogued(sites: list[Site]) -> None:
    """A name rsad writes that the catalogue lacks fails here: add it to
    ``core/events.py`` ``CATALOGUE`` (meaning, keys, writer), then run docgen."""
    missing = sorted(f"{n} ({s.module}:{s.line})" for n, ss in _written(sites).items()
                     for s in ss if n not in CATALOGUE)
    assert missing == [], "event names written but not in core/events.py CATALOGUE"


def test_the_catalogue_names_only_what_is_written_by_whom_and_where(
        sites: list[Site]) -> None:
    written = _written(sites)
    assert sorted(set(CATALOGUE) - set(written)) == [], "catalogued but never written"
    wrong = []
    for name, kind in CATALOGUE.items():
        by = sorted({s.module for s in written.get(name, [])})
        if by != sorted(kind.writers):
            wrong.append(f"{name}: written by {by}, catalogued {sorted(kind.writers)}")
        pools = {s.pool for s in written.get(name, [])}
        if pools != {kind.pool}:
            wrong.append(f"{name}: on the pool stream {sorted(pools)}, catalogued {kind.pool}")
    assert wrong == []


def test_the_catalogue_gives_every_context_key_and_no_other(sites: list[Site]) -> None:
    """Every key a construction may write is catalogued for (one of) its name(s); a
    catalogued key no construction writes is drift, where every construction of the
    name is fully known (``node.debris`` spreads what a teardown reported: not known)."""
    wrong = []
    for s in sites:
        if not s.names:
            continue
        allowed = set().union(*(CATALOGUE[n].keys for n in s.names if n in CATALOGUE))
        extra = sorted(s.keys - allowed)
        if extra:
            wrong.append(f"{s.module}:{s.line} {sorted(s.names)} writes {extra}")
    for name, ss in _written(sites).items():
        if name in CATALOGUE and all(s.closed for s in ss):
            never = sorted(set(CATALOGUE[name].keys) - set().union(*(s.keys for s in ss)))
            if never:
                wrong.append(f"{name}: catalogued keys never written: {never}")
    assert wrong == []


def test_every_pass_through_is_still_there(sites: list[Site]) -> None:
    used = {(s.module, s.func) for s in sites if s.names is None}
    assert used >= PASSTHROUGH, "PASSTHROUGH names a function that builds no Event now"


def test_the_scan_follows_names_passed_through_calls(sites: list[Site]) -> None:
    """The scan finds the names given through a parameter, not only literals: if it did
    not, a new pass-through would be missed (the names it must find are catalogued)."""
    by_site: dict[tuple[str, str], set[str]] = {}
    for s in sites:
        by_site.setdefault((s.module, s.func), set()).update(s.names or ())
    assert {"unlock.retry", "unlock.owed"} <= by_site[("core/machine.py", "_issue_unlock")]
    assert {"job.dependency-held", "job.dependency-released"} <= \
        by_site[("daemon/dephold.py", "_event")]
    assert {"compute.mounted", "compute.unmounted"} <= by_site[("daemon/service.py",
                                                                "mount_noted")]
    keys = {(s.module, s.func): s.keys for s in sites if s.closed}
    assert keys[("daemon/native.py", "setup")] == {"uid", "gid", "pool", "size", "alias"}


def test_a_catalogue_entry_is_one_line_each() -> None:
    for name, kind in CATALOGUE.items():
        assert re.fullmatch(r"[a-z]+\.[a-z]+(-[a-z]+)*", name), name
        assert kind.meaning and "\n" not in kind.meaning and "|" not in kind.meaning, name
        assert all("|" not in v and "\n" not in v for v in kind.keys.values()), name
    assert reference().count("\n| `") == len(CATALOGUE)


#: words in the docs that look like event names and are not: files (a job's ``job.env``
#: and ``job.out``, rsa.db, rsa.yaml, ...) and Lua functions (``rsa.submit``)
NOT_EVENTS = re.compile(r"\.(py|md|yaml|yml|lua|json|conf|log|db|service|socket|svg|txt|env|"
                        r"out)$|^rsa\.(submit|modify|configure|config|jobs)$")


def test_every_event_name_the_docs_quote_is_catalogued() -> None:
    prefixes = sorted({n.split(".")[0] for n in CATALOGUE})
    pat = re.compile(r"`((?:" + "|".join(prefixes) + r")\.[a-z]+(?:-[a-z]+)*)`")
    wrong = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for m in pat.finditer(page.read_text(encoding="utf-8")):
            if m.group(1) not in CATALOGUE and not NOT_EVENTS.search(m.group(1)):
                wrong.append(f"{page.relative_to(ROOT)}: `{m.group(1)}`")
    assert wrong == [], "the docs quote event names rsad does not write"
