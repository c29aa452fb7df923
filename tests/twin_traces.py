"""The CPU twins' kernel traces for a fixed set of experiment points, run through ``spartan run``
on any checkout, compared record by record and field by field.

The twins (``gpu-twin``, ``gpu-merged-twin``, the conv workload's simulated launches) write
the trace the GPU kernels would write; a restructuring must leave those traces identical
(issue 72). This module runs each case's experiment in a subprocess on a given tree (its
``spartan_py`` first on the path, its own ``sim/``), reads every point's
``points/<id>.trace.csv`` as text and compares it with another tree's or with the committed
golden (``tests/data/twin-traces.csv.gz``; ``tests/test_twin_traces.py``).

Normalized before comparing, and nothing else: the ``run`` column, which holds the point's
id (a hash of its whole resolved configuration, data paths included, so it differs between
machines); it is checked to be the point's own id and then replaced by the point's label.
No trace family or field was renamed by issue 72 (docs/architecture.md, "One name per kernel").

Usage (from a checkout's root)::

    python -m tests.twin_traces --against /tmp/old25          # this tree against another tree
    python -m tests.twin_traces --write-golden tests/data/twin-traces.csv.gz --tree /tmp/old25
    python -m tests.twin_traces                               # this tree against the golden
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from spartan_py.files import atomic_write_bytes
from tests.conftest import DATA, ROOT

GOLDEN = ROOT / "tests" / "data" / "twin-traces.csv.gz"
#: Columns the golden adds in front of the trace's own.
KEYS = ["case", "point"]


@dataclass(frozen=True)
class Case:
    """One experiment: its fixed part (``{data}`` stands for the Graph Challenge data folder)
    and its points, each a label and the values it sets (dotted keys, as a sweep's)."""

    base: dict
    points: dict[str, dict] = field(default_factory=dict)
    needs_data: bool = False


_TWINS = {"mode": "simulated", "machines": ["h100-sxm"]}
_OFFICIAL = {
    "network": "{data}/neuron1024",
    "layers": 120,
    "inputs": "{data}/sparse-images-1024-first1200.tsv.gz",
    "rows": 1200,
    "truth": "{data}/neuron1024-l120-categories-first1200.tsv",
}
_CONV = {
    "kind": "conv_layers",
    "layers": ["alexnet/conv2", "resnet18/conv2_x"],
    "batch": 2,
    "cluster_px": 2.0,
}


def _conv(step: str, tile: int | list[int], density: float, **more) -> dict:
    """A conv point's values: the step, the tile, the maps' density and any other field."""
    return {"workload.step": step, "tile": tile, "workload.density": density, **more}


CASES: dict[str, Case] = {
    # The official 1024 x 120 network on the first 1200 rows: both twins, and each engine
    # option away from its default once.
    "gc-official": Case(
        {"name": "twins-gc-official", "workload": _OFFICIAL, **_TWINS},
        {
            "rows": {"backend": "gpu-twin"},
            "rows monitor off": {"backend": "gpu-twin", "monitor": "off"},
            "rows monitor software": {"backend": "gpu-twin", "monitor": "software"},
            "rows monitor sampled": {"backend": "gpu-twin", "monitor": "sampled"},
            "rows rows_per_tile 12": {"backend": "gpu-twin", "rows_per_tile": 12},
            "rows input_counts false": {"backend": "gpu-twin", "input_counts": False},
            "rows compact_every 8": {"backend": "gpu-twin", "compact_every": 8},
            "merged": {"backend": "gpu-merged-twin"},
            "merged monitor off": {"backend": "gpu-merged-twin", "monitor": "off"},
            "merged monitor sampled": {"backend": "gpu-merged-twin", "monitor": "sampled"},
            "merged rows_per_tile 8": {"backend": "gpu-merged-twin", "rows_per_tile": 8},
            "merged chain_rows 0": {"backend": "gpu-merged-twin", "chain_rows": 0},
            "merged chain_rows 1": {"backend": "gpu-merged-twin", "chain_rows": 1},
            "merged chain_warps 1": {"backend": "gpu-merged-twin", "chain_warps": 1},
            "merged chain_warps 2": {"backend": "gpu-merged-twin", "chain_warps": 2},
            "merged input_counts false": {"backend": "gpu-merged-twin", "input_counts": False},
            "merged compact_every 16": {"backend": "gpu-merged-twin", "compact_every": 16},
        },
        needs_data=True,
    ),
    # A generated 4096 x 120 network over generated rows (no data needed), the rows kernel
    # on a network the merged kernel cannot merge, and the widest networks each kernel takes.
    "gc-generated": Case(
        {
            "name": "twins-gc-generated",
            "workload": {"network": "generated:4096", "layers": 120, "inputs": "generated:1000"},
            **_TWINS,
        },
        {
            "rows": {"backend": "gpu-twin"},
            "merged": {"backend": "gpu-merged-twin"},
            "merged monitor off": {"backend": "gpu-merged-twin", "monitor": "off"},
            "rows unmergeable 1024": {
                "backend": "gpu-twin",
                "workload.network": "generated-unmergeable:1024",
                "workload.inputs": "generated:1000",
            },
            # wide networks, 4 layers (the merged kernel's first launch too wide for its tiles)
            **{
                f"{kernel} {neurons} x 4": {
                    "backend": backend,
                    "workload.network": f"generated:{neurons}",
                    "workload.layers": 4,
                    "workload.inputs": "generated:200",
                }
                for kernel, backend, neurons in (("rows", "gpu-twin", 16384), ("merged", "gpu-merged-twin", 65536))
            },
        },
    ),
    # The conv workload's layers in simulated mode: every candidate's launches (trace: all)
    # and the policy's choice, forward and training step, two tiles, both precisions.
    "conv": Case(
        {
            "name": "twins-conv",
            "workload": _CONV,
            "monitor": "fused",
            "policy": "adaptive",
            "trace": "all",
            **_TWINS,
        },
        {
            "forward tile 16 density 0.2": _conv("forward", 16, 0.2),
            "forward tile 128x32 density 0.05": _conv("forward", [128, 32], 0.05),
            "forward tile 32 tf32 chosen": _conv("forward", 32, 0.1, precision="tf32", trace="chosen"),
            "forward software monitor": _conv("forward", 32, 0.1, monitor="software"),
            "training tile 16 density 0.2": _conv("training", 16, 0.2),
            "training tile 128x32 density 0.05": _conv("training", [128, 32], 0.05),
            "training tile 32 tf32 chosen": _conv("training", 32, 0.05, precision="tf32", trace="chosen"),
            # a training step's trace holds the chosen launches: each sparse kernel chosen once
            **{
                f"training tile 32 {kernel}": _conv("training", 32, 0.05, policy=kernel)
                for kernel in ("tile_sparse", "row_compact", "csr")
            },
        },
    ),
}


def _fill(value, data: Path):
    """``value`` with ``{data}`` replaced by the data folder, in every string it holds."""
    if isinstance(value, str):
        return value.replace("{data}", str(data))
    if isinstance(value, dict):
        return {key: _fill(item, data) for key, item in value.items()}
    if isinstance(value, list):
        return [_fill(item, data) for item in value]
    return value


def experiment(name: str, data: Path = DATA) -> dict:
    """Case ``name`` as an experiment file's contents: its points as a sweep of cases."""
    case = CASES[name]
    return _fill({**case.base, "sweep": {"cases": list(case.points.values())}}, data)


def _label_of(values: dict, points: dict[str, dict]) -> str:
    """The label of the case's point that set ``values`` (a point file's ``values``)."""
    matches = [label for label, sets in points.items() if json.loads(json.dumps(sets)) == values]
    if len(matches) != 1:
        raise AssertionError(f"point values {values} match {matches or 'no'} points of the case")
    return matches[0]


def run_case(tree: Path, name: str, out: Path, data: Path = DATA) -> pd.DataFrame:
    """Run case ``name`` with the ``spartan_py`` of checkout ``tree`` into ``out``; its points'
    traces as text, one frame (:data:`KEYS` first, ``run`` normalized to the point's label)."""
    out.mkdir(parents=True, exist_ok=True)
    spec = out / f"{name}.yaml"
    spec.write_text(json.dumps(experiment(name, data), indent=1))  # JSON is YAML
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
    if tree.resolve() != ROOT:  # leave another tree as it is (Numba caches beside the sources)
        env["NUMBA_CACHE_DIR"] = str(out / "numba-cache")
    command = [sys.executable, "-m", "spartan_py", "run", str(spec), "--out", str(out / name), "--quiet"]
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} (in {tree}) failed:\n{done.stdout}\n{done.stderr}")
    frames = []
    for path in sorted((out / name / "points").glob("*.json")):
        record = json.loads(path.read_text())
        if record.get("status") != "ok":
            raise RuntimeError(f"{path}: point {record.get('status')}: {record.get('error')}")
        label = _label_of(record["values"], CASES[name].points)
        trace = pd.read_csv(
            path.parent / record["trace"], comment="#", dtype=str, keep_default_na=False, na_filter=False
        )
        if not (trace["run"] == path.stem).all():
            raise AssertionError(f"{path.parent / record['trace']}: run column is not the point id {path.stem}")
        frames.append(trace.assign(run=label, case=name, point=label))
    if len(frames) != len(CASES[name].points):
        raise AssertionError(f"case {name}: {len(frames)} points ran of {len(CASES[name].points)}")
    frame = pd.concat(frames, ignore_index=True)
    return frame[KEYS + [c for c in frame.columns if c not in KEYS]]


