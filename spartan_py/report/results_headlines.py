"""The headline figures of one committed result file, as Markdown lines, read from its data.

One function per kind of result (the file's ``benchmark`` field, or ``training`` for a
training-step table); :func:`headlines` picks it. Nothing here is typed by hand: every figure
is read from the file, so the results page is what the files say.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import pandas as pd

from spartan_py.report.cells import markdown_table as _table
from spartan_py.report.cells import ms as _ms
from spartan_py.report.cells import sig as _g
from spartan_py.report.duplicate_rows_table import duplicate_rows_table
from spartan_py.report.model_headlines import MODEL_EXTRACTORS
from spartan_py.report.peers_table import peers_table


def _gc_gpu(data: dict) -> list[str]:
    rows = [
        (
            f"`{name}`",
            f"`{v.get('engine', '')}`",
            _options(v.get("options")),
            _ms(v["median_seconds"]),
            _g(v.get("edges_per_second")),
        )
        for name, v in data["variants"].items()
        if "median_seconds" in v
    ]
    rows += [
        (f"`{name}`", "stock", "", _ms(v["median_seconds"]), _g(v["edges_per_second"]))
        for name, v in data["baselines"].items()
    ]
    lines = [f"{data['workload']}; best variant `{data['best_variant']}`."]
    if "speedup_vs_fastest_baseline" in data:
        lines[0] += f" Speed-up over the fastest stock path: {_g(data['speedup_vs_fastest_baseline'])}x"
        lines[0] += f" (rows kernel {_g(data.get('rows_kernel_speedup_vs_fastest_baseline'))}x)."
    return [*lines, "", *_table(("variant", "backend", "options", "median ms", "edges/s"), rows)]


def _options(options: dict | None) -> str:
    return ", ".join(f"`{k}={v}`" for k, v in (options or {}).items())


def _gc_cpu(data: dict) -> list[str]:
    rows = [
        (name, _g(data[key].get("median_seconds", data[key].get("seconds")), 4), _g(data[key]["edges_per_second"]))
        for name, key in (
            ("`cpu` (merged columns)", "cpu"),
            ("`cpu`, merged, every row computed", "cpu_every_row"),
            ("`cpu`, row path", "cpu_row_path"),
            ("`reference`", "reference"),
        )
        if data.get(key)  # the every-row path since row copies; the reference unless skipped
    ]
    head = f"{data['workload']}; {data['threads']}; reading the files {_g(data['read_seconds']['total'])} s."
    return [head, "", *_table(("engine", "seconds", "edges/s"), rows)]


def _gc_families(data: dict) -> list[str]:
    rows = []
    for case in data["cases"]:
        backends = case["backends"]
        stock = {k: v for k, v in backends.items() if v.get("stock_library") and v.get("median_seconds")}
        fastest = min(stock, key=lambda k: stock[k]["median_seconds"]) if stock else None
        rows.append(
            (
                f"`{case['case']}`",
                f"`{case['auto_picks']}`",
                _ms(backends["gpu-merged"]["median_seconds"]),
                _ms(backends["gpu"]["median_seconds"]),
                f"{_ms(stock[fastest]['median_seconds'])} (`{fastest}`)" if fastest else "-",
            )
        )
    return _table(("network", "`auto` picks", "`gpu-merged` ms", "`gpu` ms", "fastest stock ms"), rows)


def _gc_gpu_generated(data: dict) -> list[str]:
    rows = [
        (c["case"], f"`{c['engine']}`", _ms(c.get("median_seconds")), _g(c.get("edges_per_second")))
        for c in data["cases"]
    ]
    return _table(("neurons x layers x rows", "backend", "median ms", "edges/s"), rows)


def _gc_multi_gpu(data: dict) -> list[str]:
    rows = [
        (
            c["case"],
            c.get("balance", ""),
            c["gpus"],
            _ms(c["one_gpu_seconds"]),
            _ms(c["sharded_seconds"]),
            _g(c.get("efficiency")),
        )
        for c in data["cases"]
    ]
    lines = [f"Executor: {data['executor']}."] + _table(
        ("case", "rows dealt", "GPUs", "one GPU ms", "sharded ms", "efficiency"), rows
    )
    setup = [(s["case"], s["gpus"], _g(s["wall_seconds"])) for s in data.get("setup", [])]
    return lines + (["", *_table(("set-up of", "GPUs", "wall s"), setup)] if setup else [])


def _gc_setup(data: dict) -> list[str]:
    lines: list[str] = []
    networks = data.get("networks")
    if isinstance(networks, list):
        rows = [
            (
                f"{n['neurons']} x {n['layers']}",
                f"`{n['backend']}`",
                _g(n.get("load_seconds")),
                _g(n.get("prepare_seconds")),
                _g(n.get("inference_seconds")),
            )
            for n in networks
        ]
        lines += _table(("network", "backend", "load s", "prepare s", "inference s"), rows)
    if data.get("commands"):
        walls = [c["wall_seconds"] for c in data["commands"]]
        lines += ["", f"Whole `spartan infer` commands: {len(walls)}, {_g(min(walls))}-{_g(max(walls))} s wall."]
    if "setup_seconds" in data:
        lines += [
            f"{data['neurons']} x {data['layers']}: set-up {_g(data['setup_seconds'])} s, inference "
            f"{_g(data['inference_seconds'])} s."
        ]
    files = data.get("files")
    if files:
        per_layer = files.get("load_tsv_seconds_per_layer", files.get("seconds_per_layer"))
        lines += [
            "",
            f"TSV layers ({files.get('layers')} of {data.get('neurons')} neurons, "
            f"{_g(files['tsv_bytes'] / 1e9)} GB): load {_g(per_layer)} s a layer.",
        ]
    return lines


def _gc_monitor(data: dict) -> list[str]:
    rows = [
        (f"`{mode}`", _ms(c["baseline_seconds"]), _g(c["extra_seconds"] * 1e6), _g(c["extra_pct"]))
        for mode, c in data["costs"].items()
    ]
    return [
        f"{data['workload']}; {data['rounds']} rounds.",
        "",
        *_table(("backend/network/monitor", "monitor off ms", "extra us", "extra %"), rows),
    ]


def _gc_against_tree(data: dict) -> list[str]:
    rows = [
        (
            f"`{name}`",
            _g(e["median_ms"]["baseline"], 4),
            _g(e["median_ms"]["this"], 4),
            _g(e["change_pct"]),
            "yes" if e["truth_every_round"] else "no",
            "yes" if e["within_bar"] else "no",
        )
        for name, e in data["engines"].items()
    ]
    header = ("engine", f"{data['baseline_commit']} (ms)", "this commit (ms)", "change (%)", "truth", "within bar")
    failed = len(data["failures"])
    note = (
        f"Proxy by turns, {data['rounds']} rounds, {failed} failed; bar: within {_g(data['bar_pct'])}% "
        "with every round run."
    )
    return [note, "", *_table(header, rows)]


def _gc_merged_variants(data: dict) -> list[str]:
    rows = [
        (
            f"`{e['variant']}`",
            e["monitor"],
            e["status"],
            _g(e["median_seconds"] * 1e6 if e.get("median_seconds") else None, 4),
            _g(e.get("vs_default")),
            _g(100 * e["monitor_share_of_fused"]) if e.get("monitor_share_of_fused") is not None else "-",
        )
        for e in data["engines"]
    ]
    bars = data["bars"]
    note = (
        f"{data['workload']}, {data['rounds']} rounds by turns. Fastest with the monitor: `{bars['fastest_fused']}` "
        f"{_g(bars['fastest_fused_seconds'] * 1e6, 4)} us (bar {_g(bars['bar_seconds'] * 1e6)} us: "
        f"{'met' if bars['meets_time_bar'] else 'not met'}; its monitor within {_g(100 * bars['bar_monitor_share'])}%: "
        f"{'met' if bars['meets_monitor_bar'] else 'not met'})."
    )
    header = ("variant", "monitor", "check", "median (us)", "vs default", "monitor (% of run)")
    return [note, "", *_table(header, rows)]


def _host_latency(data: dict) -> list[str]:
    return [
        f"Launch {data['launch_us']} us, synchronisation round trip {data['sync_us']} us (median of "
        f"{data['repeats']}; CPU {data['cpu']})."
    ]


def _memory_latency(data: dict) -> list[str]:
    return [
        f"Dependent-load latency {data['latency_ns']} ns ({data['buffer_mib']} MiB cycle); copy "
        f"{data['copy_gb_s']} GB/s; streaming efficiency {data.get('streaming_efficiency', '-')}."
    ]


def _ncu_probe(data: dict) -> list[str]:
    header = (
        "launch",
        "layers",
        "tile rows",
        "time (us)",
        "DRAM read (KB)",
        "L2 hit %",
        "L1 hit %",
        "warp cycles / issue",
    )
    scaled = (
        ("time_ns", 1e3),
        ("dram_read_bytes", 1e3),
        ("l2_hit_pct", 1),
        ("l1_hit_pct", 1),
        ("warp_cycles_per_issue", 1),
    )
    rows = [(r["launch"], r["layers"], r["tile_rows"], *(_g(r[k] / by) for k, by in scaled)) for r in data["launches"]]
    return [data["reading"], "", *_table(header, rows)]


def _families(families: list[dict], columns: tuple[str, ...]) -> list[str]:
    return _table(("family", *columns), [(f"`{f['family']}`", *(f.get(c, "-") for c in columns)) for f in families])


def _repeatability(data: dict) -> list[str]:
    return [
        f"{len(data['runs'])} runs, {data['launches']} launches.",
        "",
        *_families(data["families"], ("launches", "median_pct", "p90_pct")),
    ]


def _col2im(data: dict) -> list[str]:
    rows = [
        (net, t["floor_us"], t["im2col_us"], t["col2im_gather_us"], t["col2im_strided_us"])
        for net, t in data["totals_ms"].items()
    ]
    return [f"Batch {data['batch']}, every conv layer summed (ms)."] + _table(
        ("network", "floor", "im2col", "col2im gather", "col2im strided"), rows
    )


def _tile_gemm(data: dict) -> list[str]:
    return [
        f"{data['points']} conv points: speed-up or floor bar met on {data['bar_speedup_or_floor_met']}, "
        f"baselines bar on {data['bar_baselines_met']}."
    ]


def _spartan_machinery(data: dict) -> list[str]:
    extra = statistics.median(p["fused_extra_us"] for p in data["profiling_overhead"])
    checks = [f"{c['check']}: {c['result']}" for c in data["checks"]]
    return [
        f"The fused monitor's median extra time {_g(extra)} us over {len(data['profiling_overhead'])} layers; "
        f"{len(data['density_sweep'])} density-sweep points. Checks: " + "; ".join(checks) + "."
    ]


def _training_bound(data: dict) -> list[str]:
    rows = data["rows"]
    return [
        f"{len(rows)} rows (network x blob length); bound speed-up "
        f"{_g(min(r['bound_speedup'] for r in rows))}-{_g(max(r['bound_speedup'] for r in rows))}x."
    ]


def _cublas_algos(data: dict) -> list[str]:
    return [f"{len(data['shapes'])} GEMM shapes, each with cuBLASLt's algorithm (no time)."]


def _challenge(data: dict) -> list[str]:
    rows = [
        (
            f"{n['neurons']} x {n['layers']}",
            f"`{n['backend']}`",
            _ms(n["seconds"]),
            _g(n["edges_per_second"]),
            n["categories"],
            n.get("check_equal", "-"),
        )
        for n in data["networks"]
    ]
    return _table(("network", "backend", "ms", "edges/s", "categories", "equal to the CPU engine"), rows)


def _challenge_model(data: dict) -> list[str]:
    errors = [abs(n["model_error"]) * 100 for n in data["networks"] if n.get("model_error") is not None]
    return (
        [
            f"{len(data['networks'])} networks replayed; median |model error| {_g(statistics.median(errors))}%, "
            f"worst {_g(max(errors))}%."
        ]
        if errors
        else []
    )


def training_table(frame: pd.DataFrame) -> list[str]:
    """A training-step table (``training*.csv``): dense and adaptive step, model error, monitor cost."""
    rows = [
        (
            r.network,
            r.precision,
            r.batch,
            _g(r.dense_ms, 4),
            _g(r.adaptive_ms, 4),
            f"{r.model_error * 100:+.1f}%",
            _g(r.profiling_ratio),
        )
        for r in frame.itertuples()
    ]
    return _table(
        ("network", "precision", "batch", "dense ms", "adaptive ms", "model error", "software / fused monitor"), rows
    )


MAPS_GRAINS = ("64x32", "16x8", "8x8", "4x4", "element")
"""The grains a ``spartan maps`` headline shows, coarse to fine."""


def _maps(data: dict) -> list[str]:
    """Per network: late accuracy and its move over the last tenth, the late step's bound
    (dense work over live work, every convolution, CHW columns) at each grain, and the
    sensitivity rows' bounds at 16 x 8."""
    rows = []
    for network, record in data["networks"].items():
        late = record["points"]["late"]
        tenth = record.get("last_tenth") or {}
        step = late["network"]["all"]["step"]["chw"]
        sens = late.get("sensitivity", {})
        rows.append(
            (
                network,
                f"{late['step']} of {record.get('steps_planned', '-')}",
                _g(late.get("test_accuracy")),
                "-" if "change" not in tenth else f"{tenth['change']:+.3f}",
                *(f"{step[g]:.2f}" for g in MAPS_GRAINS),
                *(
                    f"{sens[k]['network']['all']['step']['chw']['16x8']:.2f}" if k in sens else "-"
                    for k in ("0.7", "0.9")
                ),
            )
        )
    head = f"{data['data']}; batch {data['settings']['batch']}, {data['settings']['images']} test images captured."
    header = ("network", "late step", "test accuracy", "last tenth", *MAPS_GRAINS, "16x8 at 70%", "16x8 at 90%")
    return [head, "Bounds of the late point's whole step (every convolution, CHW columns):", "", *_table(header, rows)]


