"""Reading files a user hands quantkit (recipes, a checkpoint's config.json) without trusting them.

A hostile or broken file must cost a one-line error with where it is wrong, never a traceback, a
RecursionError, gigabytes of memory or minutes:

- YAML aliases are references: a few hundred bytes of nested aliases expand to billions of values
  (an alias bomb) in anything that walks the data as a tree (a line index, pydantic, json.dumps);
  an alias used inside its own anchor is a cycle. `load_yaml` visits each node once (memoized by
  identity) and refuses both, and deep nesting, with file:line before anything walks the tree.
- JSON nested deeper than Python's recursion limit raises RecursionError in `json.loads`, and
  JSON nested a few hundred levels parses but raises it later, in whatever walks it (transformers
  and vLLM read a checkpoint's config.json; pydantic, json.dumps and the secret masking walk a
  result). `loads_json` refuses nesting deeper than MAX_JSON_DEPTH (real configs and results nest
  under ten levels) and `read_json` turns that, bad JSON and an unreadable file into one UsageError
  line. Every JSON file a user hands quantkit is read through them.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from .errors import UsageError

MAX_YAML_VALUES = 100_000  # values after alias expansion: far above any real recipe (a few hundred)
MAX_YAML_DEPTH = 64  # nesting levels, aliases expanded: PyYAML's composer recurses once per level
MAX_JSON_DEPTH = 64  # nesting levels: a Hugging Face config or a quantkit result nests under ten


# ----------------------------------------------------------------------------------------------
# YAML


class Lines(dict):
    """Key path -> 1-based line. A value that aliases repeat is indexed once, under the path where
    it was first walked; a path inside a repetition is looked up there (`redirect`), so an error
    in an aliased value names the line where the bad key is written."""

    def __init__(self) -> None:
        super().__init__()
        self.redirect: dict[tuple, tuple] = {}  # the path of a repeated value -> its first path

    def get(self, key, default=None):  # type: ignore[override]
        key = tuple(key)
        for end in range(len(key), -1, -1):
            prefix = key[:end]
            if end < len(key) and prefix in self.redirect:
                return self.get(self.redirect[prefix] + key[end:], default)
            if prefix in self:
                return self[prefix]
        return default


def _yaml_error(exc: yaml.YAMLError, source: str) -> UsageError:
    mark = getattr(exc, "problem_mark", None)
    line = f":{mark.line + 1}" if mark else ""
    return UsageError(f"{source}{line}: not valid YAML ({getattr(exc, 'problem', exc)})")


def compose_yaml(text: str, source: str) -> yaml.Node | None:
    """The YAML node graph of `text`; refused with file:line when it nests too deeply, holds a
    recursive alias, or expands beyond MAX_YAML_VALUES values."""
    # The event stream first: PyYAML's parser is a state machine (no recursion, no expansion), so
    # the depth as written is checked before the recursive composer sees it, and the anchors and
    # aliases are located for the messages (nodes do not keep them).
    anchors: dict[tuple[int, int], str] = {}  # where an anchored collection starts -> its anchor
    aliases: list[tuple[str, yaml.Mark]] = []
    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_YAML_DEPTH:
                    raise UsageError(f"{source}:{event.start_mark.line + 1}: YAML nested deeper than "
                                     f"{MAX_YAML_DEPTH} levels; a recipe is a few levels of key: value")
                if event.anchor:
                    anchors[(event.start_mark.line, event.start_mark.column)] = event.anchor
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
            elif isinstance(event, yaml.AliasEvent):
                aliases.append((event.anchor, event.start_mark))
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, source) from None
    if root is not None and aliases:
        _check_expansion(root, source, anchors, aliases)
    return root


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_expansion(root: yaml.Node, source: str, anchors: dict[tuple[int, int], str],
                     aliases: list[tuple[str, yaml.Mark]]) -> None:
    """Every node once, iteratively (an alias chain is deep when expanded): its size and depth with
    aliases expanded, memoized by identity; a node met again while still open is a cycle."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            open_.discard(key)
            # named at the smallest value that is too big: the line where the aliases multiply
            if size[key] > MAX_YAML_VALUES and all(size[id(k)] <= MAX_YAML_VALUES for k in kids):
                raise UsageError(f"{source}:{node.start_mark.line + 1}: YAML aliases expand this value to more than "
                                 f"{MAX_YAML_VALUES:,} values (an alias bomb?); a recipe holds plain values: "
                                 "write them out, or use fewer nested aliases")
            if depth[key] > MAX_YAML_DEPTH and all(depth[id(k)] <= MAX_YAML_DEPTH for k in kids):
                raise UsageError(f"{source}:{node.start_mark.line + 1}: YAML aliases nest this value deeper than "
                                 f"{MAX_YAML_DEPTH} levels; write the values out, or use fewer nested aliases")
            continue
        if key in size:
            continue
        if key in open_:
            start = (node.start_mark.line, node.start_mark.column)
            anchor = anchors.get(start, "?")
            inside = [m for name, m in aliases if name == anchor and start <= (m.line, m.column)
                      and (m.line, m.column) < (node.end_mark.line, node.end_mark.column)]
            line = (inside[0] if inside else node.start_mark).line + 1
            raise UsageError(f"{source}:{line}: the YAML alias *{anchor} is used inside its own anchor &{anchor} "
                             "(a recursive alias); a recipe holds plain values: write them out")
        open_.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in reversed(_children(node)) if id(k) not in size)


