"""The merged kernel's variants (spartan_py/engines/merged/variants.py): the schedule, the
kernel options' plumbing and nvcc builds, the twin, the benchmark that measures them
(benchmarks/gc_merged_variants.py, driven here with fakes) and, on a GPU, each variant
against the twin bit for bit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
import pytest

from benchmarks import gc_merged_variants as bench
from spartan_py import generate_inputs, generate_network, make_engine
from spartan_py.engines.merged.plan import merged_module_options
from spartan_py.engines.merged.variants import (
    KERNEL_OPTIONS,
    cheap_head_layers,
    fused_head_schedule,
    kernel_defines,
    launch_schedule,
)
from spartan_py.engines.shared.column_merge import merge_network
from spartan_py.engines.shared.launches import chunk_schedule
from spartan_py.errors import InputError
from spartan_py.resources import data_folder


def test_the_fused_head_takes_the_cheap_layers_and_keeps_the_later_boundaries():
    merged = merge_network(generate_network(1024, 12, seed=2))
    assert [layer.plan.steps for layer in merged.layers[:7]] == [32, 2, 2, 2, 2, 2, 27]
    assert cheap_head_layers(merged.layers) == 6
    assert fused_head_schedule(chunk_schedule(120), 6) == [6, 4, 8, 16, 32, 32, 22]
    # a head that ends inside a launch cuts it there (4096 neurons: 8 cheap layers)
    assert fused_head_schedule(chunk_schedule(120), 8) == [8, 2, 8, 16, 32, 32, 22]
    assert fused_head_schedule(chunk_schedule(3), 6) == [3]
    assert fused_head_schedule([1, 1], 1) == [1, 1]
    assert launch_schedule(chunk_schedule(12), merged.layers) == chunk_schedule(12)
    assert launch_schedule(chunk_schedule(12), merged.layers, fused_head=True) == [6, 4, 2]
    assert launch_schedule([], merged.layers, launch_layers=[6, 6]) == [6, 6]
    with pytest.raises(InputError, match="sum to the network's 12 layers"):
        launch_schedule([], merged.layers, launch_layers=[6, 5])
    with pytest.raises(InputError, match="entries must be 1 to 32"):
        launch_schedule([], merged.layers, launch_layers=[0, 12])


def test_kernel_options_name_their_defines():
    first, chain = kernel_defines(["chain-async-prologue", "pixels-shared", "pixels-shared"], 1024)
    assert first == ("-DGM_PIXELS_SHARED=1",) and chain == ("-DCH_ASYNC_PROLOGUE=1",)
    assert kernel_defines([], 65536) == ((), ())
    with pytest.raises(InputError, match="unknown kernel options"):
        kernel_defines(["faster"], 1024)
    with pytest.raises(InputError, match="up to 1024 neurons, not 4096"):
        kernel_defines(["pixels-shared"], 4096)


@pytest.mark.parametrize("options", [{"fused_head": True}, {"launch_layers": (6, 4, 8, 12)}])
def test_the_twin_gives_the_same_bits_on_another_schedule(options):
    """Only the launches move: values, live rows and non-zeros per layer are the default's."""
    network = generate_network(1024, 30, seed=8)
    inputs = generate_inputs(900, 1024, seed=8)
    default = make_engine("gpu-merged-twin", network)
    variant = make_engine("gpu-merged-twin", network, **options)
    assert variant.chunks == [6, 4, 8, 12] and default.chunks == [1, 1, 1, 1, 2, 4, 8, 12]
    want, got = default.run(inputs), variant.run(inputs)
    assert np.array_equal(got.live_rows, want.live_rows) and got.live_rows.size
    assert (got.values != want.values).nnz == 0
    assert got.live_rows_by_layer == want.live_rows_by_layer and got.nonzeros_by_layer == want.nonzeros_by_layer
    launches = [r for r in got.trace if r.kernel == "gpu.gc_merged"]
    assert [r.fused_layers for r in launches] == [6, 4, 8, 12]


# --- the benchmark, with fakes ---------------------------------------------------------------


def test_the_benchmark_reads_its_arguments(monkeypatch):
    monkeypatch.delenv("OUT", raising=False)
    args = bench.parse_args(["--variants", "fused-head,default", "--rounds", "5"])
    assert args.variants == ["default", "fused-head"] and args.rounds == 5 and args.out == bench.RESULTS
    monkeypatch.setenv("OUT", "/somewhere")
    assert str(bench.parse_args([]).out) == "/somewhere"
    assert bench.parse_args([]).variants == list(bench.VARIANTS)
    with pytest.raises(SystemExit):
        bench.parse_args(["--variants", "default,nonsense"])
    assert [bench.key(p) for p in bench.points(["default", "fused-head"])] == [
        "default/fused",
        "default/off",
        "fused-head/fused",
        "fused-head/off",
    ]


