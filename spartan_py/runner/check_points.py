"""Every input of an experiment's points checked before any point runs: by ``spartan run`` (in
:func:`~spartan_py.runner.execute.run_experiment`) and by ``spartan run --check``.

Graph Challenge points: their network's layer files, inputs and truth read whole and checked,
``layers`` and ``rows`` in range (:func:`spartan_py.api.check_request`). Conv-layer points:
their saved maps (:mod:`~spartan_py.workloads.conv.saved_maps_check`) and their tile against what
the kernels take (:mod:`~spartan_py.sparsity.tile_rules`). Each problem is one line naming the
file or field; all of them are raised together as one :class:`InputError` (exit 2).
"""

from __future__ import annotations

from collections.abc import Iterable

from spartan_py.errors import InputError
from spartan_py.runner.sweep import Point
from spartan_py.workloads import workload_of


def point_problem(point: Point) -> str | None:
    """The first problem with ``point``'s inputs, in one line, or None (its workload's checks)."""
    try:
        workload_of(point.experiment).check_inputs(point.experiment)
    except InputError as exc:
        return str(exc)
    return None


def check_points(points: Iterable[Point]) -> None:
    """Raise one :class:`InputError` listing every distinct problem of ``points``' inputs
    (each line names the file or field, and the first point it stops)."""
    problems: dict[str, str] = {}
    for point in points:
        problem = point_problem(point)
        if problem is not None and problem not in problems:
            problems[problem] = point.label
    if problems:
        lines = [f"{problem} (point {label})" for problem, label in problems.items()]
        raise InputError("\n".join(lines))
