"""A cross-machine comparison's summary (``spartan model compare --cross``) as the Markdown
tables of docs/cost-model.md: per family, per whole run, the speed-ups and the reverse fit."""

from __future__ import annotations

from pathlib import Path

from spartan_py.result_files import read_result


def _run_name(run: str) -> str:
    """A validation run's label as the docs' tables write it."""
    point, _, family = run.partition(" / ")
    fields = dict(f.split("=", 1) for f in point.split(", ") if "=" in f)
    network = next((f.split(" layers")[0] for f in point.split(", ") if f.startswith("generated:")), None)
    if family:
        density = point.rsplit("density ", 1)[1]
        return f"{fields['precision'].upper()}, density {density} / `{family}`"
    return f"`{fields['backend']}`, " + (network or "official 1024 x 120 proxy")


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
    lines += ["", "| whole run | H100 (role) | H200 blind | H200 after fix |", "| --- | --- | --- | --- |"]
    runs = sorted(found["whole_runs"], key=lambda r: (" / " in r["run"], r["run"]))
    for row in runs:
        blind, now = row["h200-sxm blind error_pct"], row["h200-sxm now error_pct"]
        after = "as blind" if _pct(now) == _pct(blind) else _pct(now)
        lines.append(
            f"| {_run_name(row['run'])} | {_pct(row['h100-sxm error_pct'])} ({row['h100-sxm role']}) "
            f"| **{_pct(blind)}** | {after} |"
        )
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