class FakeEngine:
    """Runs in a constant time; its outputs are what the test says."""

    def __init__(self, outputs, seconds, chunks=(1, 2)):
        self.outputs, self.seconds, self.chunks, self.runs = outputs, seconds, list(chunks), 0

    def run_device(self, batch):
        self.runs += 1
        return self.seconds


def outputs(values_shift=0.0, counts=(10, 5, 3)):
    ids = np.array([0, 4, 7])
    return {
        "ids": ids,
        "values": np.full((3, 4), 1.5 + values_shift, np.float32),
        "counts": np.array(counts),
        "nnz": np.array([40, 20, 12], np.uint64),
        "tiles": np.ones((3, 1), np.uint8),
    }


def test_the_benchmark_records_failures_and_times_only_what_passed(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["benchmarks/gc_merged_variants.py", "--out", str(tmp_path)])
    truth = np.array([1, 5, 8])
    cpu = SimpleNamespace(live_rows=np.array([0, 4, 7]), values=_Rows(np.full((8, 4), 1.5, np.float32)))
    seconds = {"default": 400e-6, "fused-head": 300e-6, "chain-async": 390e-6}
    engines = {}

    def build(variant, monitor):
        if variant == "fused-head+chain-async":
            raise RuntimeError("nvcc: error in gc_chain.cu")
        shift = 1.0 if variant == "chain-async" and monitor == "off" else 0.0  # a wrong variant
        extra = 5e-6 if monitor == "fused" else 0.0
        engine = FakeEngine(outputs(shift), seconds.get(variant, 500e-6) + extra)
        engines[f"{variant}/{monitor}"] = engine
        return engine, None

    labels = ["default", "fused-head", "chain-async", "fused-head+chain-async", "fused-head+chain-async+expand+pixels"]
    chosen = bench.points(labels)
    refused = {"fused-head+chain-async+expand+pixels": "probe ran past 240 s"}
    records, ready = bench.check_all(chosen, build, lambda e, b: e.outputs, truth, cpu, refused)
    assert records["fused-head+chain-async/fused"]["status"] == "failed"
    assert "nvcc: error" in records["fused-head+chain-async/fused"]["error"]
    assert records["fused-head+chain-async+expand+pixels/off"]["status"] == "refused"
    assert records["chain-async/off"]["status"] == "wrong" and not records["chain-async/off"]["same_values_as_default"]
    assert records["chain-async/fused"]["status"] == "passed"
    assert set(ready) == {"default/fused", "default/off", "fused-head/fused", "fused-head/off", "chain-async/fused"}
    assert records["fused-head/fused"]["passed_truth"] and records["fused-head/fused"]["max_abs_diff_vs_cpu"] == 0.0

    cases = {name: (lambda pair=pair: pair[0].run_device(pair[1])) for name, pair in ready.items()}
    times = bench.take_turns(cases, rounds=4)
    assert engines["chain-async/off"].runs == bench.WARMUP_RUNS  # checked, never timed
    launches = {name: [1e-6, 2e-6] for name in ready}
    args = bench.parse_args(["--out", str(tmp_path), "--rounds", "4"])
    path = bench.finish(records, times, launches, "Fake GPU", args)

    data = json.loads(path.read_text())
    assert data["device"] == "Fake GPU" and data["benchmark"] == "gc_merged_variants"
    assert data["command"].startswith("python -m benchmarks.gc_merged_variants") and data["commit"] and data["date"]
    by_name = {f"{r['variant']}/{r['monitor']}": r for r in data["engines"]}
    fused = by_name["fused-head/fused"]
    assert fused["median_seconds"] == pytest.approx(305e-6) and fused["vs_default"] == pytest.approx(305 / 405)
    assert fused["monitor_extra_seconds"] == pytest.approx(5e-6)
    assert fused["monitor_share_of_fused"] == pytest.approx(5 / 305)
    assert "monitor_extra_seconds" not in by_name["chain-async/fused"]  # its unmonitored run was wrong
    assert data["bars"]["fastest_fused"] == "fused-head/fused"
    assert data["bars"]["meets_time_bar"] is False and data["bars"]["meets_monitor_bar"] is True
    printed = capsys.readouterr().out
    assert "fused-head/fused" in printed and "failed" in printed and "RuntimeError: nvcc" in printed


