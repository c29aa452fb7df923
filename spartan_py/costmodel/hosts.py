"""Described hosts (``sim/hosts/<name>.yaml``): what the machine a GPU sits in adds to its times.

A GPU's launches reach it through a host: the latency the GPU sees between two queued commands
and the round trip of a host synchronisation belong to the host (its CPU, its virtualisation,
its driver), not to the GPU, and differ between machines of one GPU name. The cost model's
fitted launch costs include the latencies of the host the fit was measured on
(``Machine.calibration_host``); a prediction for another host moves them by the difference
(:func:`spartan_py.costmodel.model.predict`). Figures come from ``python -m
benchmarks.host_latency`` run on that host, apart from any validation point.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, model_validator

from spartan_py.config import load_model
from spartan_py.errors import InputError
from spartan_py.resources import data_folder


class Host(BaseModel):
    """One described host."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str
    launch_us: PositiveFloat = Field(description="an empty kernel's time between two CUDA events, queued behind work")
    sync_us: PositiveFloat = Field(
        description="what a host synchronisation adds: the GPU idles until the woken host queues the next command"
    )
    sources: dict[str, str] = Field(description="where launch_us and sync_us came from (the result file)")

    @model_validator(mode="after")
    def _figures_have_sources(self):
        missing = [name for name in ("launch_us", "sync_us") if name not in self.sources]
        if missing:
            raise ValueError(f"figures without a source in `sources`: {', '.join(missing)}")
        return self


def hosts_folder() -> Path:
    """The folder of host files (``sim/hosts``)."""
    return data_folder("sim") / "hosts"


def host_names() -> list[str]:
    """Names of the described hosts."""
    return sorted(path.stem for path in hosts_folder().glob("*.yaml"))


def load_host(name: str) -> Host:
    """A host by name (``sim/hosts/<name>.yaml``), validated (errors name the file, line and field)."""
    path = hosts_folder() / f"{name}.yaml"
    if not path.is_file():
        raise InputError(f"unknown host {name!r}; known: {', '.join(host_names()) or 'none'}")
    host = load_model(Host, path)
    if host.name != name:
        raise InputError(
            f"the file describes {host.name!r}, not {name!r}; its `name` must match the file name", path=path
        )
    return host
