"""Merged columns: the plan (host), the merged kernel's CPU twin, and the kernel on a GPU."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from spartan_py import Network, generate_inputs, generate_network, make_engine
from spartan_py.engines.merged.plan import merged_tile_rows, split_cut
from spartan_py.engines.reference import ReferenceEngine
from spartan_py.engines.shared.column_merge import duplicate_groups, merge_network
from spartan_py.engines.shared.input_counts import input_bit_value
from spartan_py.errors import InputError
from spartan_py.trace import to_frame
from tests.test_engines import assert_same_run


def test_duplicate_groups_are_exact():
    inputs = np.array([[1, 2], [3, 4], [1, 2], [1, 5], [3, 4], [1, 2]])
    weights = np.ones((6, 2), np.float32)
    weights[5, 1] = 0.5  # same inputs, another weight: its own group
    groups, representatives = duplicate_groups(inputs, weights)
    assert groups.tolist() == [0, 1, 0, 2, 1, 3]
    assert representatives.tolist() == [0, 1, 3, 5]


def test_duplicate_groups_split_a_hash_collision(monkeypatch):
    """Rows that share a bucket but differ are told apart by comparing them whole."""
    import spartan_py.engines.shared.column_merge as merge

    monkeypatch.setattr(merge, "row_hashes", lambda inputs, bits: np.zeros(inputs.shape[0], np.uint64))
    inputs = np.array([[1, 2], [3, 4], [1, 2]])
    groups, _ = duplicate_groups(inputs, np.ones((3, 2), np.float32))
    assert groups.tolist() == [0, 1, 0]


def test_official_layers_merge_sixteen_fold(official_network):
    merged = merge_network(official_network)
    assert merged.width == 64
    assert [layer.width for layer in merged.layers[:5]] == [64] * 5 and merged.layers[-1].width == 32
    assert all(layer.sizes.sum() == 1024 for layer in merged.layers)
    assert 15 < merged.factor < 25  # multiply-adds per row, original / merged


def test_a_network_without_duplicates_merges_into_itself():
    rng = np.random.default_rng(4)
    weights = tuple(sp.random(64, 64, density=0.3, format="csr", dtype=np.float32, random_state=rng) for _ in range(3))
    merged = merge_network(Network(64, weights, bias=-0.1))
    assert merged.width == 64 and all(np.all(layer.sizes <= 1) for layer in merged.layers)


def test_merged_plan_computes_the_original_layers():
    """A plain NumPy replay of the merged plan equals the reference, bit for bit here (the
    generated weights are 1/16: merged sums are exact)."""
    network = generate_network(1024, 20, seed=6)
    inputs = generate_inputs(300, 1024, seed=6)
    merged = merge_network(network)
    z = inputs.toarray()
    for layer in merged.layers:
        source = np.concatenate([z, np.zeros((z.shape[0], 32), np.float32)], axis=1)
        weight = (
            layer.plan.weight
            if layer.plan.uniform is None
            else np.full(layer.plan.index.shape, layer.plan.uniform, np.float32)
        )
        acc = np.zeros((z.shape[0], layer.width), np.float32)
        for step in range(layer.plan.steps):
            acc += weight[step] * source[:, layer.plan.index[step]]
        z = np.where(acc != 0, np.clip(acc + np.float32(network.bias), 0, network.clamp), 0).astype(np.float32)
    want = ReferenceEngine(network).run(inputs).values.toarray()
    assert np.array_equal(z[:, merged.layers[-1].groups], want)


def test_tile_rows_choice():
    assert merged_tile_rows(1024, 64) == (16, 16, True)
    assert merged_tile_rows(65536, 4096) == (1, 1, False)  # a 65536-wide row does not fit: gather from memory
    assert merged_tile_rows(16384, 1024)[2]
    with pytest.raises(InputError, match="rows_per_tile"):
        merged_tile_rows(1024, 64, rows_per_tile=12)


def _stage_network(neurons: int, width: int, steps: list[int]):
    """A merged network of uniform layers of ``steps`` steps (only the shapes matter here)."""
    from spartan_py.engines.shared.column_merge import MergedLayer, MergedNetwork
    from spartan_py.engines.shared.layer_plan import LayerPlan

    layers = [
        MergedLayer(
            LayerPlan(np.zeros((k, width), np.int32), np.zeros((k, width), np.float32), 1.0, k * width),
            np.zeros(neurons, np.int64),
            np.ones(width, np.int64),
            width,
            k * width,
        )
        for k in steps
    ]
    return MergedNetwork(neurons, layers)


def test_the_stage_keeps_room_only_for_what_fits():
    """A launch's stage holds the largest of its layers that fits, the monitor's groups if they
    fit and a tile's counts; a layer too big for the budget is read from memory and gets no
    room, and each launch is sized alone (the twin records what the engine launches)."""
    from spartan_py.engines.merged.plan import STAGE_BUDGET_BYTES, stage_words
    from spartan_py.engines.merged.twin import MergedTwinEngine

    budget = STAGE_BUDGET_BYTES // 4
    small = _stage_network(1024, 64, [8, 4, 2])
    assert stage_words(small.layers, 1024, 16) == 1024  # every layer fits: the groups are the most
    assert stage_words(_stage_network(1024, 64, [40, 4]).layers, 1024, 16) == 40 * 64 + 64
    wide = _stage_network(65536, 4096, [32, 2, 2])  # as generated:65536 merges: no layer, no groups fit
    assert stage_words(wide.layers, 65536, 1) == 65536 // 32 // 4 < budget  # a one-row tile's counts only
    assert stage_words([*wide.layers, *_stage_network(65536, 1024, [5]).layers], 65536, 1) == 5 * 1024 + 1024
    middle = _stage_network(16384, 1024, [32, 2, 2])  # the tail layers fit, the first and the groups do not
    assert stage_words(middle.layers, 16384, 8) == 2 * 1024 + 1024
    twin = MergedTwinEngine(generate_network(1024, 12, seed=2))
    assert set(twin.stage_words_by_start) == {0, *np.cumsum(twin.chunks[:-1]).tolist()}
    out = twin.run(generate_inputs(300, 1024, seed=2))
    launches = [r for r in out.trace if r.kernel == "gpu.gc_merged" and r.variant[0] in "RPBG"]
    assert launches and all(r.block_shared_bytes > 4 * twin.stage_words_by_start[r.layer - 1] for r in launches)


def test_twin_trace_accounts_for_the_merged_work():
    network = generate_network(1024, 12, seed=2)
    out = make_engine("gpu-merged-twin", network).run(generate_inputs(400, 1024, seed=2))
    launches = [r for r in out.trace if r.kernel == "gpu.gc_merged"]
    assert [r.fused_layers for r in launches] == [1, 1, 1, 1, 2, 4, 2]
    assert [r.kernel for r in out.trace][-4:-3] == ["gpu.expand"]
    # merged work is a small fraction of the original network's useful work
    assert sum(r.executed_macs for r in launches) * 4 < sum(r.useful_macs for r in launches)
    with pytest.raises(InputError, match="software monitor"):
        make_engine("gpu-merged-twin", network, monitor="software")


@pytest.mark.gpu
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"compact_every": 1},
        {"max_batch_rows": 333, "rows_per_tile": 4},
        {"streamed": True},
        {"streamed": True, "compact_every": 3},
        {"varied_inputs": True},
        {"varied_inputs": True, "rows_per_tile": 8},
        {"chain_rows": 1},
        {"chain_rows": 1, "chain_warps": 2},
        {"chain_rows": 2, "compact_every": 1},
        {"chain_rows": 2, "chain_warps": 2},
        {"chain_warps": 2, "compact_every": 3},
        {"chain_rows": 0},
        {"chain_rows": 0, "rows_per_tile": 1},
        {"chain_rows": 0, "rows_per_tile": 2},
        {"chain_rows": 0, "rows_per_tile": 4, "compact_every": 1},
        {"input_counts": False},
        {"input_counts": False, "rows_per_tile": 8},
    ],
)
def test_gpu_merged_matches_its_twin_exactly(options):
    """Bit-equal values, counts and trace to the twin; streamed weights change nothing;
    binary inputs (a first launch on counts of lit inputs, or on bits) and varied ones (on
    floats) alike."""
    network = generate_network(1024, 30, seed=8)
    inputs = generate_inputs(900, 1024, seed=8)
    options = dict(options)
    if options.pop("varied_inputs", False):
        inputs.data *= np.random.default_rng(8).uniform(0.5, 1.5, inputs.nnz).astype(np.float32)
    streamed = options.pop("streamed", False)
    engine = make_engine("gpu-merged", network, **options)
    if streamed:  # a budget just under the weights' size: they stream, two launches at a time
        engine = make_engine("gpu-merged", network, weight_budget_bytes=engine.weights.total_bytes - 1, **options)
    assert engine.weights.streamed == streamed
    gpu = engine.run(inputs)
    twin = make_engine("gpu-merged-twin", network, **options).run(inputs)
    assert np.array_equal(gpu.live_rows, twin.live_rows)
    assert gpu.live_rows_by_layer == twin.live_rows_by_layer and gpu.nonzeros_by_layer == twin.nonzeros_by_layer
    assert (gpu.values != twin.values).nnz == 0
    got, want = to_frame(gpu.trace), to_frame(twin.trace)
    columns = [c for c in got.columns if c not in ("measured_us", "device", "executed_macs", "variant")]
    assert got[columns].equals(want[columns])
    first = got[got["kernel"] == "gpu.gc_merged"]["variant"].iloc[0]
    binary_kind = "P" if options.get("input_counts", True) else "B"
    assert first.startswith("R" if input_bit_value(inputs) == 0 else binary_kind), first


@pytest.mark.gpu
def test_split_later_launches_match_the_twin_exactly():
    """Later block-tile launches split in two (whole rounds of 16-row tiles, the rest in 8-row
    tiles, as the kernel works it out from the live rows on the device): the values, counts,
    monitor and trace equal the twin's, which splits on the same grids."""
    network = generate_network(1024, 30, seed=8)
    inputs = generate_inputs(3000, 1024, seed=8)
    engine = make_engine("gpu-merged", network, chain_rows=0)
    assert len(engine.later_parts) == 2 and engine.later_grids == (132, 132)  # H100 and H200: a block an SM
    gpu = engine.run(inputs)
    twin = make_engine("gpu-merged-twin", network, chain_rows=0).run(inputs)
    assert np.array_equal(gpu.live_rows, twin.live_rows)
    assert gpu.live_rows_by_layer == twin.live_rows_by_layer and gpu.nonzeros_by_layer == twin.nonzeros_by_layer
    assert (gpu.values != twin.values).nnz == 0
    got, want = to_frame(gpu.trace), to_frame(twin.trace)
    columns = [c for c in got.columns if c not in ("measured_us", "device", "executed_macs")]
    assert got[columns].equals(want[columns])
    later = got[(got["kernel"] == "gpu.gc_merged") & (got["layer"] > 1)]
    cuts = [split_cut(int(rows), 16 * 132, 8 * 132) for rows in later["rows_in"]]
    assert any(0 < cut < rows for cut, rows in zip(cuts, later["rows_in"]))  # both parts ran


