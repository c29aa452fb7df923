"""Safe YAML loading that remembers the line of every key and item.

``yaml.safe_load`` gives plain data; the node tree from ``yaml.compose`` (also safe) gives
where each value came from. :class:`MarkedYaml` keeps both, so a validation error on the
field ``sweep.grid.layers`` can name the line it was written on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from spartan_py.errors import InputError

Location = tuple  # a path of keys (str) and list indices (int)


@dataclass(frozen=True)
class MarkedYaml:
    """Parsed YAML ``data`` and the 1-based line of each key path in ``lines``."""

    data: Any
    path: Path | None
    lines: dict[Location, int] = field(default_factory=dict)

    def line_of(self, location: Location) -> int | None:
        """Line of ``location`` or of its nearest parent that has one."""
        location = tuple(location)
        while location:
            if location in self.lines:
                return self.lines[location]
            location = location[:-1]
        return self.lines.get((), None)


def _walk(node: yaml.Node, location: Location, lines: dict) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            child = (*location, key_node.value)
            lines[child] = key_node.start_mark.line + 1
            _walk(value_node, child, lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            child = (*location, index)
            lines[child] = item.start_mark.line + 1
            _walk(item, child, lines)


_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML was built with it (ten times faster), else the Python one;
both construct only plain YAML types and give every node its line."""


def parse_yaml(text: str, path: Path | None = None) -> MarkedYaml:
    """Parse YAML text safely, with the line of every key; InputError on a syntax error."""
    try:
        root = yaml.compose(text, Loader=_SAFE_LOADER)
        data = None if root is None else _SAFE_LOADER(text).construct_document(root)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise InputError(f"not valid YAML: {exc.problem or exc}", path=path, line=line) from None
    except yaml.YAMLError as exc:
        raise InputError(f"not valid YAML: {exc}", path=path) from None
    lines: dict[Location, int] = {}
    if root is not None:
        lines[()] = root.start_mark.line + 1
        _walk(root, (), lines)
    return MarkedYaml(data, path, lines)


def load_yaml(path: str | Path) -> MarkedYaml:
    """Read and parse a YAML file; InputError naming the file if it is missing or empty."""
    path = Path(path)
    if not path.is_file():
        raise InputError("file not found", path=path)
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        raise InputError("the file is empty; expected a YAML mapping", path=path)
    return parse_yaml(text, path)
