"""The directive grammar's one source (core/grammar.py) and its three ports.

* The generated blocks of rsa_grammar.lua (which job_submit.lua loads) and of the SPANK
  plugin's C are current (the CI check: run ``make grammar`` when this fails), and a change
  of the data makes them stale.
* Every value kind has a parser in every port; every accepted value of every CHOICE
  directive is accepted by all three and comes back as itself.
* Python, Lua and C give the same answer on every shared vector: the whole script
  through Python and job_submit.lua, each directive line's value through Python and C.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest

from rsa_scheduler import grammargen
from rsa_scheduler.core.directive_values import PARSERS
from rsa_scheduler.core.directives import (
    DirectiveErrors,
    DirectiveSpec,
    parse_directives_bytes,
)
from rsa_scheduler.core.grammar import BY_NAME, GRAMMAR, Kind
from tests.conftest import DATA
from tests.unit.test_job_submit_lua import PLUGIN, TARGET, Result, _no_lua, run_many
from tests.unit.test_spank import SRC, build, check_values, directive_lines, python_value

__all__ = ["build"]  # the plugin built by test_spank's module fixture (-Werror)

VECTORS = DATA / "directives"
NAMES = sorted(p.stem for p in VECTORS.glob("*.sh"))


# --- generation ---------------------------------------------------------------------------


def test_generated_blocks_are_current() -> None:
    assert grammargen.stale() == [], "run: make grammar"


def _copy_plugins(tmp_path: Path) -> Path:
    root = tmp_path / "slurm_plugins"
    for fname in grammargen.BLOCKS:
        (root / fname).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(grammargen.PLUGINS / fname, root / fname)
    return root


def test_a_changed_grammar_makes_the_ports_stale_until_regenerated(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _copy_plugins(tmp_path)
    tier = BY_NAME["TIER"]
    changed = tuple(dataclasses.replace(d, choices=(*d.choices, "nvme")) if d is tier else d
                    for d in GRAMMAR)
    monkeypatch.setattr(grammargen, "GRAMMAR", changed)
    assert grammargen.stale(root) == ["rsa_grammar.lua", "spank/rsa_grammar.c"]
    assert grammargen.main(["--check", "--root", str(root)]) == 1
    assert grammargen.main(["--root", str(root)]) == 0
    assert grammargen.stale(root) == []
    assert '"nvme" }' in (root / "rsa_grammar.lua").read_text()
    assert '"nvme", NULL}' in (root / "spank/rsa_grammar.c").read_text()
    # only the generated block changed: the hand-written code around it is kept
    before = (grammargen.PLUGINS / "rsa_grammar.lua").read_text().splitlines()
    after = (root / "rsa_grammar.lua").read_text().splitlines()
    assert len(after) == len(before)
    assert [a for a, b in zip(before, after, strict=True) if a != b] == [
        line for line in before if line.startswith("    { \"TIER\"")]


def test_missing_markers_are_an_error(tmp_path: Path) -> None:
    root = _copy_plugins(tmp_path)
    lua = root / "rsa_grammar.lua"
    lua.write_text(lua.read_text().replace("-- END GENERATED: grammar", "-- (end)"))
    with pytest.raises(ValueError, match="'grammar' markers missing"):
        grammargen.stale(root)


def test_generated_text_is_plain_ascii_only() -> None:
    with pytest.raises(ValueError, match="printable ASCII"):
        grammargen.lua_string("tab\there")
    assert grammargen.lua_string('say "a\\b"') == '"say \\"a\\\\b\\""'


# --- every kind and every choice in every port ----------------------------------------------


def test_every_value_kind_has_a_parser_in_every_port() -> None:
    header = (SRC / "rsa_grammar.h").read_text()
    lua = (PLUGIN.parent / "rsa_directives.lua").read_text()
    lua_parsers = re.search(r"local PARSERS = \{(.*?)\}", lua, re.S)
    assert lua_parsers is not None
    for kind in Kind:
        assert kind is Kind.CHOICE or kind in PARSERS, kind
        assert re.search(rf"\bRSA_KIND_{kind.name},?\n", header), kind
        assert kind is Kind.CHOICE or f"{kind.value} = " in lua_parsers.group(1), kind


def test_every_choice_is_accepted_by_all_three(build: Path, tmp_path: Path) -> None:
    if not shutil.which(TARGET):
        _no_lua()
    cases = [(d, c) for d in GRAMMAR if d.kind is Kind.CHOICE for c in d.choices]
    c_got = check_values(build, [(d.name, c.upper().encode()) for d, c in cases])
    scripts = []
    for (d, choice), got in zip(cases, c_got, strict=True):
        assert python_value(d.name, choice.upper().encode()) == ("OK", choice)
        assert got == ("OK", choice), (d.name, choice)
        script = tmp_path / f"{d.name}-{choice}.sh"
        script.write_text(f"#!/bin/sh\n#RSA_DATA_IN=/in\n#RSA_{d.name}={choice.upper()}\n")
        scripts.append(script)
    lua = run_many(TARGET, scripts)
    for (d, choice), script in zip(cases, scripts, strict=True):
        spec = DirectiveSpec.from_json({"data_in": "/in", d.json_key: choice})
        res = lua[str(script)]  # (EARLY_START=wait adds a start hold: not compared here)
        assert (res.rc, res.sets, res.msgs) == (0, {"admin_comment": spec.to_admin_comment()}, [])


# --- the shared vectors through the three ports ----------------------------------------------


def _python(data: bytes) -> tuple[str, object]:
    try:
        spec = parse_directives_bytes(data)
    except DirectiveErrors as e:
        return "ERR", [str(err) for err in e.errors]
    return "OK", None if spec.is_empty else spec.to_admin_comment()


def _lua(got: Result) -> tuple[str, object]:
    if got.rc != 0:
        return "ERR", got.msgs
    return "OK", got.sets.get("admin_comment")


def test_three_grammars_agree_on_every_shared_vector(build: Path) -> None:
    if not shutil.which(TARGET):
        _no_lua()
    assert len(NAMES) >= 70
    lua = run_many(TARGET, [VECTORS / f"{n}.sh" for n in NAMES])
    values: list[tuple[str, str, bytes]] = []
    disagree = []
    for name in NAMES:
        data = (VECTORS / f"{name}.sh").read_bytes()
        py, lu = _python(data), _lua(lua[str(VECTORS / f"{name}.sh")])
        if py != lu:
            disagree.append(f"{name}: Python {py} vs Lua {lu}")
        err = VECTORS / f"{name}.err"
        if err.exists() and py != ("ERR", err.read_text(encoding="utf-8").splitlines()):
            disagree.append(f"{name}: Python {py} vs the vector's {err.name}")
        values.extend((name, d, v) for _no, d, v in directive_lines(data))
    c_got = check_values(build, [(d, v) for _n, d, v in values])
    for (name, d, v), c in zip(values, c_got, strict=True):
        py_value = python_value(d, v)
        if c != py_value:
            disagree.append(f"{name} {d}={v!r}: Python {py_value} vs C {c}")
    assert not disagree, "\n".join(disagree)
    assert {d for _n, d, _v in values} == set(BY_NAME)
