"""The one way the scripts of ``benchmarks/`` measure and record, after Triton's
``triton.testing`` (``do_bench``: warm-up, then the median of repeats; ``perf_report``: a
declared sweep turned into a table and a plot).

* :class:`Sweep` declares the points: named parameters, each with its values, crossed in the
  order given (the first varies slowest).
* :func:`run_sweep` calls a measuring function once per point and returns a pandas table,
  one row per point: the point's parameters, then what the function returned
  (:func:`sweep_rows`: the same rows as dicts, for points that measure different columns).
* A timer times one point: :class:`CudaTimer` with CUDA events after warm-up (L2 flushed
  before each repeat, :class:`spartan_py.timing.GpuTimer`), :class:`CpuTimer` on the host
  clock. Both give the median of repeats (:meth:`~CpuTimer.median`) and variants by turns
  (:meth:`~CpuTimer.by_turns`: each round times every variant, the order reversed every
  other round, so that drift lands on all of them; :func:`difference` is then taken round by
  round). :func:`take_turns` does the same for work that times itself (an engine's
  ``run_device``).
* :func:`write_result` writes one JSON file, atomically, that names the benchmark, the
  device, the GPUs' clocks, the date, the commit and the command line (paths relative to the
  repository); :func:`plot` draws a table's columns when asked.

The harness lives in ``benchmarks/``, not in the package: it times speed checks and records
how a script of this folder was started; experiments measured through ``spartan run`` record
their own environment (``spartan_py.runner.store``).
"""

from __future__ import annotations

import itertools
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from spartan_py.engines.shared.cuda import device_name
from spartan_py.result_files import write_result as write_record
from spartan_py.runner.gpu_facts import gpu_facts
from spartan_py.runner.store import cpu_name, package_commit
from spartan_py.timing import (
    FLUSH_BYTES,
    GpuTimer,
    paired_difference,
    time_cpu,
    time_interleaved,
    time_interleaved_cpu,
    turn_order,
)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "graph-challenge"


def log(message: str) -> None:
    """A progress line on stderr (stdout is left to each script's summary)."""
    print(message, file=sys.stderr, flush=True)


def commit() -> str:
    """The checkout's commit (:func:`spartan_py.runner.store.package_commit`), with ``+dirty``
    when tracked files have uncommitted changes; ``unknown`` without git history.

    Where the tree has no git history (a copy sent to a GPU machine), ``$SPARTAN_COMMIT``
    names it: set it from the checkout the copy was made from.
    """
    if os.environ.get("SPARTAN_COMMIT"):
        return os.environ["SPARTAN_COMMIT"]
    head = package_commit()
    if head is None:
        return "unknown"
    try:
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        dirty = ""
    return head + ("+dirty" if dirty else "")


def _relative(arg: str) -> str:
    """``arg`` relative to the repository when it is a path inside it."""
    path = Path(arg)
    if path.is_absolute() and path.resolve().is_relative_to(ROOT):
        return str(path.resolve().relative_to(ROOT)) or "."
    return arg


def command_line(argv: Sequence[str] | None = None) -> str:
    """How this benchmark was started, run from the repository root: a script of
    ``benchmarks/`` as ``python -m benchmarks.NAME``, paths inside the repository relative."""
    script, *args = sys.argv if argv is None else argv
    here = Path(script).resolve()
    if here.parent == ROOT / "benchmarks":
        words = ["python", "-m", f"benchmarks.{here.stem}"]
    else:
        words = ["python", _relative(script)]
    return " ".join(shlex.quote(w) for w in [*words, *map(_relative, args)])


@dataclass(frozen=True)
class Sweep:
    """Named parameters, each with its values; the points are their cross product, the
    first parameter varying slowest (``Sweep({"layer": (...), "density": (...)})``)."""

    params: Mapping[str, Sequence[Any]]

    def __post_init__(self) -> None:
        empty = [name for name, values in self.params.items() if len(values) == 0]
        if not self.params or empty:
            raise ValueError(f"a sweep needs at least one parameter, each with values; empty: {empty}")

    def points(self) -> list[dict[str, Any]]:
        """Every point as ``{name: value}``, in sweep order."""
        names = list(self.params)
        return [dict(zip(names, values)) for values in itertools.product(*self.params.values())]


def sweep_rows(sweep: Sweep, measure: Callable[..., Mapping[str, Any]], *, progress: bool = True) -> list[dict]:
    """One row per point of ``sweep``: its parameters, then ``measure(**point)``'s columns
    (where a column shares a parameter's name, the measured value is kept). ``measure``
    checks its results before timing them and raises where they are wrong. Rows keep the
    columns their point measured (a column some points lack stays absent, not NaN)."""
    rows = []
    for point in sweep.points():
        rows.append({**point, **measure(**point)})
        if progress:
            log(f"{', '.join(f'{k}={v}' for k, v in point.items())}: done")
    return rows


def run_sweep(sweep: Sweep, measure: Callable[..., Mapping[str, Any]], *, progress: bool = True) -> pd.DataFrame:
    """:func:`sweep_rows` as a pandas table, one row per point."""
    return pd.DataFrame(sweep_rows(sweep, measure, progress=progress))


