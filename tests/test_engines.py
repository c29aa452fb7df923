"""Every backend against the reference engine, and the reference against the official truth."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from spartan_py import Network, generate_inputs, generate_network, infer, make_engine, resolve_backend
from spartan_py.engines.reference import ReferenceEngine
from spartan_py.errors import InputError

# Backends checked against the reference here; GPU ones carry the gpu marker.
BACKENDS = [
    pytest.param("cpu", id="cpu"),
    pytest.param("gpu-twin", id="gpu-twin"),
    pytest.param("gpu-merged-twin", id="gpu-merged-twin"),
    pytest.param("gpu", id="gpu", marks=pytest.mark.gpu),
    pytest.param("gpu-merged", id="gpu-merged", marks=pytest.mark.gpu),
]


def assert_same_run(got, want, *, exact_categories=True):
    """Same categories, values within float32 rounding.

    Per-layer counts may differ by a few rows: a value that is exactly zero in real
    arithmetic (say 0.3 - 0.3) can round to +-1e-8 in float32 and to 0 in float64; such a
    row lives one layer longer in one engine, then dies in both.
    """
    if exact_categories:
        assert np.array_equal(got.live_rows, want.live_rows)
        for a, b in zip(got.live_rows_by_layer, want.live_rows_by_layer):
            assert abs(a - b) <= 8 + 0.05 * b
    difference = abs(got.values.astype(np.float64) - want.values.astype(np.float64))
    scale = max(1.0, abs(want.values).max() if want.values.nnz else 1.0)
    assert (difference.max() if difference.nnz else 0.0) <= 1e-5 * scale


def random_inputs(rows, neurons, density, seed):
    rng = np.random.default_rng(seed)
    matrix = sp.random(rows, neurons, density=density, format="csr", dtype=np.float32, random_state=rng)
    matrix.data = rng.uniform(0.05, 1.0, matrix.nnz).astype(np.float32)
    return matrix


@pytest.mark.parametrize("backend", BACKENDS)
def test_generated_digits_match_reference(backend):
    network = generate_network(1024, 30, seed=3)
    inputs = generate_inputs(700, 1024, seed=3)
    want = ReferenceEngine(network).run(inputs)
    got = make_engine(backend, network).run(inputs)
    assert 0 < want.live_rows.size < 700
    assert_same_run(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("neurons, density", [(1024, 0.02), (1024, 0.4), (4096, 0.05)])
def test_random_inputs_match_reference(backend, neurons, density):
    network = generate_network(neurons, 8, seed=1)
    inputs = random_inputs(300, neurons, density, seed=neurons)
    inputs.data[inputs.indptr[7] : inputs.indptr[8]] = 0  # an empty row
    inputs.eliminate_zeros()
    want = ReferenceEngine(network).run(inputs)
    got = make_engine(backend, network).run(inputs)
    assert_same_run(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_irregular_signed_weights(backend):
    """A general network: uneven degrees (some outputs with no input), negative weights."""
    rng = np.random.default_rng(11)
    layers = []
    for _ in range(5):
        w = sp.random(1024, 1024, density=0.02, format="csr", dtype=np.float32, random_state=rng)
        w.data = rng.uniform(-0.2, 0.5, w.nnz).astype(np.float32)
        w = sp.csr_matrix(w.multiply(rng.random((1, 1024)) > 0.05))
        layers.append(w)
    network = Network(1024, tuple(layers), bias=-0.1, clamp=2.0)
    inputs = random_inputs(257, 1024, 0.1, seed=2)
    want = ReferenceEngine(network).run(inputs)
    got = make_engine(backend, network).run(inputs)
    assert want.live_rows.size > 0
    assert_same_run(got, want, exact_categories=False)


@pytest.mark.parametrize("backend", BACKENDS)
def test_everything_dies(backend):
    network = Network(1024, tuple(generate_network(1024, 3).weights), bias=-50.0)
    got = make_engine(backend, network).run(generate_inputs(40, 1024))
    assert got.live_rows.size == 0 and got.live_rows_by_layer == [0, 0, 0] and got.values.nnz == 0


def test_cpu_batches_agree():
    network = generate_network(1024, 12, seed=0)
    inputs = generate_inputs(1000, 1024, seed=9)
    whole = make_engine("cpu", network).run(inputs)
    batched = make_engine("cpu", network, batch_bytes=300 * 8 * 1024).run(inputs)
    assert_same_run(batched, whole)
    assert whole.values.shape == (1000, 1024)


@pytest.mark.parametrize("merged", [False, True])
def test_trace_records_every_layer(merged):
    network = generate_network(1024, 10, seed=0)
    out = make_engine("cpu", network, merged=merged).run(generate_inputs(500, 1024))
    layers = [r.layer for r in out.trace if r.kernel == "cpu.tile_layer"]
    assert layers == list(range(1, 11))
    first = out.trace[0]
    assert first.variant == ("merged-csr-input" if merged else "csr-input")
    if merged:  # 64 distinct columns of 32 inputs: 1/16 of the work, the useful work unchanged
        assert first.executed_macs == first.rows_in * 32 * 64 and first.cols == 64
        assert first.useful_macs > first.executed_macs
    else:
        assert first.executed_macs == first.rows_in * 32 * 1024
        assert 0 < first.useful_macs < first.executed_macs
    assert all(r.measured_us > 0 for r in out.trace)


def test_auto_backend_without_gpu():
    from spartan_py.engines import unavailable_reason

    expected = "gpu" if unavailable_reason("gpu") is None else "cpu"
    assert resolve_backend("auto") == expected


@pytest.mark.parametrize(
    "backend",
    [
        "reference",
        "cpu",
        "gpu-merged-twin",
        pytest.param("gpu", marks=pytest.mark.gpu),
        pytest.param("gpu-merged", marks=pytest.mark.gpu),
    ],
)
def test_official_first1200(backend, official_network, official_first1200):
    inputs, truth = official_first1200
    result = infer(official_network, inputs, backend=backend, truth=truth)
    assert result.passed and result.categories.size == 19


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend",
    ["reference", "cpu", pytest.param("gpu", marks=pytest.mark.gpu), pytest.param("gpu-merged", marks=pytest.mark.gpu)],
)
def test_official_proxy60k(backend, official_network, official_proxy):
    inputs, truth = official_proxy
    result = infer(official_network, inputs, backend=backend, truth=truth)
    assert result.passed and result.categories.size == 1475
    live = result.live_rows_by_layer
    # The data README's counts (float32 semantics); float64 breaks a few exact-zero ties
    # the other way (14225 after layer 4), hence the tolerance.
    for got, want in zip((live[0], live[1], live[3], live[5], live[9]), (57125, 44060, 14200, 4275, 1625)):
        assert abs(got - want) <= 0.005 * want
    assert all(v == 1475 for v in live[60:])  # float32 settles at layer 27, float64 at 55
    assert result.nonzeros_by_layer[-1] == 1475 * 1024  # every live row is 32 in all columns
    assert np.all(result.values[result.categories - 1].data == 32.0)


@pytest.mark.gpu
@pytest.mark.parametrize("rows_per_tile, threads", [(12, 1024), (16, 1024), (4, 1024), (16, 512)])
def test_gpu_tile_heights(rows_per_tile, threads):
    """Kernel instances, several batches (row counts not multiples of a tile), monitor on."""
    from spartan_py.engines.rows.engine import RowsEngine

    network = generate_network(1024, 25, seed=4)
    inputs = generate_inputs(1000, 1024, seed=6)
    want = ReferenceEngine(network).run(inputs)
    engine = RowsEngine(network, rows_per_tile=rows_per_tile, threads=threads, max_batch_rows=352)
    got = engine.run(inputs)
    assert_same_run(got, want)
    launches = [r for r in got.trace if r.kernel == "gpu.gc_layer"]
    assert launches[0].layer == 1 and all(r.measured_us > 0 for r in launches)
    # the twin records one resident block per SM: true of every 1024-thread instance
    assert all(
        r.resident_blocks_per_sm == (1 if threads == 1024 else engine.grid_blocks() // engine.sm_count)
        for r in launches
    )
    assert len(launches) == 3 * len(engine.chunks)  # 1000 rows in batches of 352
    copies = [r for r in got.trace if r.kernel in ("gpu.copy_h2d", "gpu.copy_d2h")]
    assert len(copies) == 6 and all(r.measured_us > 0 and r.bytes_read > 0 for r in copies)
    syncs = [r for r in got.trace if r.kernel == "gpu.sync"]
    assert [r.host_syncs for r in syncs] == [1, 1, 1] and all(np.isnan(r.measured_us) for r in syncs)
    every_layer = RowsEngine(network, rows_per_tile=rows_per_tile, threads=threads, compact_every=1).run(inputs)
    assert np.array_equal(every_layer.live_rows, got.live_rows)
    assert every_layer.live_rows_by_layer == got.live_rows_by_layer
    assert every_layer.nonzeros_by_layer == got.nonzeros_by_layer


def test_chunk_schedule():
    from spartan_py.engines.shared.launches import chunk_schedule

    assert chunk_schedule(120) == [1, 1, 1, 1, 2, 4, 8, 16, 32, 32, 22]
    assert chunk_schedule(3) == [1, 1, 1]
    assert chunk_schedule(7, 3) == [3, 3, 1]
    assert chunk_schedule(12, "doubling", 3) == [1, 1, 1, 1, 2, 3, 3]
    assert chunk_schedule(120, "doubling", 32, 4) == [4, 2, 4, 8, 16, 32, 32, 22]  # the rows kernel's
    assert chunk_schedule(12, "doubling", 3, 4) == [3, 1, 2, 3, 3]
    assert chunk_schedule(3, "doubling", 32, 4) == [3]
    assert chunk_schedule(7, 3, 2) == [3, 3, 1]  # an explicit launch size is kept
    with pytest.raises(ValueError):
        chunk_schedule(5, 0)


def test_one_row_tiles_take_fewer_layers_a_launch():
    """A one-row tile reads every layer's weights once per row: its launches are capped by
    the layers' bytes (the twin, which shares the schedule, launches as the GPU would)."""
    from spartan_py.engines.rows.plan import ONE_ROW_LAUNCH_BYTES, launch_layer_cap
    from spartan_py.engines.rows.twin import RowsTwinEngine
    from spartan_py.engines.shared.launches import MAX_LAUNCH_LAYERS

    network = generate_network(16384, 24, seed=0)  # layers of 1 to 2 MB
    twin = RowsTwinEngine(network)
    largest = max(plan.device_bytes for plan in twin.plans)
    cap = launch_layer_cap(twin.plans, rows_per_tile=1)
    assert cap == ONE_ROW_LAUNCH_BYTES // largest and 1 <= cap < MAX_LAUNCH_LAYERS
    assert launch_layer_cap(twin.plans, rows_per_tile=4) == MAX_LAUNCH_LAYERS
    assert max(twin.chunks) == cap and sum(twin.chunks) == network.layers


