"""YAML with line marks and pydantic validation that reports every problem with its line."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, PositiveInt

from spartan_py.config import load_model
from spartan_py.config.validate import ConfigError
from spartan_py.config.yaml_marks import parse_yaml
from spartan_py.errors import InputError


class Inner(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    rows: PositiveInt
    name: str = "x"


class Outer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    backend: str
    repeats: PositiveInt = 3
    inner: Inner


def test_lines_of_keys_and_items():
    marked = parse_yaml("a: 1\nb:\n  c: [1, 2]\n  d:\n    - x\n    - y\n")
    assert marked.lines[("a",)] == 1
    assert marked.lines[("b", "c")] == 3
    assert marked.lines[("b", "d", 1)] == 6
    assert marked.line_of(("b", "d", 1, "missing")) == 6


def test_every_problem_reported_with_line_and_suggestion(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("backend: cpu\nrepeets: 2\ninner:\n  rows: -1\n  nmae: y\n")
    with pytest.raises(ConfigError) as info:
        load_model(Outer, path)
    problems = info.value.problems
    assert len(problems) == 3
    text = str(info.value)
    assert str(path) in text
    assert "line 2, unknown field `repeets`; did you mean `repeats`?" in text
    assert "line 4, field `inner.rows`: Input should be greater than 0 (got -1)" in text
    assert "line 5, unknown field `inner.nmae`; did you mean `name`?" in text


def test_missing_field_wrong_type_empty_and_syntax(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("repeats: many\ninner: {rows: 2}\n")
    with pytest.raises(ConfigError) as info:
        load_model(Outer, path)
    assert any("missing field `backend`" in p for p in info.value.problems)
    assert any(p.startswith("line 1, field `repeats`") for p in info.value.problems)
    path.write_text("  \n")
    with pytest.raises(InputError, match="empty"):
        load_model(Outer, path)
    path.write_text("backend: [cpu\n")
    with pytest.raises(InputError, match=r"c.yaml:2: not valid YAML"):
        load_model(Outer, path)
    path.write_text("- just\n- a list\n")
    with pytest.raises(InputError, match="expected a YAML mapping"):
        load_model(Outer, path)
    with pytest.raises(InputError, match="not found"):
        load_model(Outer, tmp_path / "nope.yaml")


def test_unsafe_yaml_refused(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("backend: !!python/object/apply:os.system ['true']\ninner: {rows: 1}\n")
    with pytest.raises(InputError, match="not valid YAML"):
        load_model(Outer, path)
