"""Generated documentation must match the code it is generated from."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from rsa_scheduler import docgen


def test_generated_docs_are_current() -> None:
    assert docgen.stale() == [], "run: .venv/bin/python -m rsa_scheduler.docgen"


def test_man_pages_are_current_and_groff_reads_them_without_a_warning() -> None:
    from rsa_scheduler import manpages

    assert manpages.stale() == [], "run: .venv/bin/python -m rsa_scheduler.manpages"
    for name in manpages.pages():
        page = manpages.MAN / name
        r = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", str(page)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stderr == "", f"{name}: {r.stderr}"
        shown = subprocess.run(["groff", "-man", "-Tascii", "-P-cbou", str(page)],
                               capture_output=True, text=True, timeout=60).stdout
        assert "NAME" in shown and "SEE ALSO" in shown


def test_a_man_page_escapes_what_roff_would_read_as_requests() -> None:
    from rsa_scheduler.manpages import esc, paragraphs

    assert esc(".TH evil") == "\\&.TH evil"
    assert esc("a\\b --x \u2014") == "a\\eb \\-\\-x \\[u2014]"
    assert paragraphs("first line\nwrapped\n\n  kept:\n    as is") == (
        "first line wrapped\n.PP\n.nf\n  kept:\n    as is\n.fi")


def test_diagrams_cover_every_rsa_state() -> None:
    from rsa_scheduler.core.diagram import diagrams
    from rsa_scheduler.core.states import RsaState

    text = diagrams()
    missing = [s.value for s in RsaState if f": {s.value}\n" not in text]
    assert missing == []


ROOT = Path(__file__).resolve().parents[2]


def _reference_keys() -> tuple[set[str], set[str]]:
    """(every configuration key and section the reference documents, the keys whose value
    is a mapping: ``allocation.price.ram`` names one of their entries)."""
    from rsa_scheduler.config.reference import generate_reference

    rows = re.findall(r"^\| `([^`]+)` \| ([^|]*)\|", generate_reference(), re.M)
    keys = {re.sub(r"\[\d*\]", "", k) for k, _ in rows}
    maps = {re.sub(r"\[\d*\]", "", k) for k, label in rows if label.startswith("mapping")}
    known = {".".join(k.split(".")[:i]) for k in keys for i in range(1, k.count(".") + 2)}
    return known, maps


#: dotted names in the docs that are no configuration keys: the ``slurm`` table of Slurm's
#: Lua API, a module
NOT_KEYS = frozenset({"slurm.log", "slurm.log_info", "slurm.error", "slurm.time_str2mins",
                      "slurm.job_info_to_string", "daemon.munge"})


def _named_keys(text: str, tops: set[str]) -> list[str]:
    """Every ``section.key`` a page names in backticks (a Lua call ``slurm.log(`` and a
    file ``hooks.py`` are not keys)."""
    pat = re.compile(r"`((?:" + "|".join(sorted(tops)) + r")(?:\.[a-z0-9_<>*\[\]]+)+)(.)")
    out = []
    for m in pat.finditer(text):
        name, after = m.group(1), m.group(2)
        if after == "(" or name in NOT_KEYS or \
                re.search(r"\.(py|log|md|lua|json|yaml|conf)$", name):
            continue
        out.append(re.sub(r"\[\d*\]", "", name))
    return out


def test_every_configuration_key_the_docs_name_exists() -> None:
    known, maps = _reference_keys()
    tops = {k.split(".")[0] for k in known}
    wrong = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for name in _named_keys(page.read_text(), tops):
            parts = name.split(".")
            ok = any(
                all(p == k or p.startswith("<") or "*" in p for p, k in
                    zip(parts, key.split("."), strict=True))
                for key in known if key.count(".") == name.count("."))
            # an entry of a mapping (allocation.price.ram, filesystem.backend.ssd)
            ok = ok or ".".join(parts[:-1]) in maps
            if not ok:
                wrong.append(f"{page.relative_to(ROOT)}: `{name}`")
    assert wrong == [], "the docs name configuration keys the schema lacks"


def _shipped_docs() -> set[str]:
    """The pages the Debian package installs (debian/rules, dh_installdocs), relative to
    docs/ (README.md as itself)."""
    rules = (ROOT / "debian" / "rules").read_text()
    block = rules.split("override_dh_installdocs:", 1)[1].split("\n\n", 1)[0]
    words = block.replace("\\\n", " ").split()
    shipped: set[str] = set()
    for word in words:
        for path in sorted(ROOT.glob(word)) if not word.startswith("-") else ():
            files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
            for f in files:
                rel = f.relative_to(ROOT)
                shipped.add(str(rel.relative_to("docs")) if rel.parts[0] == "docs"
                            else str(rel))
    return shipped


def test_the_installed_docs_ship_every_page_they_name() -> None:
    shipped = _shipped_docs()
    assert {"operator-guide.md", "user-guide.md", "README.md"} <= shipped
    missing = []
    for page in sorted(p for p in shipped if p.endswith(".md")):
        source = ROOT / page if page == "README.md" else ROOT / "docs" / page
        text = source.read_text()
        named = set(re.findall(r"\bdocs/([a-z0-9_/-]+\.md)", text))
        base = Path(page).parent
        for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
            named.add(str((base / link).as_posix()).removeprefix("docs/"))
        missing += [f"{page} names {n}" for n in sorted(named) if n not in shipped]
    assert missing == [], "install them (debian/rules, dh_installdocs) or drop the reference"


def test_the_payload_table_names_every_field_of_every_payload() -> None:
    """docs/architecture.md, "Actions and their ids": each payload class's row (``+``:
    the ``user`` and ``nodes`` every action on nodes carries) names all its fields; a field
    added to a payload without its row is drift."""
    import dataclasses

    from rsa_scheduler.core.actions import PAYLOADS

    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("| kind | payload | fields |", 1)[1].split("\n\n", 1)[0]
    missing = []
    for cls in sorted(set(PAYLOADS.values()), key=lambda c: c.__name__):
        rows = [r for r in table.splitlines() if f"`{cls.__name__}`" in r]
        assert len(rows) == 1, f"{cls.__name__}: {len(rows)} rows in the payload table"
        named = set(re.findall(r"`(\w+)`", rows[0].split("|")[3]))
        if rows[0].split("|")[3].strip().startswith("+"):
            named |= {"user", "nodes"}
        missing += [f"{cls.__name__}.{f.name}" for f in dataclasses.fields(cls)
                    if f.name not in named]
    assert missing == [], "docs/architecture.md's payload table lacks these fields"


def test_the_architecture_page_names_every_group_of_states() -> None:
    """Every named group of ``core/states.py`` (a frozenset of rsa-states or job-states, a
    set of commands) is listed in docs/architecture.md's "One vocabulary"."""
    from rsa_scheduler.core import states

    text = (ROOT / "docs" / "architecture.md").read_text()
    vocabulary = text.split("**One vocabulary.**", 1)[1].split("\n\n", 1)[0]
    groups = [name for name, value in vars(states).items()
              if name.isupper() and isinstance(value, frozenset)
              and value and all(isinstance(v, (states.RsaState, states.JobState,
                                                states.Trigger)) for v in value)]
    assert groups
    assert [g for g in groups if f"`{g}`" not in vocabulary] == []


