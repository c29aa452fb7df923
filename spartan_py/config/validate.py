"""Validate parsed YAML with a pydantic v2 model and report every problem in one pass.

Each problem names the line (from :class:`~spartan_py.config.yaml_marks.MarkedYaml`), the
field path, what was expected, and for an unknown key the closest known one.
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import pydantic

from spartan_py.config.yaml_marks import MarkedYaml, load_yaml
from spartan_py.errors import InputError

Model = TypeVar("Model", bound=pydantic.BaseModel)


class ConfigError(InputError):
    """One or more invalid fields in a configuration file; ``problems`` lists them."""

    def __init__(self, problems: list[str], *, path: Path | None):
        self.problems = problems
        heading = f"{len(problems)} problem{'s' if len(problems) != 1 else ''} in the configuration"
        super().__init__(heading + ":\n  " + "\n  ".join(problems), path=path)


def models_in(annotation) -> list[type[pydantic.BaseModel]]:
    """BaseModel classes reachable from a type annotation (through Optional, list, dict...);
    a model that stands for several (the workload kinds' sections) lists them in ``variants()``."""
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        variants = getattr(annotation, "variants", None)
        return list(variants()) if callable(variants) else [annotation]
    found = []
    for arg in typing.get_args(annotation):
        found += models_in(arg)
    return found


def _known_keys(model: type[pydantic.BaseModel], location: tuple) -> list[str]:
    """Field names (and aliases) of the model that holds the key at ``location``."""
    candidates = [model]
    for part in location[:-1]:
        if isinstance(part, int):
            continue
        following = []
        for candidate in candidates:
            info = candidate.model_fields.get(part)
            if info is not None:
                following += models_in(info.annotation)
        candidates = following or candidates
    keys: dict[str, None] = {}  # ordered and each once (a union's models share fields)
    for candidate in candidates:
        for name, info in candidate.model_fields.items():
            keys[info.alias or name] = None
    return list(keys)


def _expected_values(text: str) -> list[str]:
    """The quoted choices of a pydantic "expected" text (``'a', 'b' or 'c'``)."""
    return re.findall(r"'([^']*)'", text)


def _did_you_mean(given, choices: list[str]) -> str:
    """``; did you mean 'x'?`` for the choice closest to ``given``, or nothing."""
    close = difflib.get_close_matches(str(given), choices, n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else ""


def _data_location(location: tuple, data) -> tuple:
    """``location`` without the parts pydantic adds that are not keys of the YAML (a tagged
    union's tag, a function validator's name); the last part (perhaps a missing key) stays."""
    kept = []
    for i, part in enumerate(location):
        last = i == len(location) - 1
        if isinstance(part, str) and part.startswith("function-"):
            continue
        if not last and isinstance(data, dict) and part not in data:
            continue
        kept.append(part)
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            data = None
    return tuple(kept)


def describe_error(error: Mapping[str, Any], model: type[pydantic.BaseModel], marked: MarkedYaml, root: tuple) -> str:
    """One problem as a line: where (line, field path), what was wrong, what was expected."""
    data = marked.data
    for part in root:
        data = data[part] if isinstance(data, dict) else None
    location = _data_location(tuple(error["loc"]), data)
    full = (*root, *location)
    line = marked.line_of(full)
    field = ".".join(str(part) for part in full) or "(top level)"
    where = f"line {line}, " if line is not None else ""
    kind = error["type"]
    if kind == "extra_forbidden":
        known = _known_keys(model, location)
        message = f"{where}unknown field `{field}`"
        close = difflib.get_close_matches(str(location[-1]), known, n=1, cutoff=0.6)
        if close:
            message += f"; did you mean `{close[0]}`?"
        else:
            message += f"; expected one of: {', '.join(sorted(known))}"
        return message
    if kind == "missing":
        return f"{where}missing field `{field}`"
    if kind == "literal_error":
        choices = _expected_values(error.get("ctx", {}).get("expected", ""))
        given = error.get("input")
        return f"{where}field `{field}`: {given!r} is not one of {', '.join(choices)}{_did_you_mean(given, choices)}"
    if kind == "union_tag_invalid":  # a tagged union (the workload kinds): the tag names the model
        ctx = error.get("ctx", {})
        choices = _expected_values(ctx.get("expected_tags", ""))
        given = ctx.get("tag")
        return (
            f"{where}field `{field}`: kind {given!r} is not one of {', '.join(choices)}{_did_you_mean(given, choices)}"
        )
    message = plain_message(error)
    given = error.get("input")
    if kind.startswith(("value_error", "assertion_error")) or isinstance(given, (dict, list)):
        return f"{where}field `{field}`: {message}"  # our validators' messages say what they got
    shown = repr(given)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{where}field `{field}`: {message} (got {shown})"


def plain_message(error: Mapping[str, Any]) -> str:
    """pydantic's message without its ``Value error, `` / ``Assertion failed, `` prefixes."""
    message = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    return message


def validate_model(model: type[Model], marked: MarkedYaml, *, root: tuple = (), context: dict | None = None) -> Model:
    """``model`` built from ``marked.data`` (at key path ``root``), or ConfigError listing every problem.

    ``context`` reaches the model's validators (e.g. the folder relative paths start from)."""
    data = marked.data
    for part in root:
        data = data[part]
    if not isinstance(data, dict):
        line = marked.line_of(root)
        raise InputError(f"expected a YAML mapping, got {type(data).__name__}", path=marked.path, line=line)
    try:
        return model.model_validate(data, context=context)
    except pydantic.ValidationError as exc:
        problems = [describe_error(error, model, marked, root) for error in exc.errors()]
        raise ConfigError(problems, path=marked.path) from None


def load_model(model: type[Model], path: str | Path) -> Model:
    """Read a YAML file and validate it with ``model`` (see :func:`validate_model`)."""
    return validate_model(model, load_yaml(path))
