"""Configuration files: YAML read safely with line marks, validated by pydantic models."""

from spartan_py.config.validate import load_model, validate_model
from spartan_py.config.yaml_marks import MarkedYaml, load_yaml

__all__ = ["MarkedYaml", "load_yaml", "load_model", "validate_model"]