def _commands() -> dict[str, set[str]]:
    """``rsa`` and ``rsad`` as click sees them: "rsa admin drain" -> its options."""
    import click

    from rsa_scheduler.cli.main import cli
    from rsa_scheduler.daemon.main import rsad

    tree: dict[str, set[str]] = {}

    def walk(cmd: click.Command, path: str) -> None:
        tree[path] = {o for p in cmd.params if isinstance(p, click.Option)
                      for o in [*p.opts, *p.secondary_opts]} | {"--help", "-h"}
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None
                walk(sub, f"{path} {name}")

    walk(cli, "rsa")
    walk(rsad, "rsad")
    return tree


def test_every_command_and_option_the_docs_quote_exists() -> None:
    """A command quoted inline (`rsa events --job ID`) names a sub-command and options the
    CLI has: a renamed or moved option (`rsa sim --tiers`, which is `rsa sim replay`'s)
    is drift. ``rsa sim FILE`` is ``rsa sim run FILE``."""
    tree = _commands()
    wrong = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for m in re.finditer(r"`((?:rsa|rsad) [^`\n]*[^`\n:])`", text):  # not a prefix
            words = m.group(1).split()
            path = words[0]
            rest = words[1:]
            while rest and f"{path} {rest[0]}" in tree:
                path = f"{path} {rest.pop(0)}"
            if path == "rsa sim" and rest and not rest[0].startswith("-"):
                path = "rsa sim run"
            if path == "rsa" and rest and re.fullmatch(r"[a-z]+(-[a-z]+)*", rest[0]):
                wrong.append(f"{page.relative_to(ROOT)}: `{m.group(1)}`: no command "
                             f"{rest[0]!r}")
            for word in rest:
                opt = re.match(r"(--?[A-Za-z][\w-]*)", word)
                if opt and opt.group(1) not in tree[path] | tree[words[0]]:
                    wrong.append(f"{page.relative_to(ROOT)}: `{m.group(1)}`: {path} has "
                                 f"no {opt.group(1)}")
    assert wrong == [], "the docs quote commands or options the CLI lacks"


