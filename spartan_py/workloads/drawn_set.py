"""A validation set nothing is tuned on: points drawn at random, with a seed taken from the
commit that froze the model, written as an experiment file before anything is measured.

The rule (docs/cost-model.md, "Drawn validation sets"): freeze the model and commit it; draw
a set with :func:`seed_from_commit` of that commit; commit the file and the model's
predictions for it; then measure it once on each GPU. Its errors are the release's figure.
A model changed after seeing them makes the set a development set: the next figure needs the
next draw.

Each Graph Challenge point is a generated network of either family (RadiX-Net, or
``generated-unmergeable``) at one of the four widths, 60 to 1920 layers and 5000 to 60000
rows, on ``gpu`` or ``gpu-merged``; each dense-layer point one convolution layer of AlexNet,
VGG-16 or ResNet-18 at batch 4 to 64, input density 0.02 to 0.9, FP32 or TF32, every
candidate's launches timed (``trace: all``). Depths, rows and densities are drawn
log-uniformly, so that small and large ones are equally represented. ``training`` points, drawn
after all others (so that a draw without them is unchanged), are the same kind of layer as a
training step: its forward, weight- and input-gradient GEMMs, whose shapes (wide outputs, long
contractions) no forward point has.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import yaml

from spartan_py.engines import runs_width
from spartan_py.engines.merged.plan import merged_tile_rows
from spartan_py.errors import BackendUnavailableError, InputError
from spartan_py.workloads.conv.layers import SHAPE_SET

#: Network widths of the Graph Challenge (the rows kernel's too).
GC_WIDTHS = (1024, 4096, 16384, 65536)
#: Network families drawn: the RadiX-Net generator and the one without equal weight columns.
NETWORK_FAMILIES = ("generated", "generated-unmergeable")
#: Backends a Graph Challenge point is drawn on.
GC_BACKENDS = ("gpu", "gpu-merged")
#: Ranges drawn (inclusive).
LAYERS_RANGE = (60, 1920)
ROWS_RANGE = (5000, 60000)
BATCH_RANGE = (4, 64)
DENSITY_RANGE = (0.02, 0.9)
PRECISIONS = ("fp32", "tf32")


@dataclass(frozen=True)
class DrawnSet:
    """The points of one draw, as experiment-file cases, the seed they came from and what
    they are for (:data:`PURPOSES`)."""

    seed: int
    commit: str | None
    cases: list[dict]
    purpose: str = "validation"

    def experiment_text(self, name: str, machines: tuple[str, ...] | None = None, mode: str = "measured") -> str:
        """The experiment file (YAML) that runs every drawn point: ``mode`` ``measured`` on a GPU,
        or ``simulated`` (the kernels' CPU twins and the cost model: the predictions); ``machines``
        default to the purpose's."""
        purpose = PURPOSES[self.purpose]
        header = [
            f"# A drawn {self.purpose} set (spartan_py.workloads.drawn_set): seed {self.seed}"
            + (f", from commit {self.commit}" if self.commit else ""),
            f"# {purpose.rule}",
            "#   spartan run <this file> --out runs/<name>-<gpu>",
        ]
        cases = self.cases
        if mode == "simulated":  # a conv point's simulated run takes the CPU path, as the schema asks
            cases = [{**c, "backend": "auto"} if c["workload"].get("kind") == "conv_layers" else c for c in cases]
        body = {
            "name": name,
            "description": f"Drawn {self.purpose} set, seed {self.seed}: {len(self.cases)} points "
            f"{purpose.points_are}.",
            "workload": {"network": "generated:1024", "layers": 120, "inputs": "generated:60000"},
            "repeats": 9 if mode == "measured" else 1,  # a simulated point's times are the model's: one run
            "mode": mode,
            "machines": list(machines or purpose.machines),
            "sweep": {"cases": cases},
        }
        return "\n".join(header) + "\n" + yaml.safe_dump(body, sort_keys=False, width=120)


def seed_from_commit(commit: str) -> int:
    """The seed of a draw: the first 16 hex digits of the commit's hash, as an integer."""
    digits = commit.strip().lower()
    if len(digits) < 16 or any(c not in "0123456789abcdef" for c in digits):
        raise InputError(f"expected a commit hash of at least 16 hex digits, got {commit!r}")
    return int(digits[:16], 16)


def calibration_seed(commit: str) -> int:
    """The seed of a calibration draw at ``commit``: the first 16 hex digits of the SHA-256 of
    ``calibration <commit>``, so that it never equals the validation seed of the same commit."""
    seed_from_commit(commit)  # the same check of the hash
    digest = hashlib.sha256(f"calibration {commit.strip().lower()}".encode()).hexdigest()
    return int(digest[:16], 16)


@dataclass(frozen=True)
class Purpose:
    """What a drawn set is for, and what follows from it: the rule its file states, what its
    points are, the seed a commit gives it and the machines that measure it."""

    rule: str
    points_are: str
    seed: Callable[[str], int]
    machines: tuple[str, ...]


PURPOSES: dict[str, Purpose] = {
    "validation": Purpose(
        "Committed with the model's predictions before any of it is measured; measured once per GPU.",
        "nothing is tuned on",
        seed_from_commit,
        ("h100-sxm", "h200-sxm"),
    ),
    "calibration": Purpose(
        "The cost model is fitted on its H100 runs; it is never a validation set.",
        "the model is fitted on",
        calibration_seed,
        ("h100-sxm",),
    ),
}
"""A frozen model's validation draw (never fitted on) and a calibration draw (fitted on, never a
validation set): the same distribution of points, another seed."""


def backend_runs(backend: str, family: str, neurons: int) -> bool:
    """Whether ``backend`` runs a generated network of ``family`` and ``neurons``: the rows kernel
    stops at 16384 neurons; the merged kernel holds a merged row in a block, and an unmergeable
    network keeps all its columns (65536: too wide)."""
    if not runs_width(backend, neurons):
        return False
    if backend == "gpu-merged" and family == "generated-unmergeable":
        try:
            merged_tile_rows(neurons, neurons)
        except BackendUnavailableError:
            return False
    return True


def _log_uniform_int(rng: np.random.Generator, low: int, high: int) -> int:
    return int(min(high, max(low, round(math.exp(rng.uniform(math.log(low), math.log(high)))))))


def draw_set(
    seed: int,
    *,
    graph_challenge: int = 16,
    conv: int = 32,
    training: int = 0,
    commit: str | None = None,
    purpose: str = "validation",
) -> DrawnSet:
    """``graph_challenge`` Graph Challenge points, ``conv`` dense-layer points and ``training``
    training-step points drawn with ``seed``, for ``purpose`` (a key of :data:`PURPOSES`)."""
    if purpose not in PURPOSES:
        raise InputError(f"a drawn set is for one of {', '.join(PURPOSES)}, got {purpose!r}")
    if min(graph_challenge, conv, training) < 0 or graph_challenge + conv + training == 0:
        raise InputError(f"a drawn set needs at least one point, got {graph_challenge} + {conv} + {training}")
    rng = np.random.default_rng(seed)
    cases: list[dict] = []
    for _ in range(graph_challenge):
        backends: list[str] = []
        while not backends:  # an unmergeable 65536-neuron network runs on no GPU backend: draw again
            family = str(rng.choice(NETWORK_FAMILIES))
            width = int(rng.choice(GC_WIDTHS))
            backends = [name for name in GC_BACKENDS if backend_runs(name, family, width)]
        cases.append(
            {
                "backend": str(rng.choice(backends)),
                "workload": {
                    "network": f"{family}:{width}",
                    "layers": _log_uniform_int(rng, *LAYERS_RANGE),
                    "inputs": f"generated:{_log_uniform_int(rng, *ROWS_RANGE)}",
                },
            }
        )
    cases += [_conv_case(rng, step="forward") for _ in range(conv)]
    cases += [_conv_case(rng, step="training") for _ in range(training)]
    return DrawnSet(seed, commit, cases, purpose)


def _conv_case(rng: np.random.Generator, step: str) -> dict:
    """One convolution layer drawn: a forward point times every candidate (``trace: all``); a
    training step records the launches of its three GEMMs' picks."""
    labels = [layer.label for layer in SHAPE_SET]
    density = math.exp(rng.uniform(math.log(DENSITY_RANGE[0]), math.log(DENSITY_RANGE[1])))
    case: dict = {"backend": "gpu", "precision": str(rng.choice(PRECISIONS))}
    if step == "forward":
        case["trace"] = "all"
    case["repeats"] = 20
    workload = {
        "kind": "conv_layers",
        "layers": [str(rng.choice(labels))],
        "batch": int(rng.integers(BATCH_RANGE[0], BATCH_RANGE[1] + 1)),
        "density": round(float(density), 4),
        "seed": int(rng.integers(0, 2**31)),
    }
    if step != "forward":
        workload["step"] = step
    return {**case, "workload": workload}
