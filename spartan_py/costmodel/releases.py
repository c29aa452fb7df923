"""What each of a machine's validation entries is, and the short trust lines printed from them.

A **release** is a drawn set (``experiments/drawn/validate-HASH.yaml``) whose predictions were
committed before it was measured (docs/cost-model.md's rule): *blind* on a GPU no measurement of
which entered the calibration, *held out* on the calibration GPU (its points unseen, the GPU
fitted). Any other entry is a **development round**: points the model was developed or fitted
against, whatever its ``blind`` flag says (the H200's round 14 of ``validate-h200.yaml`` was the
third round on the same points, the model revised between them). A release whose traces later
entered the calibration (a ``drawn-HASH-`` trace named in a family's ``source``) is marked so:
its figures were blind when measured; a replay with today's calibration would not be. Graph
Challenge and conv whole runs are told apart everywhere (:mod:`spartan_py.costmodel.whole_runs`);
a conv point's candidate runs are never counted here.

Newest first: by the stamp in the result file's name (``...-YYYYMMDD-HHMMSS.json.gz``), else by
the entry's place in the file (entries are appended).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from spartan_py.costmodel.fits import Validation
from spartan_py.costmodel.machine import Machine
from spartan_py.costmodel.whole_runs import WORKLOAD_NAMES, WORKLOAD_SHORT, WORKLOADS

DRAWN_SET = re.compile(r"experiments/drawn/validate-([0-9a-f]{7,})\.yaml")
"""A drawn set's file in an entry's ``scope``; its hash names the release."""
RESULT_STAMP = re.compile(r"(\d{8}-\d{6})")
"""The date and time in a result file's name."""

BLIND_RELEASE = "blind release"
HELD_OUT_RELEASE = "held-out release"
DEVELOPMENT = "development round"
KIND_ORDER = (BLIND_RELEASE, HELD_OUT_RELEASE, DEVELOPMENT)
"""The order entries are told in: blind releases first, development rounds last."""

MAX_LINE_CHARS = 170
"""The longest trust line: a line a terminal shows whole."""
EARLIER_SHOWN = 4
"""Earlier entries named on the second trust line; the rest are counted (``--json`` has all)."""


@dataclass(frozen=True)
class Entry:
    """One validation entry and what it is."""

    validation: Validation
    kind: str
    drawn: str
    """The release's short hash (its drawn set), ``""`` for a development round."""
    calibration_data: bool
    """Whether the release's traces are in the machine's calibration now."""
    stamp: str
    """Its sort key: the result file's date and time, then its place in the file."""

    def name(self) -> str:
        """The release's hash, or a development round's commit."""
        return self.drawn or self.validation.commit[:7]

    def counts(self) -> str:
        """``12/16 27/32``: whole runs within 10% of those counted, per workload in
        :data:`WORKLOADS` order (``-`` for one not in the set)."""
        told = self.validation.workloads
        return " ".join(f"{told[k].within_10pct}/{told[k].runs}" if k in told else "-" for k in WORKLOADS)

    def label(self) -> str:
        """Its kind, with ``now calibration data`` where its traces became that."""
        return self.kind + (" (traces now calibration data)" if self.calibration_data else "")

    def as_dict(self) -> dict:
        """JSON-ready: the entry's fields with its kind, release name and calibration mark."""
        return {
            "kind": self.kind,
            "release": self.drawn or None,
            "now_calibration_data": self.calibration_data,
            **self.validation.model_dump(),
        }


def _calibration_text(machine: Machine) -> str:
    return " ".join([machine.calibration_frozen or "", *(p.source for p in machine.calibration.values())])


def entries(machine: Machine) -> list[Entry]:
    """The machine's validation entries classified, in :data:`KIND_ORDER`, newest first within a kind."""
    calibration = _calibration_text(machine)
    found = []
    for index, v in enumerate(machine.validation):
        match = DRAWN_SET.search(v.scope)
        drawn = match.group(1)[:7] if match else ""
        kind = DEVELOPMENT if not drawn else (BLIND_RELEASE if v.blind else HELD_OUT_RELEASE)
        stamp = RESULT_STAMP.search(v.result)
        found.append(
            Entry(
                v,
                kind,
                drawn,
                bool(drawn) and f"drawn-{drawn}-" in calibration,
                f"{stamp.group(1) if stamp else ''}:{index:04d}",
            )
        )
    found.sort(key=lambda e: e.stamp, reverse=True)
    return sorted(found, key=lambda e: KIND_ORDER.index(e.kind))