class _Rows:
    """A CSR matrix's row indexing and ``toarray``, as the CPU engine's values offer them."""

    def __init__(self, dense):
        self.dense = dense

    def __getitem__(self, rows):
        return SimpleNamespace(toarray=lambda: self.dense[rows])


def test_a_last_chain_launch_that_expands_leaves_no_expansion_in_the_trace():
    """``chain-expand-final``: the last launch (the chain kernel's) writes its rows n wide
    too, so the trace has no ``gpu.expand`` and that launch's bytes written grow by rows x n x
    4; without a chain kernel in the last launch the option changes nothing."""
    network = generate_network(1024, 12, seed=3)
    inputs = generate_inputs(300, 1024, seed=3)
    plain = make_engine("gpu-merged-twin", network).run(inputs)
    expanded = make_engine("gpu-merged-twin", network, kernel_options=("chain-expand-final",)).run(inputs)
    assert [r.kernel for r in plain.trace].count("gpu.expand") == 1
    assert [r.kernel for r in expanded.trace] == [r.kernel for r in plain.trace if r.kernel != "gpu.expand"]
    last, last_plain = (
        next(r for r in reversed(out.trace) if r.kernel == "gpu.gc_merged") for out in (expanded, plain)
    )
    assert last.variant.startswith("C") and last.rows_out > 0
    assert last.bytes_written == last_plain.bytes_written + last.rows_out * 1024 * 4
    assert (expanded.values != plain.values).nnz == 0
    blocks = make_engine("gpu-merged-twin", network, chain_rows=0, kernel_options=("chain-expand-final",))
    assert [r.kernel for r in blocks.run(inputs).trace].count("gpu.expand") == 1
    with pytest.raises(InputError, match="unknown kernel options"):
        make_engine("gpu-merged-twin", network, kernel_options=("chain-expand-everything",))


# --- nvcc, asked for by name -------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")
# four builds of the merged kernels with every option on: minutes of nvcc on a 2-core machine
@pytest.mark.skipif(not os.environ.get("SPARTAN_BUILD_MERGED_VARIANTS"), reason="set SPARTAN_BUILD_MERGED_VARIANTS=1")
def test_every_kernel_option_compiles_for_sm_80_and_sm_90(tmp_path):
    first = tuple(define for first, _ in KERNEL_OPTIONS.values() for define in first)
    chain = tuple(define for _, chain in KERNEL_OPTIONS.values() for define in chain)
    kernels = data_folder("kernels")
    builds = [
        (kernels / "gc_merged.cu", arch, (*merged_module_options(256, later=False), "-DGM_COUNT_MAX=64", *first))
        for arch in ("sm_80", "sm_90")
    ] + [(kernels / "gc_chain.cu", arch, chain) for arch in ("sm_80", "sm_90")]

    def build(item):
        source, arch, options = item
        out = tmp_path / f"{source.stem}-{arch}.cubin"
        command = ["nvcc", "-std=c++17", f"-arch={arch}", *options, "-cubin", "-Xptxas", "-v", "-o", str(out)]
        return subprocess.run([*command, str(source)], capture_output=True, text=True, timeout=900)

    with ThreadPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(build, builds))
    for (source, arch, _), run in zip(builds, done):
        assert run.returncode == 0, f"{source.name} {arch}: {run.stderr[-3000:]}"


# --- on a GPU ----------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize(
    "options",
    [
        {"fused_head": True},
        {"kernel_options": ("chain-async-prologue",)},
        {"fused_head": True, "kernel_options": ("chain-async-prologue", "pixels-shared")},
        {"kernel_options": ("chain-expand-final",)},
        {"kernel_options": ("chain-expand-final",), "chain_rows": 0},  # the last launch on block tiles
        {"fused_head": True, "kernel_options": tuple(KERNEL_OPTIONS)},
        {"launch_layers": (6, 4, 20), "kernel_options": ("chain-async-prologue",)},
        {"fused_head": True, "kernel_options": tuple(KERNEL_OPTIONS), "monitor": False},
        {"fused_head": True, "kernel_options": tuple(KERNEL_OPTIONS), "varied_inputs": True},
    ],
)
def test_each_variant_matches_the_twin_exactly(options):
    """Values, live rows and non-zeros per layer bit-equal to the twin's on the same schedule
    and kernel options (they change no result), and the same kernels in the traces."""
    network = generate_network(1024, 30, seed=8)
    inputs = generate_inputs(900, 1024, seed=8)
    options = dict(options)
    if options.pop("varied_inputs", False):  # a first launch on floats
        inputs.data *= np.random.default_rng(8).uniform(0.5, 1.5, inputs.nnz).astype(np.float32)
    gpu = make_engine("gpu-merged", network, **options).run(inputs)
    twin = make_engine("gpu-merged-twin", network, **options).run(inputs)
    kernels = ("gpu.scatter_rows", "gpu.gc_merged", "gpu.expand")
    assert [(r.kernel, r.bytes_written) for r in gpu.trace if r.kernel in kernels] == [
        (r.kernel, r.bytes_written) for r in twin.trace if r.kernel in kernels
    ]
    assert np.array_equal(gpu.live_rows, twin.live_rows) and gpu.live_rows.size
    assert gpu.live_rows_by_layer == twin.live_rows_by_layer and gpu.nonzeros_by_layer == twin.nonzeros_by_layer
    assert (gpu.values != twin.values).nnz == 0