def line_index(root: yaml.Node | None) -> Lines:
    """Each key path of a composed (checked) document -> the line it starts on. A node that aliases
    repeat is walked once, under its first path: a repeated value needs no lines of its own."""
    index = Lines()
    first: dict[int, tuple] = {}  # node identity -> the path it was walked under

    def walk(node: yaml.Node, path: tuple) -> None:  # depth bounded by compose_yaml's check
        if id(node) in first:
            index.redirect[path] = first[id(node)]
            return
        first[id(node)] = path
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):  # a complex key: the constructor refuses it
                    continue
                key_path = path + (key_node.value,)
                index[key_path] = key_node.start_mark.line + 1
                walk(value_node, key_path)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                index[path + (i,)] = item.start_mark.line + 1
                walk(item, path + (i,))

    if root is not None:
        walk(root, ())
    return index


def load_yaml(text: str, source: str) -> tuple[Any, Lines]:
    """YAML text -> (data, line index), parsed once; bad YAML, deep nesting, recursive aliases and
    alias bombs are one UsageError line with file:line."""
    root = compose_yaml(text, source)
    if root is None:
        return None, Lines()
    try:
        # the constructor shares an aliased value (one object): the data stays as small as the text
        data = yaml.SafeLoader("").construct_document(root)
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, source) from None
    return data, line_index(root)


# ----------------------------------------------------------------------------------------------
# JSON


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")


def json_depth(data: Any) -> int:
    """How deeply `data` nests (a scalar 0, [] 1), walked without recursion."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return deepest


def loads_json(text: str | bytes, source: str, what: str = "a JSON file", fix: str = "fix it",
               strict: bool = False) -> Any:
    """JSON text -> data; bad JSON and nesting deeper than MAX_JSON_DEPTH are one line. `strict`:
    NaN and Infinity, which Python writes and JSON lacks, are bad JSON too (a result file)."""
    try:
        data = json.loads(text, parse_constant=_not_json) if strict else json.loads(text)
    except json.JSONDecodeError as exc:
        at = "" if re.search(r":\d+$", source) else f" at line {exc.lineno}"  # a JSONL line's source names it
        raise UsageError(f"{source} is not valid JSON ({exc.msg}{at}); {fix}") from None
    except ValueError as exc:  # strict: a NaN or Infinity
        raise UsageError(f"{source} is not valid JSON ({exc}); {fix}") from None
    except RecursionError:
        # json's decoder recurses once per level: a thousand [ or { exhaust Python's stack
        raise UsageError(f"{source} is not {what}: its JSON nests deeper than Python can read "
                         f"(about {sys.getrecursionlimit()} levels); {fix}") from None
    if json_depth(data) > MAX_JSON_DEPTH:
        raise UsageError(f"{source} is not {what}: its JSON nests deeper than {MAX_JSON_DEPTH} levels "
                         f"(real ones nest under ten); {fix}")
    return data


def read_json(path: str | Path, what: str = "a JSON file", fix: str = "fix it",
              expect: type | None = None, strict: bool = False) -> Any:
    """A JSON file's data, or one UsageError line: unreadable, not JSON, nested too deeply, or (with
    `expect`, e.g. dict) not that type at the top."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}; {fix}") from None
    data = loads_json(text, str(path), what, fix, strict)
    if expect is not None and not isinstance(data, expect):
        kind = {dict: "an object ({...})", list: "a list ([...])"}.get(expect, expect.__name__)
        raise UsageError(f"{path} is not {what}: its JSON is a {type(data).__name__}, not {kind}; {fix}")
    return data


def read_config(folder: str | Path) -> dict[str, Any]:
    """A checkpoint folder's config.json as a dict, or one line saying why it is not a valid one."""
    return read_json(Path(folder) / "config.json", "a valid Hugging Face config",
                     "fix it, or re-download or re-convert the checkpoint", expect=dict)