def _maps_whatif(data: dict) -> list[str]:
    """Spartan-hardware speed-up per network and grain at the late point, captured maps."""
    rows: dict[str, dict[str, dict]] = {}
    for row in data["rows"]:
        if row["point"] == "late" and row["maps"] == "captured":
            rows.setdefault(row["network"], {})[row["grain"]] = row
    grains = list(dict.fromkeys(g for by in rows.values() for g in by))
    first = data["rows"][0]
    head = (
        f"{first['machine']}, {first['precision']}, batch {first['batch']}, late point, captured maps: "
        "predicted speed-up (ideal in brackets) beside Spartan's figure."
    )
    table = [
        (
            network,
            *(f"{by[g]['speedup']:.2f} ({by[g]['ideal_speedup']:.2f})" if g in by else "-" for g in grains),
            _g(next(iter(by.values()))["spartan_published"]),
        )
        for network, by in rows.items()
    ]
    return [head, "", *_table(("network", *grains, "Spartan's figure"), table)]


def _spartan_table(data: dict) -> list[str]:
    """``spartan maps table``: per network and precision, the late point's step (ms) dense by
    cuBLAS (GEMMs, im2col, col2im) and by cuDNN, adaptive and its ratio to the faster dense
    step, and the bound at 16 x 8 tiles."""
    rows = [
        (
            r["network"],
            r["precision"],
            _g(r["dense_cublas_step_ms"]),
            _g(r["dense_cudnn_ms"]),
            _g(r["adaptive_ms"]),
            _g(r["adaptive_over_faster_dense"]),
            f"{r['bound']['chw']['16x8']:.2f}",
        )
        for r in data["records"]
        if r.get("training_point") == "late"
    ]
    header = ("network", "precision", "cuBLAS step ms", "cuDNN ms", "adaptive ms", "adaptive / faster", "bound 16x8")
    return ["The late point's training step:", "", *_table(header, rows)]