def test_monitor_masks_count_each_tiles_nonzeros():
    from spartan_py.engines.merged.plan import monitor_masks

    rng = np.random.default_rng(1)
    groups = rng.integers(0, 64, size=1024)
    masks = monitor_masks(groups, 64)
    z = rng.random((5, 64)) < 0.4  # which merged columns are non-zero, per row
    bits = np.packbits(z.reshape(5, 2, 32), axis=-1, bitorder="little").view("<u4").reshape(5, 2)
    counted = np.array(
        [
            [
                sum(
                    bin(int(bits[r, w]) & int(masks[lv, c, w])).count("1")
                    for lv in range(masks.shape[0])
                    for w in range(2)
                )
                for c in range(32)
            ]
            for r in range(5)
        ]
    )
    assert np.array_equal(counted, z[:, groups].reshape(5, 32, 32).sum(axis=2))
    assert monitor_masks(groups, 512) is None  # too wide: the kernel looks groups up instead


@pytest.mark.gpu
@pytest.mark.parametrize(
    "neurons, masks, chain_rows, chain_warps",
    [
        (1024, True, 1, None),
        (1024, True, 1, 2),
        (1024, True, 2, None),
        (1024, True, 2, 2),
        (1024, True, 0, None),
        (1024, False, 1, None),
        (1024, False, 2, 2),
        (16384, False, None, None),
    ],
)  # the chain kernel runs the later 1024-neuron launches (teams of a warp or a pair); without
# masks, tiles look groups up
def test_gpu_merged_monitor_counts_match_outputs(neurons, masks, chain_rows, chain_warps, monkeypatch):
    import spartan_py.engines.merged.engine as gpu_merged

    if not masks:
        monkeypatch.setattr(gpu_merged, "monitor_masks", lambda groups, width: None)
    network = generate_network(neurons, 3, seed=1)
    engine = make_engine("gpu-merged", network, compact_every=1, chain_rows=chain_rows, chain_warps=chain_warps)
    batch = engine.upload(generate_inputs(200, neurons, seed=2))
    engine.run_device(batch, per_layer_times=True)
    live = int(batch.counts[3].get())
    tiles = neurons // 32
    monitor = batch.tile_nnz[: live * tiles].reshape(live, tiles).get()
    expanded = batch.expanded[: live * neurons].reshape(live, tiles, 32).get()
    assert np.array_equal(monitor, (expanded != 0).sum(axis=2))
    assert int(monitor.sum()) == int(batch.nnz_counts[3].get())
    assert np.array_equal(monitor.sum(axis=1), batch.row_nnz[:live].get())