@pytest.mark.gpu
@pytest.mark.parametrize("engine_name", ["gpu", "gpu-merged"])
def test_graph_replays_give_the_eager_launches_counts(engine_name):
    """A batch replayed as one CUDA graph (how the benchmarks time it) counts the same live
    rows and non-zeros per layer as its eager, per-launch-timed run, replay after replay, and
    its work counters hold: the first layer's as the eager run's (every tile computes it),
    at least the live rows entering each layer after it (which rows share a tile there
    depends on the order compaction wrote them in)."""
    network = generate_network(1024, 12, seed=4)
    inputs = generate_inputs(700, 1024, seed=4)
    engine = make_engine(engine_name, network)
    batch = engine.upload(inputs)
    engine.run_device(batch, per_layer_times=True)
    eager = (batch.counts.get(), batch.nnz_counts.get(), batch.layer_work())
    for _ in range(2):
        assert engine.run_device(batch) > 0
        assert np.array_equal(batch.counts.get(), eager[0])
        assert np.array_equal(batch.nnz_counts.get(), eager[1])
        work = batch.layer_work()
        for name, counted in work.items():
            assert counted[0] == eager[2][name][0], name
        assert np.all(work["row_layers"] >= eager[0][:-1])
    assert batch.graph is not None


@pytest.mark.gpu
def test_gpu_monitor_counts_match_outputs():
    """The fused monitor's per-(row, 32-column) counts add up to the rows' non-zeros."""
    import cupy as cp

    from spartan_py.engines.rows.engine import RowsEngine

    network = generate_network(1024, 3, seed=1)
    inputs = generate_inputs(200, 1024, seed=2)
    engine = RowsEngine(network, compact_every=1)
    batch = engine.upload(inputs)
    engine.run_device(batch, per_layer_times=True)
    live = int(batch.counts[3].get())  # rows written by the last launch, each with its counts
    monitor = batch.tile_nnz[: live * 32].reshape(live, 32).get()
    assert int(monitor.sum()) == int(batch.nnz_counts[3].get())
    assert np.all(monitor >= 0) and np.all(monitor <= 32)
    assert np.array_equal(monitor.sum(axis=1), batch.row_nnz[:live].get())
    del cp


