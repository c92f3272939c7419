"""Reading YAML with the line of every key: the one reader of the configuration and the
simulator's scenarios.

Owns :class:`Doc` (the plain data, the line of every key path and which paths are
lists), :func:`parse_yaml` (PyYAML's safe loader walked node by node: duplicate keys,
non-string keys and recursive aliases become located issues, tags other than the standard
ones and syntax errors one :class:`~rsa_scheduler.errors.ConfigErrors`; ``5:00`` stays
text, as Slurm means it) and the words every message uses (:func:`key_text`,
:func:`got`, :func:`suggest`). Must not import the rest of the configuration.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any, Final

import yaml

from rsa_scheduler.errors import ConfigErrors, ConfigIssue

#: a key's place in a document: mapping keys and list indexes from the top
KeyPath = tuple[str | int, ...]

_COLLECTION_TAGS: Final = frozenset({"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"})


class Doc:
    """A parsed YAML document: data plus the line of every key path."""

    def __init__(self, file: str, data: Any, lines: dict[KeyPath, int], lists: set[KeyPath]):
        self.file = file
        self.data = data
        self.lines = lines
        self.lists = lists  # key paths whose value is a list (replaces the default wholesale)


def parse_yaml(text: str, file: str, *, keys_as_text: bool = False,
               later_key_wins: bool = False) -> tuple[Doc, list[ConfigIssue]]:
    """YAML → (Doc, issues). Syntax errors raise; duplicate/non-string keys are issues
    (``keys_as_text``: a scalar key such as a job id ``10`` is taken as its text;
    ``later_key_wins``: a repeated key replaces the earlier one, as PyYAML reads it).
    The data of an empty document is None; what the top level must be is the caller's.
    ``lines`` has the line of each mapping key (a list item's: where it starts)."""
    issues: list[ConfigIssue] = []
    lines: dict[KeyPath, int] = {}
    lists: set[KeyPath] = set()
    loader = yaml.SafeLoader(text)
    active: set[int] = set()

    def walk(node: yaml.Node, path: KeyPath) -> Any:
        if path:
            lines[path] = node.start_mark.line + 1
        if not isinstance(node, yaml.ScalarNode) and node.tag not in _COLLECTION_TAGS:
            # Scalars with an unknown tag fail in construct_object; collections are
            # walked here, so refuse their tags (!foo, !!set, !!omap) explicitly, in
            # PyYAML's words too when it has no constructor for the tag either.
            problem = f"unsupported YAML tag {node.tag!r}"
            if node.tag not in yaml.SafeLoader.yaml_constructors:
                problem = (f"could not determine a constructor for the tag {node.tag!r} "
                           f"({problem}: write plain YAML)")
            raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark)
        if id(node) in active:
            issues.append(ConfigIssue(file, key_text(path), "recursive YAML alias",
                                      lines.get(path)))
            return None
        if isinstance(node, yaml.ScalarNode):
            # YAML 1.1 reads 5:00 as the base-60 integer 300; keep it as text so it
            # means what Slurm means by MM:SS.
            if node.tag.endswith((":int", ":float")) and ":" in node.value:
                return node.value
            return loader.construct_object(node, deep=True)
        active.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                lists.add(path)
                return [walk(child, (*path, i)) for i, child in enumerate(node.value)]
            assert isinstance(node, yaml.MappingNode)
            own = {id(k) for k, _ in node.value}
            loader.flatten_mapping(node)  # YAML merge keys (<<) put merged pairs first
            out: dict[str, Any] = {}
            merged: set[str] = set()
            for key_node, value_node in node.value:
                key = loader.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                if keys_as_text and isinstance(key_node, yaml.ScalarNode) \
                        and not isinstance(key, str):
                    key = str(key)
                if not isinstance(key, str):
                    issues.append(
                        ConfigIssue(file, key_text(path), f"key {key!r} is not a string", line)
                    )
                    continue
                if key in out and key not in merged and not later_key_wins:
                    issues.append(ConfigIssue(file, key_text((*path, key)), "duplicate key", line))
                    continue
                merged.discard(key)  # an explicit key overrides a merged one
                if id(key_node) not in own:
                    merged.add(key)
                out[key] = walk(value_node, (*path, key))
                lines[(*path, key)] = line  # the key's line, also for a block value
            return out
        finally:
            active.discard(id(node))

    try:
        node = loader.get_single_node()
        data = None if node is None else walk(node, ())
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        problem = e.problem or e.context or "syntax error"
        line = mark.line + 1 if mark is not None else None
        raise ConfigErrors([ConfigIssue(file, "", f"invalid YAML: {problem}", line)]) from e
    except yaml.YAMLError as e:
        raise ConfigErrors([ConfigIssue(file, "", f"invalid YAML: {e}")]) from e
    except RecursionError as e:
        reason = "invalid YAML: nested too deeply"
        raise ConfigErrors([ConfigIssue(file, "", reason)]) from e
    finally:
        loader.dispose()
    return Doc(file, data, lines, lists), issues


def key_text(path: KeyPath) -> str:
    """``("pool", "nodes", 0, "names")`` → ``pool.nodes[0].names``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def got(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"number {value}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def suggest(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""