@pytest.mark.gpu
def test_gpu_merged_65536_neurons_gathers_wide_inputs():
    """65536 neurons: float input rows too wide for shared memory are expanded in device
    memory; binary ones are counted in the tile (4096 merged columns)."""
    network = generate_network(65536, 4, seed=0)
    binary = generate_inputs(40, 65536, seed=1)
    varied = binary.copy()
    varied.data *= np.random.default_rng(1).uniform(0.5, 1.5, varied.nnz).astype(np.float32)
    engine = make_engine("gpu-merged", network)
    assert not engine.first_from_tile
    for inputs, gathers in ((varied, True), (binary, False)):
        got = engine.run(inputs)
        assert_same_run(got, ReferenceEngine(network).run(inputs))
        assert any(r.kernel == "gpu.scatter_rows" for r in got.trace) == gathers
        assert next(r.variant for r in got.trace if r.kernel == "gpu.gc_merged")[0] == ("G" if gathers else "P")


def test_input_bit_value_finds_binary_inputs():
    inputs = generate_inputs(50, 1024, seed=3)
    assert input_bit_value(inputs) == 1.0
    inputs.data *= 0.5
    assert input_bit_value(inputs) == 0.5
    inputs.data[3] = 2.0
    assert input_bit_value(inputs) == 0.0  # two values: the first launch takes floats
    assert input_bit_value(sp.csr_matrix((3, 1024), dtype=np.float32)) == 0.0
    explicit_zeros = sp.csr_matrix((np.zeros(2, np.float32), ([0, 1], [4, 5])), shape=(2, 1024))
    assert input_bit_value(explicit_zeros) == 0.0