def test_probes_turn_down_what_crashed_hung_or_was_wrong(monkeypatch):
    """One child process a set of kernel options; a variant sharing a set shares its verdict."""
    verdicts = {
        "chain-async": "some log line\n" + json.dumps({"variant": "chain-async", "ok": True}),
        "fused-head+chain-async+expand": json.dumps({"variant": "x", "ok": False, "categories": 3}),
        "fused-head+chain-async+expand+pixels": None,  # hangs
        "fused-head+chain-async+expand+pixels+scatter": "",  # crashes
    }
    seen = []

    def run(command, **kwargs):
        label = command[command.index("--probe") + 1]
        seen.append(label)
        if verdicts[label] is None:
            raise subprocess.TimeoutExpired(command, kwargs["timeout"])
        return subprocess.CompletedProcess(command, 0 if verdicts[label] else -11, verdicts[label], "illegal address")

    monkeypatch.setattr(bench.subprocess, "run", run)
    args = bench.parse_args([])
    refused = bench.probe_refusals(args)
    assert sorted(seen) == sorted(verdicts)  # long-tail shares the expand variant's options: no probe of its own
    assert set(refused) == set(bench.VARIANTS) - {"default", "fused-head", "chain-async", "fused-head+chain-async"}
    assert "ran past 240 s" in refused["fused-head+chain-async+expand+pixels"]
    assert "exited -11: illegal address" in refused["fused-head+chain-async+expand+pixels+scatter"]
    assert "'ok': False" in refused["fused-head+chain-async+expand+long-tail"]


def test_the_benchmark_runs_end_to_end_on_a_fake_gpu(tmp_path, monkeypatch, capsys):
    """main() with the GPU side replaced: every variant checked, timed by turns and written."""
    import benchmarks._merged_variants_gpu as gpu_side

    class FakeSide:
        truth = np.array([1, 5, 8])
        cpu = None
        device = "Fake GPU"

        def __init__(self, data, *, cpu):
            self.cpu_asked = cpu

        def build(self, options, monitor):
            seconds = 290e-6 if options.get("fused_head") else 380e-6
            return FakeEngine(outputs(), seconds + (6e-6 if monitor == "fused" else 0.0)), None

        @staticmethod
        def read(engine, batch):
            return engine.outputs

        @staticmethod
        def launch_times(engine, batch):
            return [1e-6]

    monkeypatch.setattr(gpu_side, "GpuSide", FakeSide)
    monkeypatch.setattr(sys, "argv", ["benchmarks/gc_merged_variants.py"])
    assert bench.main(["--no-probe", "--no-cpu", "--rounds", "3", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("gc_merged_variants-*.json")
    data = json.loads(path.read_text())
    assert len(data["engines"]) == 2 * len(bench.VARIANTS)
    assert all(r["status"] == "passed" and r["rounds"] == 3 for r in data["engines"])
    assert data["bars"]["meets_time_bar"] is True and data["bars"]["meets_monitor_bar"] is False  # 6 of 296 us
    assert "fastest fused" in capsys.readouterr().out


def test_the_watchdog_writes_what_was_checked_and_stops(tmp_path, monkeypatch):
    import time

    stopped = []
    monkeypatch.setattr(bench.os, "kill", lambda pid, sig: stopped.append(sig))
    state = {"phase": "checks", "records": {"default/fused": {"status": "passed", "options": {}}}}
    bench.watchdog(0.05, tmp_path, state)
    for _ in range(100):
        if stopped:
            break
        time.sleep(0.05)
    assert stopped == [bench.signal.SIGTERM]
    data = json.loads((tmp_path / "gc_merged_variants-unfinished.json").read_text())
    assert data["phase"] == "checks" and data["records"]["default/fused"]["status"] == "passed"
    assert bench.watchdog(60, tmp_path, state).cancel() is None  # a finished run cancels it