@pytest.mark.gpu
def test_gpu_monitor_counts_natural_tiles_of_renumbered_outputs():
    """Where a launch ends at a layer whose outputs the kernel keeps renumbered, the fused
    monitor still counts each row's natural 32-column tiles."""
    from spartan_py.engines.rows.engine import RowsEngine

    network = generate_network(1024, 3, seed=1)
    inputs = generate_inputs(300, 1024, seed=2)
    engine = RowsEngine(network, compact_every=2, monitor="sampled", monitor_every=2)  # launch 1 monitored
    order = engine.output_orders[1]
    assert not np.array_equal(order, np.arange(1024))
    batch = engine.upload(inputs)
    engine.run_device(batch, per_layer_times=True)
    live = int(batch.counts[2].get())
    values = batch.buffers[1].values[: live * 1024].reshape(live, 1024).get()  # launch 1's output
    natural = np.empty_like(values)
    natural[:, order] = values
    monitor = batch.tile_nnz[: live * 32].reshape(live, 32).get()
    assert live > 0
    assert np.array_equal(monitor, np.count_nonzero(natural.reshape(live, 32, 32), axis=2))


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("compact_every", "input_counts", "unmergeable"),
    [("doubling", True, False), (1, True, False), (3, True, True), ("doubling", False, False)],
)
def test_gpu_twin_matches_gpu_exactly(compact_every, input_counts, unmergeable):
    """The CPU twin computes the GPU kernel's float32 results bit for bit, and its trace,
    with the first launch counting the binary inputs (in a launch of one layer or of three)
    or multiplying them."""
    from spartan_py.trace import to_frame

    network = generate_network(1024, 30, seed=8, unmergeable=unmergeable)
    inputs = generate_inputs(900, 1024, seed=8)
    options = {"max_batch_rows": 500, "compact_every": compact_every, "input_counts": input_counts}
    engine = make_engine("gpu", network, **options)
    gpu = engine.run(inputs)
    twin = make_engine("gpu-twin", network, grid_blocks=engine.grid_blocks(), **options).run(inputs)
    assert np.array_equal(gpu.live_rows, twin.live_rows)
    assert gpu.live_rows_by_layer == twin.live_rows_by_layer
    assert gpu.nonzeros_by_layer == twin.nonzeros_by_layer
    assert (gpu.values != twin.values).nnz == 0
    got, want = to_frame(gpu.trace), to_frame(twin.trace)
    work = ("executed_macs", "weight_loads")
    columns = [c for c in got.columns if c not in ("measured_us", "device", *work)]
    assert got[columns].equals(want[columns])
    # executed multiply-adds and weight loads depend on which rows share a tile (the GPU's
    # compaction order) only in launches that fuse several layers; single-layer launches agree
    single = (got["kernel"] == "gpu.gc_layer") & (got["fused_layers"] == 1)
    launches = got["kernel"] == "gpu.gc_layer"
    assert (got.loc[launches, "weight_loads"] > 0).all()
    for column in work:
        assert got.loc[single, column].equals(want.loc[single, column])
        ratio = got.loc[launches, column].sum() / want.loc[launches, column].sum()
        assert 0.9 < ratio < 1.1
    plans = make_engine("gpu-twin", network, **options).plans
    for record in (r for r in gpu.trace if r.kernel == "gpu.gc_layer"):
        assert record.executed_macs <= executed_upper_bound(record, plans)
    assert twin.simulated and not gpu.simulated
    assert got.loc[launches, "variant"].iloc[0][0] == ("P" if input_counts else "R")


