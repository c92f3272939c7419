"""Writes the directive grammar's data into the Lua and C ports, from ``core/grammar.py``.

Owns the generated blocks of slurm_plugins/rsa_grammar.lua (the data job_submit.lua loads
beside it) and of the SPANK plugin's C (slurm_plugins/spank/): the limits, the fixed
messages and the directive tables (names, value kinds, choices, examples, admin_comment
keys, option names and ``--help`` text). Each block sits between a ``BEGIN GENERATED:
NAME`` and an ``END GENERATED: NAME`` comment line in its file and is replaced whole; the
code around it stays hand-written (the plugin's Makefile builds the same C sources;
rsa_grammar.lua is only its header and the block).

``python -m rsa_scheduler.grammargen`` (``make grammar``) rewrites stale blocks;
``--check`` only lists them and exits 1 (tests/unit/test_grammar.py fails the same way).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from rsa_scheduler.core import grammar
from rsa_scheduler.core.grammar import GRAMMAR, LIMITS, MESSAGES, Kind

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = ROOT / "slurm_plugins"
NOTE = "generated from rsa_scheduler/core/grammar.py by `make grammar`; do not edit"


# --- literals ---------------------------------------------------------------------------

def _escape(text: str) -> str:
    """Body of a double-quoted string literal that Lua 5.1 and C read the same way."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif not 0x20 <= ord(ch) <= 0x7E:  # escapes differ: C \\x is greedy, Lua \\ddd decimal
            raise ValueError(f"grammar text must be printable ASCII, got {text!r}")
        else:
            out.append(ch)
    return "".join(out)


def _chunks(text: str, width: int) -> list[str]:
    """``text`` cut into pieces of at most ``width`` characters, at spaces when possible."""
    pieces: list[str] = []
    while len(text) > width:
        cut = text.rfind(" ", 0, width) + 1 or width
        pieces.append(text[:cut])
        text = text[cut:]
    return [*pieces, text]


def lua_string(text: str, indent: str = "  ", width: int = 76) -> str:
    """A Lua literal for ``text``, split with ``..`` so no line gets long."""
    return f"\n{indent}.. ".join(f'"{_escape(p)}"' for p in _chunks(text, width))


def c_string(text: str, indent: str, width: int = 76) -> str:
    """A C literal for ``text``, split into adjacent literals so no line gets long."""
    return f"\n{indent}".join(f'"{_escape(p)}"' for p in _chunks(text, width))


# --- the blocks ---------------------------------------------------------------------------

def lua_grammar() -> str:
    """rsa_grammar.lua: limits, fixed messages and the directive table, as the table the
    file returns to job_submit.lua's loader."""
    out = [f"-- {NOTE}", "return {"]
    out.append(f'  PREFIX = "{_escape(grammar.PREFIX)}",')
    out.append(f'  ADMIN_COMMENT_PREFIX = "{_escape(grammar.ADMIN_COMMENT_PREFIX)}",')
    out.extend(f"  {name} = {value}," for name, value in LIMITS.items())
    out.extend(f"  {name} = {lua_string(text, indent='    ', width=74)},"
               for name, text in MESSAGES.items())
    out.append("  -- in declaration order: { name, value kind, example for an empty value,")
    out.append("  --   admin_comment key[, choices] }")
    out.append("  GRAMMAR = {")
    for d in GRAMMAR:
        fields = [d.name, d.kind.value, d.example, d.admin_key]
        row = ", ".join(f'"{_escape(f)}"' for f in fields)
        if d.kind is Kind.CHOICE:
            row += ", { " + ", ".join(f'"{_escape(c)}"' for c in d.choices) + " }"
        out.append(f"    {{ {row} }},")
    out.append("  },")
    out.append("}")
    return "\n".join(out)


_C_LIMITS: Mapping[str, tuple[str, str]] = {  # grammar name -> C macro, literal suffix
    "PATH_MAX": ("PATH_MAX_", ""),
    "NAME_MAX": ("NAME_MAX_", ""),
    "MAX_NODES": ("MAX_NODES", "ULL"),
    "MAX_CAPACITY": ("MAX_CAPACITY", ".0"),
    "MAX_RESET": ("MAX_RESET", ".0"),
}