def test_twin_trace_names_the_first_launchs_input_tile():
    """Binary inputs: the first launch counts lit inputs per merged column ("P": its own
    instance, a tenth of the bit tiles' work, in tiles of 32 rows at 1024 neurons) or, with
    ``input_counts=False``, holds bits ("B", 1/32 of the shared memory of a float tile); other
    inputs: floats ("R")."""
    network = generate_network(1024, 6, seed=2)
    binary = generate_inputs(300, 1024, seed=2)
    varied = binary.copy()
    varied.data *= np.random.default_rng(2).uniform(0.5, 1.5, varied.nnz).astype(np.float32)
    first = {}
    for name, inputs, counts in (("counts", binary, True), ("bits", binary, False), ("varied", varied, True)):
        out = make_engine("gpu-merged-twin", network, input_counts=counts).run(inputs)
        first[name] = next(r for r in out.trace if r.kernel == "gpu.gc_merged")
    kinds = {name: record.variant[:5] for name, record in first.items()}
    assert kinds == {"counts": "P32xW", "bits": "B16xW", "varied": "R16xW"}
    assert first["bits"].bytes_read < first["varied"].bytes_read  # the indices only
    assert first["bits"].block_shared_bytes < first["varied"].block_shared_bytes / 2
    assert first["counts"].executed_macs * 5 < first["bits"].executed_macs