def executed_upper_bound(record, plans) -> int:
    """Multiply-adds of a launch if every tile entering it ran all its layers."""
    layers = plans[record.layer - 1 : record.layer - 1 + record.fused_layers]
    return sum(record.blocks * record.block_rows * record.cols * plan.steps for plan in layers)


@pytest.mark.parametrize("compact_tiles", [True, False])
def test_twin_counts_rows_that_tiles_compute(compact_tiles):
    """The twin's executed work stops with a tile's last live row (as the kernel's does); a
    compacting tile computes its live rows rounded up to 4 after a launch's first layer."""
    from spartan_py.engines.rows.twin import RowsTwinEngine

    network = generate_network(1024, 40, seed=3)
    inputs = generate_inputs(3000, 1024, seed=5)
    options = {"input_counts": False, "compact_tiles": compact_tiles}  # every launch multiplies
    out = RowsTwinEngine(network, **options).run(inputs)
    launches = [r for r in out.trace if r.kernel == "gpu.gc_layer"]
    plans = RowsTwinEngine(network).plans
    for record in launches:
        first = record.layer - 1
        layers = plans[first : first + record.fused_layers]
        per_row = [1024 * plan.steps for plan in layers]
        # at least: every entering tile's rows at the first layer, then the live rows (packed
        # into whole tiles where tiles do not compact); at most every entering tile throughout
        live = [out.live_rows_by_layer[first + i - 1] for i in range(1, len(layers))]
        if not compact_tiles:
            live = [-(-rows // record.block_rows) * record.block_rows for rows in live]
        lower = sum(rows * work for rows, work in zip([record.blocks * record.block_rows, *live], per_row))
        assert lower <= record.executed_macs <= executed_upper_bound(record, plans)
    assert any(r.executed_macs < executed_upper_bound(r, plans) for r in launches)
    assert all(0 < r.useful_macs <= r.executed_macs for r in launches)


def test_compacting_tiles_compute_fewer_rows():
    """Tiles that compact compute fewer rows in launches of several layers, the same results,
    and load as many indices."""
    from spartan_py.engines.rows.twin import RowsTwinEngine

    network = generate_network(1024, 24, seed=3)
    inputs = generate_inputs(3000, 1024, seed=5)
    runs = [RowsTwinEngine(network, compact_tiles=c).run(inputs) for c in (True, False)]
    assert_same_run(*runs)
    executed = [sum(r.executed_macs for r in run.trace if r.kernel == "gpu.gc_layer") for run in runs]
    assert executed[0] < 0.95 * executed[1]
    # ... but a tile loads every index of each layer it computes, whatever rows it keeps
    loads = [[r.weight_loads for r in run.trace if r.kernel == "gpu.gc_layer"] for run in runs]
    assert loads[0] == loads[1] and min(loads[0]) > 0
    whole = [r for r in runs[1].trace if r.kernel == "gpu.gc_layer" and r.variant.startswith("R")]
    assert all(r.weight_loads * r.block_rows == r.executed_macs for r in whole)


def test_counts_path_stages_its_pixel_table_where_it_fits():
    """At 1024 neurons the first launch holds the counts path's pixel table in shared memory
    after its 16-row tile, unless the limit given is smaller; at 4096 the table does not fit.
    Records count the tile's bytes only (a GPU with less room runs the launch without the
    table: a what-if replay must not refuse it)."""
    from spartan_py.engines.rows.twin import RowsTwinEngine

    for neurons, rows_per_tile, staged in ((1024, 16, True), (4096, 4, False)):
        engine = RowsTwinEngine(generate_network(neurons, 6, seed=1))
        table = engine.input_columns.nbytes
        assert engine.staged_table_bytes == staged * table
        out = engine.run(generate_inputs(300, neurons, seed=1))
        first, second = [r for r in out.trace if r.kernel == "gpu.gc_layer"][:2]
        assert first.variant.startswith("P") and second.variant.startswith("R")
        tile = rows_per_tile * (neurons + 32) * 4
        assert first.block_shared_bytes == second.block_shared_bytes == tile
        engine.plan_pixel_table(tile + table - 1)  # a GPU that allows less
        assert engine.staged_table_bytes == 0


def test_rows_computed_rounds_live_rows_up_to_four():
    from spartan_py.engines.rows.plan import compacts_tile, rows_computed

    live = np.array([0, 1, 5, 16, 9])
    assert rows_computed(live, 16, True) == 4 + 8 + 16 + 12
    assert rows_computed(live, 16, False) == 4 * 16
    assert rows_computed(np.array([3, 4]), 4, True) == 8  # 4-row tiles do not compact
    assert [compacts_tile(r) for r in (2, 4, 6, 8, 12, 16)] == [False, False, False, True, True, True]


@pytest.mark.parametrize(
    "backend", [pytest.param("gpu-twin", id="gpu-twin"), pytest.param("gpu", id="gpu", marks=pytest.mark.gpu)]
)
def test_monitor_modes_change_only_the_monitoring(backend):
    network = generate_network(1024, 12, seed=5)
    inputs = generate_inputs(500, 1024, seed=5)
    want = ReferenceEngine(network).run(inputs)
    traces = {}
    for mode in ("fused", "sampled", "software", "off"):
        got = make_engine(backend, network, monitor=mode, monitor_every=4).run(inputs, run_id=mode)
        assert_same_run(got, want)
        traces[mode] = got.trace
    layers = [r for r in traces["sampled"] if r.kernel == "gpu.gc_layer"]
    assert [r.monitor_bytes > 0 for r in layers] == [i % 4 == 0 for i in range(len(layers))]
    assert all(r.monitor_mode == "fused" and r.monitor_bytes > 0 for r in traces["fused"] if r.kernel == "gpu.gc_layer")
    assert all(r.monitor_bytes == 0 for r in traces["off"])
    software = traces["software"]
    launches = [r for r in software if r.kernel == "gpu.gc_layer"]
    passes = [r for r in software if r.kernel == "gpu.monitor_pass"]
    assert len(launches) == len(passes) == network.layers  # one layer per launch, a pass after each
    assert all(p.bytes_read == launch.rows_out * 1024 * 4 for p, launch in zip(passes, launches))
    assert sum(r.host_syncs for r in software if r.variant == "monitor") == 2 * network.layers
    with pytest.raises(InputError, match="monitor must be one of"):
        make_engine(backend, network, monitor="hardware")


@pytest.mark.parametrize("unmergeable", [False, True])
def test_pixel_outputs_give_the_first_layers_sums(unmergeable):
    """The rows kernel's counts path, its table and its premise: with binary inputs and one
    weight, each output's sum (the twin's, in the bank schedule's order) is the fmaf chain's
    value at its count of lit inputs; the trace's first launch is instance P, an increment
    per lit input and output it feeds plus a lookup per output."""
    from spartan_py.engines.rows.twin import RowsTwinEngine, twin_layer
    from spartan_py.engines.shared.input_counts import NO_COLUMN, pixel_outputs
    from spartan_py.engines.shared.layer_plan import plan_layer

    network = generate_network(1024, 2, seed=4, unmergeable=unmergeable)
    weights = network.weights[0]
    plan = plan_layer(weights)
    table = pixel_outputs(weights, plan)
    assert table is not None and table.dtype == np.uint16 and table.shape == (1024, 32)
    inputs = generate_inputs(60, 1024, seed=4)
    dense = inputs.toarray().astype(np.float32)
    counts = np.zeros((60, 1024), np.int64)
    for pixel, slot in zip(*np.nonzero(table != NO_COLUMN)):
        counts[:, table[pixel, slot]] += dense[:, pixel] != 0
    assert np.array_equal(counts, (dense != 0).astype(np.int64) @ (weights.toarray() != 0))
    chain = [np.float32(0)]
    for _ in range(plan.steps):  # fmaf: the product of two float32s is exact in float64
        chain.append(np.float32(np.float64(plan.uniform) * np.float64(dense.max()) + np.float64(chain[-1])))
    acc = np.asarray(chain, np.float32)[counts]
    want = np.where(acc != 0, np.clip(acc + network.bias, 0, network.clamp), 0).astype(np.float32)
    got = dense.copy()
    twin_layer(
        0,
        1,  # one tile of 64 rows
        got,
        plan.index,
        plan.weight,
        np.float32(plan.uniform),
        True,
        np.float32(network.bias),
        np.float32(network.clamp),
        np.zeros(60, np.int64),
    )
    assert np.array_equal(got, want) and (got != 0).any()

    inputs = generate_inputs(2200, 1024, seed=4)  # enough rows for full tiles on 132 blocks
    twin = RowsTwinEngine(network, compact_every=1)
    records = [r for r in twin.run(inputs).trace if r.kernel == "gpu.gc_layer"]
    first = records[0]
    assert first.variant.startswith("P16xC1-layers1-1")
    tiles = -(-2200 // 16)
    assert first.executed_macs == inputs.nnz * 32 + tiles * 16 * 1024
    assert first.bytes_read == inputs.nnz * 4 + 2201 * 4 + table.nbytes + plan.device_bytes
    assert records[1].variant.startswith("R16xC1")
    # float inputs take the multiply-adds
    floats = RowsTwinEngine(network).run(inputs * np.float32(0.5) + inputs.multiply(inputs.sum(axis=1) % 2 == 0))
    assert [r for r in floats.trace if r.kernel == "gpu.gc_layer"][0].variant.startswith("R16xC1")


def test_rows_kernel_tiles_shrink_to_spread_few_rows_over_the_grid():
    """A launch of fewer rows than a full tile for every block takes tiles of a quarter, half
    or three quarters of the kernel's rows, the fewest that give every block one; the twin's
    trace names the tile it took."""
    from spartan_py.engines.rows.plan import gc_tile_rows
    from spartan_py.engines.rows.twin import RowsTwinEngine

    assert [gc_tile_rows(rows, 16, 132) for rows in (1, 528, 529, 1056, 1057, 1584, 1585, 60000)] == [
        4,
        4,
        8,
        8,
        12,
        12,
        16,
        16,
    ]
    assert gc_tile_rows(100, 4, 132) == 4  # the 4096-neuron kernel keeps its tile
    network = generate_network(1024, 6, seed=4)
    records = [r for r in RowsTwinEngine(network).run(generate_inputs(1500, 1024, seed=4)).trace]
    launches = [r for r in records if r.kernel == "gpu.gc_layer"]
    assert [r.block_rows for r in launches] == [gc_tile_rows(r.rows_in, 16, 132) for r in launches]
    assert launches[0].block_rows == 12 and launches[0].variant.startswith("P12xC1")
    assert launches[0].blocks == 125 and launches[0].block_shared_bytes == 16 * 1056 * 4


def test_pixel_outputs_refuse_layers_the_counts_do_not_describe():
    """No pixel table for weights of two values, a pixel feeding more than 32 outputs, or
    more steps than the kernel's chain table."""
    from spartan_py.engines.shared.input_counts import COUNT_MAX_STEPS, pixel_outputs
    from spartan_py.engines.shared.layer_plan import plan_layer

    weights = generate_network(1024, 1, seed=4).weights[0].tocsr()
    two_values = weights.copy()
    two_values.data[::2] *= 2
    assert pixel_outputs(two_values, plan_layer(two_values)) is None
    wide = sp.csr_matrix(np.ones((64, 64), np.float32))  # 64 outputs a pixel, 64 steps
    assert pixel_outputs(wide, plan_layer(wide)) is None
    deep = np.zeros((96, 96), np.float32)
    deep[: COUNT_MAX_STEPS + 1, :32] = 1  # 32 outputs a pixel, 65 steps
    assert pixel_outputs(sp.csr_matrix(deep), plan_layer(sp.csr_matrix(deep))) is None
    fits = sp.csr_matrix(deep[1:])
    fits = sp.vstack([fits, sp.csr_matrix((1, 96))]).tocsr()
    table = pixel_outputs(fits, plan_layer(fits))
    assert table is not None and table.shape == (96, 32) and (table[COUNT_MAX_STEPS:] == 0xFFFF).all()


@pytest.mark.gpu
def test_pinned_upload_converts_and_copies(monkeypatch):
    """The input upload converts each array into pinned host memory, copies it, and times the
    copies alone; where the host cannot pin, it copies from pageable memory, same arrays."""
    import cupy as cp
    import cupyx

    from spartan_py.engines.shared import cuda

    rng = np.random.default_rng(3)
    host = [(np.arange(5000, dtype=np.int64), np.int32), (rng.random(70_000), np.float32), (np.zeros(0), np.float32)]
    device, seconds = cuda.upload_pinned(cp, host)
    assert seconds > 0
    for (array, dtype), got in zip(host, device):
        assert got.dtype == dtype and np.array_equal(got.get(), array.astype(dtype))

    def no_pinning(*args, **kwargs):
        raise cp.cuda.runtime.CUDARuntimeError(2)  # cudaErrorMemoryAllocation

    monkeypatch.setattr(cupyx, "empty_pinned", no_pinning)
    device, seconds = cuda.upload_pinned(cp, host[:2])
    assert seconds > 0 and np.array_equal(device[1].get(), host[1][0].astype(np.float32))


def test_merged_engine_refuses_a_network_too_wide_for_shared_memory():
    """An unmergeable 65536-neuron network keeps 65536 merged columns, 520 KiB a row, more than a
    block's shared memory: the engine says so before launching (it failed with CUDA's 'invalid
    argument' when the drawn validation set ran it); a mergeable one of the same size plans."""
    from spartan_py.engines.merged.plan import merged_tile_rows
    from spartan_py.errors import BackendUnavailableError

    with pytest.raises(BackendUnavailableError, match="65536 merged columns need 520 KiB a row.*use backend cpu$"):
        merged_tile_rows(65536, 65536)
    assert merged_tile_rows(65536, 1024)[0] >= 1


def test_merged_plans_hold_16_bit_indices_where_the_input_fits():
    """A merged plan's indices are 16-bit while its input and padding fit (so the later module
    reads them as merged, no copy), 32-bit over a 65536-wide input; the merge is the same."""
    from spartan_py.engines.shared.column_merge import merge_network, plan_index_dtype

    assert plan_index_dtype(65504) is np.uint16 and plan_index_dtype(65536) is np.int32
    merged = merge_network(generate_network(1024, 3, seed=4))
    for layer in merged.layers:
        assert layer.plan.index.dtype == np.uint16
        assert int(layer.plan.index.max()) < layer.width_in + 32


def test_later_launches_take_four_row_tiles_at_65536_neurons_and_16_bit_indices():
    """The later block-tile launches' tile: four rows at 65536 neurons' 4096 merged columns (one
    131 KiB block an SM), eight at 16384's 1024, an explicit ``rows_per_tile`` as given (and no
    split); on tiles of two rows or more their layers' indices are 16-bit and the records count
    2 bytes an index (the first launch's and 1-row tiles' 4)."""
    from spartan_py.engines.merged.plan import (
        LATER_BUFFER_BUDGET_BYTES,
        LaterShape,
        later_launch_shape,
        later_tile_rows,
        merged_row_bytes,
    )

    assert later_tile_rows(4096) == 4 and later_tile_rows(1024) == 8
    assert later_tile_rows(4096, rows_per_tile=1) == 1
    assert 4 * merged_row_bytes(4096) <= LATER_BUFFER_BUDGET_BYTES < 8 * merged_row_bytes(4096)
    assert later_launch_shape(4096) == LaterShape(1024, 4, 2)
    assert later_launch_shape(4096, rows_per_tile=4) == LaterShape(1024, 4, 0)
    assert later_launch_shape(4096, rows_per_tile=2).tail_rows == 0
    network = generate_network(1024, 12, seed=4)
    block_tiles = make_engine("gpu-merged-twin", network, chain_rows=0)
    chained = make_engine("gpu-merged-twin", network)
    starts = np.cumsum([0, *block_tiles.chunks[:-1]])
    expected = [bool(start) for start, length in zip(starts, block_tiles.chunks) for _ in range(length)]
    assert block_tiles.later_block_layers() == expected and any(expected)
    assert not any(chained.later_block_layers())  # the chain kernel reads its own words
    start = int(starts[1])
    layers, n = block_tiles.merged.layers, network.neurons
    plan = layers[start].plan
    weights = 0 if plan.uniform is not None else plan.weight.size * 4
    read = 10 * (layers[start - 1].width * 4 + 4) + weights + layers[start].width * 4 + n * 4
    one_row = make_engine("gpu-merged-twin", network, chain_rows=0, rows_per_tile=1)
    for engine, index_bytes in ((block_tiles, 2), (one_row, 4)):  # 1-row tiles keep the first launches' code
        later = engine.launch_cost(start, start + 1, 10, [10], 0, None, None)
        assert later.bytes_read == read + plan.index.size * index_bytes
        split = f"S{engine.later_shape.tail_rows}" if engine.later_shape.tail_rows else ""
        assert later.variant.startswith(f"R{engine.later_rows}{split}T")


def test_a_later_launchs_last_round_takes_shorter_tiles():
    """A split later launch takes whole rounds of its head's tiles and the rest in tiles half as
    tall when they fit one round of those (a 65536-neuron quarter shard's 1250 live rows: two
    rounds of 528 and 194 rows in 2-row tiles), else all in head tiles; the twin's records count
    both parts' tiles and their computed rows."""
    from spartan_py.engines.merged.plan import split_cut

    assert split_cut(1250, 528, 264) == 1056
    assert split_cut(2500, 528, 264) == 2500  # 388 left over: one more round of the head's tiles
    assert split_cut(200, 528, 264) == 0  # the tail's one round takes them all
    assert split_cut(1056, 528, 264) == 1056
    network = generate_network(1024, 12, seed=4)
    twin = make_engine("gpu-merged-twin", network, chain_rows=0)  # later tiles of 16 rows, tails of 8
    assert twin.later_tile_heights(2 * 16 * 132 + 100).tolist() == [16] * 264 + [8] * 13
    assert twin.later_tile_heights(16 * 132 + 1100).tolist() == [16] * 201
    out = twin.run(generate_inputs(3000, 1024, seed=4))
    launches = [r for r in out.trace if r.kernel == "gpu.gc_merged"][1:]
    assert all(r.variant.startswith("R16S8T1024") for r in launches)
    assert [r.blocks for r in launches] == [len(twin.later_tile_heights(r.rows_in)) for r in launches]
    unsplit = make_engine("gpu-merged-twin", network, chain_rows=0, rows_per_tile=16)
    unsplit = unsplit.run(generate_inputs(3000, 1024, seed=4))
    assert out.live_rows_by_layer == unsplit.live_rows_by_layer
    assert sum(r.executed_macs for r in launches) < sum(
        r.executed_macs for r in unsplit.trace if r.kernel == "gpu.gc_merged" and r.layer > 1
    )


def test_counts_path_first_launch_takes_the_tallest_tile_that_keeps_four_blocks_an_sm():
    """Binary inputs entering as counts: the first launch's tile grows to 32 rows at 1024
    neurons (41 KiB a block), stays at the later launches' 16 at 4096 (32 rows would take 121
    KiB, one block an SM), follows an explicit ``rows_per_tile``, and the trace names the height
    the kernel ran (a new instance, so no fit of another height prices it)."""
    from spartan_py.engines.merged.plan import COUNTS_TILE_BUDGET_BYTES, merged_block_bytes

    small = make_engine("gpu-merged-twin", generate_network(1024, 6, seed=4))
    assert (small.rows_per_tile, small.count_rows, small.first_launch_tile(True)[0]) == (16, 32, 32)
    assert small.first_launch_tile(False)[0] == small.first_rows  # float inputs keep their tile
    words = small.first_launch_tile(True)[1]
    assert merged_block_bytes(32, small.merged.width, words, small.stage_words_by_start[0]) <= COUNTS_TILE_BUDGET_BYTES
    assert make_engine("gpu-merged-twin", generate_network(1024, 6, seed=4), rows_per_tile=16).count_rows == 16
    assert make_engine("gpu-merged-twin", generate_network(1024, 6, seed=4), input_counts=False).count_rows == 16
    wide = make_engine("gpu-merged-twin", generate_network(4096, 2, seed=4))
    assert wide.count_rows == wide.rows_per_tile == 16
    inputs = generate_inputs(300, 1024, seed=2)
    records = small.run(inputs).trace
    first = next(r for r in records if r.kernel == "gpu.gc_merged")
    assert first.variant.startswith("P32xW64")