def run_cases(tree: Path, names: list[str], out: Path, data: Path = DATA) -> pd.DataFrame:
    """:func:`run_case` for each of ``names``, one frame."""
    return pd.concat([run_case(tree, name, out, data) for name in names], ignore_index=True)


def read_golden(path: Path = GOLDEN) -> pd.DataFrame:
    """The committed traces, as text."""
    return pd.read_csv(path, dtype=str, keep_default_na=False, na_filter=False)


def write_golden(frame: pd.DataFrame, path: Path = GOLDEN) -> None:
    """Write ``frame`` as the golden, atomically (gzip CSV without name or time in its header,
    so the bytes depend on the traces alone)."""
    atomic_write_bytes(path, gzip.compress(frame.to_csv(index=False).encode(), mtime=0))


def compare(expected: pd.DataFrame, actual: pd.DataFrame) -> list[str]:
    """Every difference between two sets of traces: a point present in one only, a column
    or a launch count that differs, and each differing field with its launch (index in the
    point's trace, kernel, layer) and both values. Empty when identical."""
    problems = []
    if list(expected.columns) != list(actual.columns):
        problems.append(f"columns differ: {list(expected.columns)} != {list(actual.columns)}")
    columns = [c for c in expected.columns if c in actual.columns and c not in KEYS]
    left, right = expected.groupby(KEYS, sort=True), actual.groupby(KEYS, sort=True)
    for key in sorted(set(left.groups) | set(right.groups)):
        where = f"{key[0]} / {key[1]}"
        if key not in right.groups or key not in left.groups:
            problems.append(f"{where}: only in the {'expected' if key in left.groups else 'actual'} traces")
            continue
        a, b = (g.get_group(key).reset_index(drop=True) for g in (left, right))
        if len(a) != len(b):
            problems.append(f"{where}: {len(a)} launches expected, {len(b)} written")
        for i in range(min(len(a), len(b))):
            for column in columns:
                if a.at[i, column] != b.at[i, column]:
                    launch = f"launch {i} ({a.at[i, 'kernel']}, layer {a.at[i, 'layer']})"
                    problems.append(f"{where}: {launch} {column}: {a.at[i, column]!r} expected, {b.at[i, column]!r}")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Compare a tree's twin traces with another tree's or the golden, or write the golden."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="checkout whose traces are computed (default: this)")
    parser.add_argument("--against", type=Path, help="a second checkout to compare with (default: the golden)")
    parser.add_argument("--write-golden", type=Path, help="write the tree's traces here instead of comparing")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--data", type=Path, default=DATA, help="Graph Challenge data folder")
    parser.add_argument("--out", type=Path, help="keep the run folders here (default: a temporary folder)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        out = args.out or Path(scratch)
        actual = run_cases(args.tree, args.cases, out / "tree", args.data)
        if args.write_golden:
            write_golden(actual, args.write_golden)
            print(f"{args.write_golden}: {len(actual)} launches of {actual.groupby(KEYS).ngroups} points")
            return 0
        if args.against:
            expected = run_cases(args.against, args.cases, out / "against", args.data)
        else:
            expected = read_golden()
            expected = expected[expected["case"].isin(args.cases)]
    problems = compare(expected, actual)
    for line in problems:
        print(line)
    points = actual.groupby(KEYS).ngroups
    print(f"{'IDENTICAL' if not problems else 'DIFFERENT'}: {len(actual)} launches of {points} points")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