def test_the_job_submit_page_lists_every_setting_of_job_submit_lua() -> None:
    """docs/job_submit.md's settings table (step 2 of "Deploying on a cluster") names
    every key of job_submit.lua's ``CONFIG`` with its default as the file has it."""
    lua = (ROOT / "slurm_plugins" / "job_submit.lua").read_text()
    block = lua.split("local CONFIG = {", 1)[1].split("\n}", 1)[0]
    settings = dict(re.findall(r"^  (\w+) = (.+?),?$", block, re.M))
    assert "lockin_qos" in settings
    page = (ROOT / "docs" / "job_submit.md").read_text()
    rows = dict(re.findall(r"^   \| `(\w+)` \| `([^`]*)` \|", page, re.M))
    assert {k: rows.get(k) for k in settings} == settings


def test_the_module_map_names_every_module() -> None:
    """docs/architecture.md's "Module map": a module of a package is named in its
    package's row (``service.py`` in ``daemon/``'s; ``scripts/``'s own in ``staging/``'s),
    one of ``rsa_scheduler/`` itself in the first cell of a row."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("| package / module | owns |", 1)[1].split("\n\n", 1)[0]
    rows = {r.split("|")[1].strip(): r for r in table.splitlines() if r.startswith("| `")}
    package = ROOT / "rsa_scheduler"
    missing = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if rel.name == "__init__.py":
            continue
        if len(rel.parts) == 1:
            named = any(f"`{rel.name}`" in first for first in rows)
        else:
            row = rows.get(f"`{rel.parts[0]}/`", "")
            named = f"`{rel.name}`" in row and all(f"`{d}/`" in row for d in rel.parts[1:-1])
        if not named:
            missing.append(str(rel))
    assert missing == [], "docs/architecture.md's module map lacks these modules"


#: the modules over 600 lines, still to be split (docs/architecture.md, "Module map")
OVERSIZED = frozenset({"core/allocator.py", "core/scheduler.py", "daemon/data.py",
                       "daemon/nodeside.py", "daemon/service.py", "fs/moosefs.py",
                       "node/mounts.py"})


def test_modules_and_lua_files_are_under_600_lines_but_the_listed() -> None:
    package = ROOT / "rsa_scheduler"
    over = {str(p.relative_to(package)) for p in package.rglob("*.py")
            if len(p.read_text(encoding="utf-8").splitlines()) > 600}
    assert sorted(over) == sorted(OVERSIZED), "split it, or (shrunk) drop it from OVERSIZED"
    lua = [str(p) for p in (ROOT / "slurm_plugins").rglob("*.lua")
           if len(p.read_text(encoding="utf-8").splitlines()) > 600]
    assert lua == []