EXTRACTORS: dict[str, Callable[[dict], list[str]]] = {
    "gc_gpu": _gc_gpu,
    "gc_cpu": _gc_cpu,
    "gc_families": _gc_families,
    "gc_gpu_generated": _gc_gpu_generated,
    "gc_multi_gpu": _gc_multi_gpu,
    "gc_setup": _gc_setup,
    "gc_monitor": _gc_monitor,
    "gc_against_tree": _gc_against_tree,
    "gc_merged_variants": _gc_merged_variants,
    "gc_duplicate_rows": duplicate_rows_table,
    "peers": peers_table,
    "host_latency": _host_latency,
    "memory_latency": _memory_latency,
    "ncu-merged-later": _ncu_probe,
    "repeatability": _repeatability,
    "col2im": _col2im,
    "tile-gemm": _tile_gemm,
    "spartan-machinery": _spartan_machinery,
    "training_bound": _training_bound,
    "cublas_algos": _cublas_algos,
    "graph-challenge-all": _challenge,
    "model": _challenge_model,
    "spartan-maps": _maps,
    "spartan-maps-whatif": _maps_whatif,
    "spartan-table": _spartan_table,
    **MODEL_EXTRACTORS,
}
"""Headline figures by the result file's ``benchmark`` field."""


def headlines(data: dict) -> list[str]:
    """The Markdown lines of ``data``'s headline figures (a result file with a ``benchmark``)."""
    extractor = EXTRACTORS.get(data["benchmark"])
    if extractor is None:
        raise KeyError(f"no headline extractor for benchmark {data['benchmark']!r}: add one to EXTRACTORS")
    return extractor(data)