class _Timer:
    """What both timers share: variants by turns through their ``_interleaved`` function."""

    _interleaved: Callable[..., dict[str, list[float]]]

    def by_turns(
        self,
        cases: Mapping[str, Callable[[int], Any]],
        *,
        rounds: int = 10,
        calls: int = 1,
        warmup: int = 2,
        flush_bytes: int = 0,
    ) -> dict[str, list[float]]:
        """Per-call microseconds of each case (``work(i)`` queues its ``i``-th call), one value
        per round, the cases in turn and their order reversed every other round; on the GPU
        ``flush_bytes`` of scratch are rewritten before each timed batch."""
        return type(self)._interleaved(dict(cases), rounds=rounds, calls=calls, warmup=warmup, flush_bytes=flush_bytes)


def _interleaved_cpu(cases: dict, *, rounds: int, calls: int, warmup: int, flush_bytes: int) -> dict[str, list[float]]:
    return time_interleaved_cpu(cases, rounds=rounds, calls=calls, warmup=warmup)  # no L2 to flush on the host


class CpuTimer(_Timer):
    """Times work on the host clock (:func:`spartan_py.timing.time_cpu`): the harness's
    logic without a GPU, and the timer of CPU benchmarks."""

    _interleaved = staticmethod(_interleaved_cpu)

    def device(self) -> str:
        """What runs the work: ``cpu: <model>``."""
        return f"cpu: {cpu_name()}"

    def median(self, work: Callable[[], Any], *, repeats: int = 5, warmup: int = 1, flush: bool = True) -> dict:
        """{'median_us', 'p10_us', 'p90_us', 'repeats'} of ``work()`` (``flush`` has no
        meaning on the host and is accepted for the GPU timer's signature)."""
        return time_cpu(work, repeats=repeats, warmup=warmup)


class CudaTimer(_Timer):
    """Times work on the current CUDA stream with events: :class:`spartan_py.timing.GpuTimer`
    (warm-up, at least ``min_warmup_ms`` of it, then repeats with L2 flushed before each) and
    :func:`spartan_py.timing.time_interleaved` (variants by turns)."""

    _interleaved = staticmethod(time_interleaved)

    def __init__(self, *, min_warmup_ms: float = 0.0, flush_bytes: int = FLUSH_BYTES):
        self._timer = GpuTimer(flush_bytes, min_warmup_ms=min_warmup_ms)

    def device(self) -> str:
        """The current GPU's name."""
        import cupy  # optional dependency: only a GPU run gets here

        return device_name(cupy)

    def median(self, work: Callable[[], Any], *, repeats: int = 20, warmup: int = 3, flush: bool = True) -> dict:
        """{'median_us', 'p10_us', 'p90_us', 'repeats'} of ``work()`` between CUDA events."""
        return self._timer(work, repeats=repeats, warmup=warmup, flush=flush)


Timer = CpuTimer | CudaTimer


def take_turns(cases: Mapping[str, Callable[[], float]], *, rounds: int) -> dict[str, list[float]]:
    """Each case's own measurement (``case()`` returns its time), one a round, the cases in
    turn and their order reversed every other round: for work that times itself."""
    names = list(cases)
    times: dict[str, list[float]] = {name: [] for name in names}
    for _, name in turn_order(names, rounds):
        times[name].append(float(cases[name]()))
    return times


def medians(times: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """The median of each case's rounds."""
    return {name: float(np.median(values)) for name, values in times.items()}


def difference(times: Mapping[str, Sequence[float]], name: str, baseline: str) -> dict:
    """{'median', 'p10', 'p90'} of ``name``'s time minus ``baseline``'s, round by round."""
    return paired_difference(list(times[name]), list(times[baseline]))


def clocks() -> list[dict]:
    """Each GPU's clocks and power limit as the driver reports them (empty without one)."""
    return gpu_facts()["gpus"]


def write_result(
    name: str,
    device: str,
    payload: Mapping[str, Any],
    out_dir: Path | None = None,
    *,
    table: pd.DataFrame | None = None,
    table_key: str = "points",
) -> Path:
    """Write ``payload`` (and ``table``'s rows under ``table_key``) with its provenance (the
    GPUs' clocks besides :func:`spartan_py.result_files.write_result`'s) to
    ``<out_dir>/<name>-<date>.json`` atomically; returns the path."""
    payload = {"clocks": clocks(), **payload}
    if table is not None:
        payload[table_key] = table.to_dict("records")
    return write_record(name, device, payload, out_dir or RESULTS, commit=commit(), command=command_line())


def plot(table: pd.DataFrame, x: str, y: Sequence[str], path: Path, *, by: str | None = None, log_x: bool = False):
    """Draw ``y`` columns against ``x`` (one line per value of ``by``, if given) to ``path``
    (PNG or SVG by its suffix); returns the path."""
    import matplotlib  # optional: only a script asked for a plot needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    groups = table.groupby(by, sort=False) if by else [(None, table)]
    for key, part in groups:
        for column in y:
            label = column if key is None else f"{column}, {by}={key[0] if isinstance(key, tuple) else key}"
            ax.plot(part[x], part[column], marker="o", label=label)
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(x)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