def test_pixel_columns_give_the_first_layers_sums():
    """The counts path's table, and its premise: with binary inputs and one weight, each
    merged column's sum (the twin's, in the plan's order) is its count of lit inputs times
    the weight."""
    from spartan_py.engines.merged.twin import twin_merged_layer
    from spartan_py.engines.shared.input_counts import NO_COLUMN, pixel_columns

    network = generate_network(1024, 1, seed=4)
    layer = merge_network(network).layers[0]
    packed = pixel_columns(layer, 1024)
    assert packed is not None and packed.dtype == np.uint32 and packed.shape == (1024,)
    halves = packed.view(np.uint16).reshape(1024, 2)
    inputs = generate_inputs(60, 1024, seed=4).toarray()
    counts = np.zeros((60, layer.width), np.int64)
    for pixel, column in zip(*np.nonzero(halves != NO_COLUMN)):
        counts[:, halves[pixel, column]] += inputs[:, pixel] != 0
    acc = (counts * np.float64(layer.plan.uniform)).astype(np.float32)
    want = np.where(acc != 0, np.clip(acc + network.bias, 0, network.clamp), 0).astype(np.float32)
    row_nnz = np.zeros(60, np.int64)
    got = np.full((60, layer.width), np.nan, np.float32)
    twin_merged_layer(
        0,
        60,
        inputs.astype(np.float32),
        layer.plan.index,
        layer.plan.weight,
        np.float32(layer.plan.uniform),
        True,
        layer.sizes,
        np.float32(network.bias),
        np.float32(network.clamp),
        row_nnz,
        got,
    )
    assert np.array_equal(got, want) and (got != 0).any()
    # no counts path where a pixel feeds more than two merged columns (no duplicates to merge)
    unmerged = merge_network(generate_network(1024, 1, seed=4, unmergeable=True)).layers[0]
    assert pixel_columns(unmerged, 1024) is None


@pytest.mark.gpu
def test_gpu_merged_weight_budget_too_small_is_a_clear_error():
    from spartan_py.errors import DeviceMemoryError

    with pytest.raises(DeviceMemoryError, match="launch fewer layers"):
        make_engine("gpu-merged", generate_network(1024, 40, seed=0), weight_budget_bytes=10_000)


@pytest.mark.gpu
def test_auto_takes_the_rows_kernel_without_duplicate_columns():
    rng = np.random.default_rng(3)
    weights = tuple(
        sp.random(1024, 1024, density=0.03, format="csr", dtype=np.float32, random_state=rng) for _ in range(2)
    )
    assert make_engine("auto", Network(1024, weights, bias=-0.1)).name == "gpu"
    assert make_engine("auto", generate_network(1024, 2)).name == "gpu-merged"


def test_simulated_mode_runs_the_merged_twin():
    from spartan_py import infer

    network = generate_network(1024, 8, seed=1)
    inputs = generate_inputs(200, 1024, seed=1)
    result = infer(network, inputs, backend="gpu-merged", mode="simulated")
    want = ReferenceEngine(network).run(inputs)
    assert result.simulated and result.backend == "gpu-merged-twin" and result.seconds > 0
    assert np.array_equal(result.categories - 1, want.live_rows)
    assert (result.predicted_trace["kernel"] == "gpu.gc_merged").sum() == 6  # 1, 1, 1, 1, 2, 2 layers per launch


