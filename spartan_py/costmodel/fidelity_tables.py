"""A cross-machine comparison's summary (``spartan model compare --cross``) as the Markdown
tables of docs/cost-model.md: per family, per whole run (Graph Challenge and conv apart, a conv
point's candidate runs summed into it: the per-family table is the per-kernel view), the
speed-ups and the reverse fit."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from spartan_py.costmodel.whole_runs import CANDIDATE_SEPARATOR, WORKLOAD_NAMES, WORKLOADS, whole_from_rows
from spartan_py.result_files import read_result


def _run_name(run: str) -> str:
    """A validation run's label as the docs' tables write it."""
    fields = dict(f.split("=", 1) for f in run.split(", ") if "=" in f)
    if "conv layers" in run:
        return f"{fields['precision'].upper()}, " + run.split(" conv layers, ", 1)[1]
    network = next((f.split(" layers")[0] for f in run.split(", ") if f.startswith("generated:")), None)
    return f"`{fields['backend']}`, " + (network or "official 1024 x 120 proxy")


def _whole_errors(found: dict, key: str) -> pd.Series:
    """Per whole run its error (percent) in one of the summary's error tables, a conv point's
    candidates summed into it."""
    runs = whole_from_rows(pd.DataFrame(found[key]["whole_runs"]))
    return runs.set_index("run")["error_pct"]


def _pct(value: float) -> str:
    return f"{value:+.1f}%"


def fidelity_tables(summary_file: Path) -> str:
    """The per-family, whole-run, speed-up and reverse tables of a ``compare`` summary as Markdown
    (the H200 after-fix column reads "as blind" where the current model predicts the same)."""
    found = read_result(summary_file)
    lines = [
        "| family | H100 held out: launches, median, p90 (%) "
        "| H200 blind: launches, median, p90 (%) | H200 after fix |",
        "| --- | --- | --- | --- |",
    ]
    for row in found["families"]:

        def errors(column: str, bold: bool = False) -> str:
            launches, median, p90 = (row.get(f"{column} {k}") for k in ("launches", "median_pct", "p90_pct"))
            if launches is None:
                return "-"
            return f"{launches}, **{median:.1f}**, {p90:.1f}" if bold else f"{launches}, {median:.1f}, {p90:.1f}"

        blind, now = errors("h200-sxm blind"), errors("h200-sxm now")
        after = "as blind" if now == blind else now.split(", ", 1)[1]
        lines.append(
            f"| `{row['family']}` | {errors('h100-sxm held out')} | {errors('h200-sxm blind', bold=True)} | {after} |"
        )
    h100, blind, now = (_whole_errors(found, key) for key in ("h100_all_points", "h200_blind", "h200_current_model"))
    whole = whole_from_rows(pd.DataFrame(found["h200_blind"]["whole_runs"]))
    role = {r["run"].split(CANDIDATE_SEPARATOR)[0]: r["h100-sxm role"] for r in found["whole_runs"]}
    for name in WORKLOADS:
        runs = sorted(whole.loc[whole["workload"] == name, "run"])
        if not runs:
            continue
        lines += ["", f"| {WORKLOAD_NAMES[name]} run | H100 (role) | H200 blind | H200 after fix |"]
        lines.append("| --- | --- | --- | --- |")
        for run in runs:
            after = "as blind" if _pct(now[run]) == _pct(blind[run]) else _pct(now[run])
            lines.append(f"| {_run_name(run)} | {_pct(h100[run])} ({role[run]}) | **{_pct(blind[run])}** | {after} |")
    lines += ["", "| family | measured H100 -> H200 speed-up | predicted |", "| --- | --- | --- |"]
    lines += [
        f"| `{r['family']}` | {r['measured_speedup']:.2f}x | {r['predicted_speedup']:.2f}x |" for r in found["speedups"]
    ]
    lines += ["", "| family | launches | median % | p90 % |", "| --- | --- | --- | --- |"]
    prefix = "h100-sxm from h200-sxm fit"
    for r in found["reverse_families"]:
        launches, median, p90 = (r[f"{prefix} {k}"] for k in ("launches", "median_pct", "p90_pct"))
        lines.append(f"| `{r['family']}` | {launches} | {median:.1f} | {p90:.1f} |")
    worst = max(found["reverse_whole_runs"], key=lambda r: abs(r["error_pct"]))
    lines += ["", f"Whole runs: worst {_pct(worst['error_pct'])} ({_run_name(worst['run'])})."]
    return "\n".join(lines) + "\n"