def c_tables() -> str:
    """rsa_grammar.c: limits, choices, the directive table, the fixed option message."""
    out = [f"/* {NOTE} */"]
    for name, (macro, suffix) in _C_LIMITS.items():
        out.append(f"#define {macro} {LIMITS[name]}{suffix}")
    both = " and ".join(grammar.BY_NAME[n].option for n in grammar.EXCLUSIVE)
    literal = c_string(grammar.exclusive_message(both), "\t").replace("\n", " \\\n")
    out.append(f"#define RSA_MSG_EXCLUSIVE_OPTIONS \\\n\t{literal}")
    out.append("")
    for d in GRAMMAR:
        if d.kind is Kind.CHOICE:
            values = ", ".join(f'"{_escape(c)}"' for c in d.choices)
            out.append(f"static const char *const CHOICES_{d.name}[] = {{{values}, NULL}};")
    out.append("")
    out.append("const struct rsa_directive_info rsa_directives[RSA_NDIRECTIVES] = {")
    for d in GRAMMAR:
        choices = f"CHOICES_{d.name}" if d.kind is Kind.CHOICE else "NULL"
        out.append(f'\t{{"{d.name}", "{d.option[2:]}", "{_escape(d.value_word)}",')
        out.append(f"\t {c_string(d.usage, chr(9) + ' ')},")
        out.append(f'\t "{_escape(d.example)}", RSA_KIND_{d.kind.name}, {choices}}},')
    out.append("};")
    return "\n".join(out)


def c_directives() -> str:
    """rsa_grammar.h: one enum constant per directive, in declaration order."""
    names = "".join(f"\tRSA_{d.name},\n" for d in GRAMMAR)
    return f"/* {NOTE} */\nenum rsa_directive {{\n{names}\tRSA_NDIRECTIVES\n}};"


def c_limits() -> str:
    """rsa_text.h: the bounds the text functions share with the other ports."""
    return (f"/* {NOTE} */\n#define RSA_MAX_LINE {grammar.MAX_LINE}\n"
            f"#define RSA_QUOTE_MAX {grammar.QUOTE_MAX}")


#: file (under slurm_plugins/) -> (comment start, comment end) and block name -> generator
BLOCKS: Mapping[str, tuple[tuple[str, str], Mapping[str, Callable[[], str]]]] = {
    "rsa_grammar.lua": (("-- ", ""), {"grammar": lua_grammar}),
    "spank/rsa_grammar.h": (("/* ", " */"), {"directives": c_directives}),
    "spank/rsa_grammar.c": (("/* ", " */"), {"tables": c_tables}),
    "spank/rsa_text.h": (("/* ", " */"), {"limits": c_limits}),
}


def render(text: str, comment: tuple[str, str], blocks: Mapping[str, Callable[[], str]]) -> str:
    """``text`` with each named block replaced by fresh output; missing markers: ValueError."""
    start, end = (re.escape(c) for c in comment)
    for name, gen in blocks.items():
        pattern = re.compile(
            rf"(^{start}BEGIN GENERATED: {re.escape(name)}{end}\n).*?"
            rf"(^{start}END GENERATED: {re.escape(name)}{end}$)", re.S | re.M)
        m = pattern.search(text)
        if m is None:
            raise ValueError(f"generated block {name!r} markers missing")
        body = gen().rstrip("\n") + "\n"
        text = text[:m.start()] + m.group(1) + body + m.group(2) + text[m.end():]
    return text


def stale(root: Path = PLUGINS) -> list[str]:
    """The files (relative to slurm_plugins/) whose generated blocks are out of date."""
    out = []
    for fname, (comment, blocks) in BLOCKS.items():
        text = (root / fname).read_text(encoding="utf-8")
        if render(text, comment, blocks) != text:
            out.append(fname)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rsa_scheduler.grammargen",
                                 description=__doc__.split("\n", 1)[0])
    ap.add_argument("--check", action="store_true",
                    help="only list the stale files; exit 1 if there are any")
    ap.add_argument("--root", type=Path, default=PLUGINS, help="the slurm_plugins directory")
    args = ap.parse_args(argv)
    if args.check:
        files = stale(args.root)
        for fname in files:
            sys.stdout.write(f"stale: {args.root / fname} (run: make grammar)\n")
        return 1 if files else 0
    for fname, (comment, blocks) in BLOCKS.items():
        path = args.root / fname
        text = path.read_text(encoding="utf-8")
        new = render(text, comment, blocks)
        if new != text:
            path.write_text(new, encoding="utf-8")
            sys.stdout.write(f"updated {path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