def test_chain_words_pack_indices_and_weight_codes():
    """The chain kernel's stage of a layer (kernels/gc_chain.cu): a byte a step's input, low
    byte first; four bits a step's weight, an entry of the layer's table; steps past the
    plan's read the zero column ``width_in``."""
    from spartan_py.engines.merged.chain import TABLE_SIZE, chain_code_steps, chain_steps, chain_words

    merged = merge_network(generate_network(1024, 12, seed=2))  # uniform and coded layers
    coded = 0
    for before, layer in zip(merged.layers, merged.layers[1:]):
        assert layer.width_in == before.width  # the kernel reads the input width from the previous layer
        stage = chain_words(layer)
        k4, k8, width, steps = chain_steps(layer), chain_code_steps(layer), layer.width, layer.plan.steps
        assert stage is not None and stage.size == (k4 + k8) * width + TABLE_SIZE
        words = stage[: k4 * width].view(np.uint32).reshape(k4, width)
        index = ((words[:, None, :] >> (8 * np.arange(4, dtype=np.uint32))[None, :, None]) & 0xFF).reshape(-1, width)
        assert np.array_equal(index[:steps], layer.plan.index) and np.all(index[steps:] == layer.width_in)
        if layer.plan.uniform is None:
            coded += 1
            codes = stage[k4 * width : (k4 + k8) * width].view(np.uint32).reshape(k8, width)
            code = ((codes[:, None, :] >> (4 * np.arange(8, dtype=np.uint32))[None, :, None]) & 0xF).reshape(-1, width)
            table = stage[(k4 + k8) * width :].view(np.float32)
            assert np.array_equal(table[code[:steps]], layer.plan.weight)
        else:
            assert k8 == 0
    assert coded >= 3
    assert chain_words(merged.layers[0]) is None  # its inputs are the n-wide rows


def test_chain_launches_need_narrow_layers_of_few_weights():
    from spartan_py.engines.merged.chain import (
        chain_fits,
        chain_launch,
        chain_team_warps,
        checked_chain_rows,
        checked_chain_warps,
    )

    merged = merge_network(generate_network(1024, 6, seed=5))
    layers = merged.layers
    assert chain_launch(layers[1:5], 1, merged.width, 1)
    assert not chain_launch(layers[0:2], 0, merged.width, 1)  # the first launch reads the inputs
    assert not chain_launch(layers[1:5], 1, merged.width, 0)  # turned off
    assert not chain_fits(merge_network(generate_network(4096, 2, seed=5)).layers[1])  # 256 columns
    rng = np.random.default_rng(3)
    weights = tuple(sp.random(64, 64, density=0.3, format="csr", dtype=np.float32, random_state=rng) for _ in range(2))
    assert not chain_fits(merge_network(Network(64, weights, bias=-0.1)).layers[1])  # more than 16 weights
    with pytest.raises(InputError, match="chain_rows"):
        checked_chain_rows(3)
    with pytest.raises(InputError, match="chain_warps"):
        checked_chain_warps(3)
    assert [chain_team_warps(n) for n in (1, 8, 9, 32)] == [1, 1, 2, 2]


def test_twin_trace_names_the_chain_launches():
    """Launches after the first run the chain kernel ("C": a team per group of rows, of one warp
    in launches of up to 8 layers, "T1", 32 teams an SM, else of two, "T2", 8 teams an SM); with
    ``chain_rows=0`` every launch runs the block-tile kernel ("R", blocks of 1024 threads after
    the first launch's 256, "T1024", one an SM by the launch bound's registers; "S8": a
    launch's last round in 8-row tiles)."""
    network = generate_network(1024, 30, seed=2)  # launches of 1, 1, 1, 1, 2, 4, 8 and 12 layers
    inputs = generate_inputs(400, 1024, seed=2)
    for chain_rows, kind, long_kind in (
        (1, "C1T1xW", "C1T2xW"),
        (2, "C2T1xW", "C2T2xW"),
        (0, "R16S8T1024xW", "R16S8T1024xW"),
        (None, "C2T1xW", "C2T2xW"),
    ):
        out = make_engine("gpu-merged-twin", network, chain_rows=chain_rows).run(inputs)
        launches = [r for r in out.trace if r.kernel == "gpu.gc_merged"]
        assert len(launches) == 8 and launches[0].variant.startswith("P32xW")
        assert [r.variant.split("xW")[0] + "xW" for r in launches[1:]] == [kind] * 6 + [long_kind]
        assert launches[0].block_threads == 256 and launches[0].resident_blocks_per_sm == 4
        if chain_rows == 0:
            assert all(r.block_threads == 1024 and r.resident_blocks_per_sm == 1 for r in launches[1:])
        else:
            short, long = launches[1:7], launches[7]
            assert all(r.block_threads == 32 and r.resident_blocks_per_sm == 32 for r in short)
            assert long.block_threads == 64 and long.resident_blocks_per_sm == 8
            assert launches[1].blocks == -(-launches[1].rows_in // (chain_rows or 2))
