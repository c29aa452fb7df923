"""The kernel instances the shipped engines launch, and which of them the H100's fit prices
without a fit of its own (issue 73, item 1)."""

from __future__ import annotations

import pytest

from spartan_py.costmodel.machine import load_machine
from spartan_py.workloads.launched_instances import shipped_instances, unfitted_instances

#: The instances launched today that the H100's fit prices by the family-wide fallback: row
#: compaction's `split` and `add` passes of the opt-in fp32x3 precision (conv layers). An fp32x3
#: product is timed only as a whole (split, three TF32 products, the tile GEMM's adds), so no
#: run gives these passes times of their own; the split's earlier fit was made on records that
#: carried the whole product's time (removed). A test below fails when this set grows (a new
#: launch shape without a fit) or shrinks (a fit arrived: remove it here, and the xfail once the
#: set is empty).
UNFITTED_TODAY = {
    "gpu.compact/add",
    "gpu.compact/split",
}


@pytest.fixture(scope="module")
def unfitted() -> dict[str, str]:
    return unfitted_instances(load_machine("h100-sxm"))


def test_the_engines_launch_the_instances_they_are_known_for():
    """The list comes from the engines' launch choices: the shipped instances named in the
    cost-model docs and tests are among them, and no instance of an old kernel is."""
    keys = {item.key for item in shipped_instances()}
    assert {
        "gpu.gc_layer/R16xC1",
        "gpu.gc_layer/R4xC4",
        "gpu.gc_layer/R1xC16",
        "gpu.gc_merged/P32xW64",
        "gpu.gc_merged/C2T2xW64",
        "gpu.gc_merged/R4S2T1024xW4096",
        "gpu.expand/rowwise",
        "gpu.compact/rows",
        "gpu.compact/expand_rows",
        "gpu.dense_gemm.fp32/lt",
    } <= keys
    # kernels rewritten since: their records keep their own fits, but nothing launches them now
    assert not keys & {"gpu.gc_merged/R1xW4096", "gpu.gc_merged/C1xW64", "gpu.expand/final"}


def test_the_unfitted_instances_are_the_ones_known(unfitted):
    """The set of launched instances without an H100 fit of their own is exactly the known one."""
    assert set(unfitted) == UNFITTED_TODAY
    assert set(unfitted.values()) == {"family-wide fallback"}


@pytest.mark.xfail(
    strict=True,
    reason=f"the H100 has no fit yet of {', '.join(sorted(UNFITTED_TODAY))}: no run times fp32x3's passes alone",
)
def test_no_instance_a_shipped_engine_launches_lacks_a_fit(unfitted):
    assert unfitted == {}


def test_the_fp32x3_passes_benchmark_records_the_unfitted_instances():
    """benchmarks/fp32x3_passes times exactly the launches the H100 lacks a fit of: its records
    are the model's own split and add records of an fp32x3 product (same bytes), one shape each."""
    from benchmarks.fp32x3_passes import gemm_shapes, pass_records
    from spartan_py.costmodel.families import calibration_key, instance_of
    from spartan_py.sparsity.candidates import candidate_records
    from spartan_py.sparsity.tiles import TileShape

    shapes = gemm_shapes([8, 32])
    assert len({(m, k, n) for _, m, k, n in shapes}) == len(shapes) >= 30
    assert all(m * k <= 2**28 for _, m, k, n in shapes)
    assert len(gemm_shapes([8, 32], max_elements=10**6)) < len(shapes)
    _, m, k, n = shapes[0]
    records = pass_records(m, k, n)
    keys = {calibration_key(r.kernel, instance_of(r.kernel, r.variant)) for r in records.values()}
    assert keys == UNFITTED_TODAY
    product = candidate_records(
        "tile_sparse", m, k, n, tile=TileShape(16, 16), precision="fp32x3", nnz=1, tiles_active=1, live_rows=1
    )
    assert (
        records["split-tf32"].bytes_read
        == 4 * (m * k + k * n)
        == next(r for r in product if r.variant == "split-tf32").bytes_read
    )
    assert records["add"].bytes_written == 4 * m * n