def unvalidated_text(machine: Machine) -> str:
    """Why a machine without validation entries is a what-if, in words."""
    if machine.calibration_from is not None:
        why = f"calibration carried over from {machine.calibration_from} when loaded"
    elif any(family.records == 0 for family in machine.calibration.values()):  # carry_over fits none
        why = "calibration carried over from another GPU"
    else:
        why = "no measurement on it"
    return f"not validated ({why}): what-if estimates, their error unmeasured"


def _counted(v: Validation) -> str:
    if not v.workloads:
        return f"worst whole run {v.whole_run_error_pct:.1f}%"
    counts = ", ".join(f"{WORKLOAD_NAMES.get(k, k)} {w.within_10pct}/{w.runs}" for k, w in v.workloads.items())
    inside = ", ".join(
        f"{WORKLOAD_SHORT.get(k, k)} {w.inside_interval}/{w.with_interval}"
        for k, w in v.workloads.items()
        if w.with_interval and w.inside_interval is not None
    )
    return f"whole runs within 10%: {counts}" + (f"; in 80% interval: {inside}" if inside else "")


FITTED_ON_MARK = "now fitted on"
"""The trust line's mark of a release whose traces became calibration data."""


def _first_line(entry: Entry) -> str:
    v = entry.validation
    if entry.kind == DEVELOPMENT:
        return f"validated by development rounds only (not blind): newest {entry.name()} on {v.device}: {_counted(v)}"
    mark = f" ({FITTED_ON_MARK})" if entry.calibration_data else ""  # short: the line must fit a terminal
    if entry.kind == BLIND_RELEASE:
        return f"validated: newest blind release {entry.drawn}{mark} on {v.device}: {_counted(v)}"
    return f"validated on the calibration GPU: held-out {entry.drawn}{mark}: {_counted(v)}"


def _earlier_line(rest: list[Entry]) -> str:
    shown = rest[:EARLIER_SHOWN]
    releases = [e for e in shown if e.kind != DEVELOPMENT]
    development = [e for e in shown if e.kind == DEVELOPMENT]
    parts = []
    if releases:
        columns = ", ".join(WORKLOAD_SHORT[k] for k in WORKLOADS)
        told = "; ".join(f"{e.name()}{'*' if e.calibration_data else ''} {e.counts()}" for e in releases)
        starred = " (*now calibration data)" if any(e.calibration_data for e in releases) else ""
        parts.append(f"earlier ({columns} within 10%): {told}{starred}")
    if development:
        parts.append("development (not blind): " + ", ".join(e.name() for e in development))
    if len(rest) > len(shown):
        parts.append(f"{len(rest) - len(shown)} more in --json")
    return "; ".join(parts)


def trust_lines(machine: Machine) -> list[str]:
    """One or two lines of at most :data:`MAX_LINE_CHARS` (a test holds the machine files to
    it): the newest blind release's figures first (else the newest held-out release, else
    development), Graph Challenge and conv whole runs apart, then the earlier entries by name and
    count, releases now calibration data starred."""
    ordered = entries(machine)
    if not ordered:
        return [unvalidated_text(machine)]
    lines = [_first_line(ordered[0])]
    if len(ordered) > 1:
        lines.append(_earlier_line(ordered[1:]))
    return lines


def figures_text(v: Validation) -> str:
    """An entry's figures in words: per workload its whole runs within 10%, inside their
    intervals and median error, then the worst whole run and the worst per-launch family median."""
    counted = "".join(
        f"{WORKLOAD_NAMES.get(name, name)}: {w.within_10pct} of {w.runs} whole runs within 10%"
        + (f", {w.inside_interval} of {w.with_interval} inside their 80% interval" if w.with_interval else "")
        + f", median {w.median_abs_error_pct:.1f}%; "
        for name, w in v.workloads.items()
    )
    return (
        f"{counted}whole runs within {v.whole_run_error_pct:.1f}%, per-launch median error at most "
        f"{v.per_launch_median_error_pct:.1f}% per family"
    )


def entry_text(entry: Entry, *, commit: bool = False) -> str:
    """One entry in full: its kind first, then scope, device (and commit), figures and result file."""
    v = entry.validation
    at = f" at `{v.commit[:7]}`" if commit else ""
    return f"{entry.label()}: {v.scope} on {v.device}{at}: {figures_text(v)} ({v.result})"


def record_text(machine: Machine) -> str:
    """Every entry in full, blind releases first and newest first (``validated: ...``), or why
    the machine is a what-if (``not validated (...)``)."""
    ordered = entries(machine)
    if not ordered:
        return unvalidated_text(machine)
    return "validated: " + "; ".join(entry_text(e) for e in ordered)
