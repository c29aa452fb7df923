"""Expand an experiment's ``sweep:`` into points, each a validated :class:`Experiment`."""

from __future__ import annotations

import copy
import difflib
import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path

import pydantic

from spartan_py.config.validate import ConfigError, describe_error, models_in, validate_model
from spartan_py.config.yaml_marks import MarkedYaml, load_yaml
from spartan_py.runner.schema import Experiment


@dataclass(frozen=True)
class Point:
    """One point of a sweep: its id (stable across runs), a readable label and its config."""

    id: str
    label: str
    values: dict
    experiment: Experiment


def _field_paths(model: type[pydantic.BaseModel], prefix: str = "") -> list[str]:
    paths = []
    for name, info in model.model_fields.items():
        if name in ("sweep", "executor"):  # not point fields: how a run is spread, not what it computes
            continue
        if prefix + name not in paths:
            paths.append(prefix + name)
        for nested in models_in(info.annotation):  # through unions and the workload kinds' sections
            paths += [p for p in _field_paths(nested, prefix + name + ".") if p not in paths]
    return paths


def point_label(point: Experiment, keys: list[str]) -> str:
    """A short readable label: the swept fields' validated values, file names without folders."""
    parts = []
    for key in keys:
        value = point
        for part in key.split("."):
            value = getattr(value, part)
        if value is None:
            continue
        if isinstance(value, pydantic.BaseModel) and hasattr(value, "short_label"):
            parts.append(value.short_label())
            continue
        if isinstance(value, str) and "/" in value:
            value = Path(value).name
        if key.startswith("workload."):  # as the workload's section reads it (conv layers: a network by its name)
            value = point.workload.value_label(key.removeprefix("workload."), value)
        parts.append(f"{key.removeprefix('workload.')}={value}")
    return ", ".join(parts)


def _set(data: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        data = data.setdefault(part, {})
    data[last] = value


def load_experiment(path: str | Path) -> tuple[Experiment, list[Point]]:
    """Read, validate and expand an experiment file; ConfigError lists every problem at once."""
    path = Path(path)
    marked = load_yaml(path)
    context = {"base": path.parent}
    problems = unknown_swept_fields(marked)  # every problem in one pass: these beside the model's
    try:
        experiment = validate_model(Experiment, marked, context=context)
    except ConfigError as exc:
        raise ConfigError(exc.problems + problems, path=marked.path) from None
    if problems:
        raise ConfigError(problems, path=marked.path)
    return experiment, expand(experiment, marked, context)


def unknown_swept_fields(marked: MarkedYaml) -> list[str]:
    """A problem line for each key of ``sweep.grid``, ``sweep.zip`` or a case that is not a
    field path of an experiment (read from the raw YAML, so it is found beside any other)."""
    sweep = marked.data.get("sweep") if isinstance(marked.data, dict) else None
    if not isinstance(sweep, dict):
        return []
    swept: list[tuple[tuple, str, str]] = [
        (("sweep", kind, key), f"sweep.{kind}", key)
        for kind in ("grid", "zip")
        if isinstance(sweep.get(kind), dict)
        for key in sweep[kind]
    ]
    cases = sweep.get("cases")
    swept += [
        (("sweep", "cases", number, key), f"sweep.cases[{number}]", key)
        for number, case in enumerate(cases if isinstance(cases, list) else [])
        if isinstance(case, dict)
        for key in case
    ]
    known = _field_paths(Experiment)
    problems = []
    for where, what, key in swept:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            hint = (
                f"; did you mean `{close[0]}`?" if close else f"; expected a field path such as {', '.join(known[:6])}"
            )
            problems.append(f"line {marked.line_of(where)}, {what}: unknown field `{key}`{hint}")
    return problems


def expand(experiment: Experiment, marked: MarkedYaml, context: dict) -> list[Point]:
    """The points of an experiment: grid x zip, each validated as an experiment of its own."""
    sweep = experiment.sweep
    grid = sweep.grid if sweep else {}
    zipped = sweep.zip if sweep else {}
    cases = sweep.cases if sweep else []
    problems = unknown_swept_fields(marked)
    if problems:
        raise ConfigError(problems, path=marked.path)
    base = {k: v for k, v in copy.deepcopy(marked.data).items() if k != "sweep"}
    zip_rows = list(zip(*zipped.values())) if zipped else [()]
    grid_rows = list(itertools.product(*grid.values())) if grid else [()]
    points, seen = [], set()
    for grid_values, zip_values, (number, case) in itertools.product(grid_rows, zip_rows, enumerate(cases or [{}])):
        values = dict(zip(grid, grid_values)) | dict(zip(zipped, zip_values)) | case
        data = copy.deepcopy(base)
        for key, value in values.items():
            _set(data, key, value)
        try:
            point = Experiment.model_validate(data, context=context)
        except pydantic.ValidationError as exc:
            for error in exc.errors():
                field_path = ".".join(str(p) for p in error["loc"])
                if field_path in grid or field_path in zipped:
                    root: tuple = ("sweep", "grid" if field_path in grid else "zip", field_path)
                elif field_path in case:
                    root = ("sweep", "cases", number, field_path)
                else:
                    problems.append(f"point {values}: " + describe_error(error, Experiment, marked, ()))
                    continue
                message = describe_error(error, Experiment, marked, ())
                line = marked.line_of(root)
                problems.append(f"line {line}, sweep value {values[field_path]!r}: " + message.split(", ", 1)[-1])
            continue
        key = json.dumps(point.model_dump(mode="json", exclude={"executor"}), sort_keys=True)
        digest = hashlib.sha1(key.encode()).hexdigest()[:10]
        if digest in seen:
            continue
        seen.add(digest)
        label = point_label(point, list(values)) or experiment.name
        points.append(Point(digest, label, values, point))
    if problems:
        raise ConfigError(sorted(set(problems)), path=marked.path)
    return points
