"""Scale-out: sweeps on a process pool and on a Dask LocalCluster (one of whose workers is
killed mid-sweep), and inference sharded by rows, merged exactly."""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest
import scipy.sparse as sp

from spartan_py.errors import InputError, OptionalDependencyError
from spartan_py.host.executors import open_executor
from spartan_py.runner import load_experiment, run_experiment
from spartan_py.scale_out.rows import shard_bounds, shard_rows
from spartan_py.scale_out.shard import infer_sharded

SWEEP = """\
name: scale
workload:
  layers: 8
  inputs: generated:1500:1
backend: cpu
sweep:
  grid:
    workload.network: ["generated:1024:1", "generated:1024:2", "generated:1024:3"]
    monitor: [fused, "off"]
"""


def _results(out) -> dict:
    """Per point id: what a point computed (not its times)."""
    found = {}
    for path in (out / "points").glob("*.json"):
        record = json.loads(path.read_text())
        assert record["status"] == "ok", record.get("error")
        summary = record["summary"]
        found[record["id"]] = (summary["categories"], summary["live_rows_by_layer"], summary["nonzeros_by_layer"])
    return found


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """The sweep file, and its points run inline (the reference)."""
    folder = tmp_path_factory.mktemp("sweep")
    path = folder / "scale.yaml"
    path.write_text(SWEEP)
    experiment, points = load_experiment(path)
    run_experiment(experiment, points, folder / "inline")
    return experiment, points, _results(folder / "inline")


def test_process_pool_matches_inline(sweep, tmp_path):
    experiment, points, expected = sweep
    with open_executor(None, 2) as workers:
        summary = run_experiment(experiment, points, tmp_path, workers=workers)
    assert (summary.ran, summary.failed) == (len(points), 0)
    assert _results(tmp_path) == expected
    assert "pool of 2" in json.loads((tmp_path / "environment.json").read_text())["executor"]


@pytest.mark.slow
def test_local_cluster_survives_a_killed_worker(sweep, tmp_path):
    pytest.importorskip("distributed")
    experiment, points, expected = sweep
    killed = []
    with open_executor("local", 2) as workers:
        client = workers.client
        pids = client.run(os.getpid)  # worker address -> pid

        def kill_a_busy_worker(point, record, skipped):
            if killed:
                return
            busy = [address for address, keys in client.processing().items() if keys]
            if busy:  # a worker with a point in flight: its point must be run again elsewhere
                os.kill(pids[busy[0]], signal.SIGKILL)
                killed.append(busy[0])

        summary = run_experiment(experiment, points, tmp_path, workers=workers, on_point=kill_a_busy_worker)
    assert killed, "no worker was busy after the first point finished"
    assert (summary.ran, summary.failed) == (len(points), 0)
    assert len(list((tmp_path / "points").glob("*.json"))) == len(points)  # every point once
    assert _results(tmp_path) == expected


def test_dask_missing_is_a_clear_error(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(OptionalDependencyError, match=r"\[dask\]"):
        with open_executor("local", 2):
            pass


def test_an_unreachable_scheduler_is_a_clear_error():
    pytest.importorskip("distributed")
    from spartan_py.errors import BackendUnavailableError

    with pytest.raises(BackendUnavailableError, match="cannot reach the Dask scheduler at tcp://127.0.0.1:9"):
        with open_executor("tcp://127.0.0.1:9", connect_timeout_s=2):
            pass


def test_executor_arguments_are_checked():
    with pytest.raises(InputError, match="scheduler address"):
        with open_executor("my-laptop"):
            pass
    with pytest.raises(InputError, match="workers"):
        with open_executor(None, 0):
            pass


def test_shard_bounds_cover_every_row_once():
    assert shard_bounds(10, 3) == [(0, 3), (3, 7), (7, 10)]
    assert shard_bounds(2, 4)[-1] == (2, 2) and sum(b - a for a, b in shard_bounds(2, 4)) == 2
    with pytest.raises(InputError):
        shard_bounds(10, 0)


def _rows_with_nonzeros(counts) -> sp.csr_matrix:
    """Inputs whose row ``i`` holds ``counts[i]`` non-zeros."""
    counts = np.asarray(counts)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    indices = np.concatenate([np.arange(c) for c in counts]).astype(np.int32)
    return sp.csr_matrix((np.ones(indptr[-1], np.float32), indices, indptr), shape=(len(counts), max(counts)))


@pytest.mark.parametrize("balance", ["work", "count"])
def test_shard_rows_put_every_row_in_one_shard(balance):
    inputs = _rows_with_nonzeros(np.random.default_rng(0).integers(1, 50, 101))
    parts = shard_rows(inputs, 4, balance)
    assert sorted(len(p) for p in parts) == [25, 25, 25, 26]
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(101))
    assert all(np.all(np.diff(p) > 0) for p in parts)  # ascending
    with pytest.raises(InputError, match="balance must be one of work, count"):
        shard_rows(inputs, 4, "rows")
    with pytest.raises(InputError, match="shards"):
        shard_rows(inputs, 0, balance)


def test_rows_dealt_by_predicted_work_balance_what_blocks_do_not():
    """Inputs sorted by their non-zeros (the predicted work), the worst case for blocks: dealt,
    every shard holds the same spread of them."""
    counts = np.arange(1, 401)
    inputs = _rows_with_nonzeros(counts)
    blocks = [counts[p].sum() for p in shard_rows(inputs, 4, "count")]
    dealt = [counts[p].sum() for p in shard_rows(inputs, 4, "work")]
    assert max(blocks) / np.mean(blocks) > 1.6
    assert max(dealt) / np.mean(dealt) < 1.01


@pytest.mark.parametrize(
    "cluster, workers, balance",
    [
        (None, 1, "work"),
        (None, 3, "work"),
        (None, 3, "count"),
        pytest.param("local", 2, "work", marks=pytest.mark.slow),
    ],
)
def test_sharded_inference_equals_one_run(cluster, workers, balance):
    if cluster:
        pytest.importorskip("distributed")
    from spartan_py.api import infer, resolve_inputs, resolve_network

    network, inputs = "generated:1024:5", "generated:2000:6"
    one = infer(resolve_network(network, 10), resolve_inputs(inputs, 1024), backend="cpu")
    with open_executor(cluster, workers) as pool:
        merged = infer_sharded(
            network,
            inputs,
            workers=pool,
            shards=3,
            backend="cpu",
            layers=10,
            truth=one.categories,
            keep_values=True,
            balance=balance,
        )
    assert merged.passed is True
    assert np.array_equal(merged.categories, one.categories)
    assert merged.live_rows_by_layer == one.live_rows_by_layer
    assert merged.nonzeros_by_layer == one.nonzeros_by_layer
    assert (merged.values != one.values).nnz == 0
    assert sorted(merged.shard_rows) == [666, 667, 667] and len(merged.shard_seconds) == 3
    assert merged.summary()["balance"] == balance
    assert merged.shard_gpus == [None] * 3 and merged.shard_gpu_bytes == [None] * 3  # no GPU named off the GPU


def test_sharded_auto_picks_the_backend_a_single_run_picks(monkeypatch):
    """``backend="auto"`` chooses per network in every shard, as ``infer`` does (the merged
    kernel on RadiX-Net networks where a GPU is present), not merely GPU or CPU."""
    import spartan_py.scale_out.shard as shard
    from spartan_py.scale_out.shard import release_engines, run_shard

    chosen = []
    real = shard.choose_backend

    def spy(name, network):
        chosen.append((name, real(name, network)))
        return chosen[-1][1]

    monkeypatch.setattr(shard, "choose_backend", spy)
    release_engines()  # no engine kept from another test
    part = run_shard(
        "generated:1024:5",
        "generated:50:6",
        np.arange(50),
        0,
        layers=4,
        rows=None,
        backend="auto",
        repeats=1,
        keep_values=False,
        options={},
    )
    assert chosen[0] == ("auto", part["backend"])  # (make_engine asks again, with the chosen name)


def test_sharded_inference_takes_specs_only():
    from spartan_py.api import resolve_network

    with open_executor() as pool, pytest.raises(InputError, match="specs"):
        infer_sharded(resolve_network("generated:1024", 2), "generated:10", workers=pool)


def test_experiment_executor_field(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text(SWEEP + "executor:\n  cluster: laptop\n  workers: 0\n")
    with pytest.raises(InputError) as info:
        load_experiment(path)
    assert "line 11, field `executor.cluster`" in str(info.value)
    assert "line 12, field `executor.workers`" in str(info.value)
    path.write_text(SWEEP + "executor:\n  cluster: local\n  workers: 2\n")
    experiment, points = load_experiment(path)
    assert experiment.executor.workers == 2 and len(points) == 6


def _die_once(marker: str, value: int) -> int:
    """A task whose worker process dies the first time any task runs it (a marker file says)."""
    from pathlib import Path

    if value == 2 and not Path(marker).exists():
        Path(marker).write_text("died")
        os._exit(1)
    return value * 10


def test_a_broken_process_pool_is_renewed_and_its_work_resubmitted(tmp_path):
    from spartan_py.host.executors import run_all

    marker = str(tmp_path / "died")
    with open_executor(None, 2) as workers:
        first = workers.executor
        results = {
            key: (result, error)
            for key, result, error in run_all(workers, _die_once, {v: (marker, v) for v in range(5)}, retries=2)
        }
        assert workers.executor is not first  # the broken pool was replaced
    assert results == {v: (v * 10, None) for v in range(5)}
    assert (tmp_path / "died").read_text() == "died"


def test_work_that_keeps_killing_its_worker_is_reported_not_retried_forever():
    from spartan_py.host.executors import run_all

    with open_executor(None, 2) as workers:
        found = list(run_all(workers, os._exit, {"boom": (3,)}, retries=1))
    assert len(found) == 1 and found[0][0] == "boom" and found[0][1] is None
    assert type(found[0][2]).__name__ == "BrokenProcessPool"


def test_shards_share_one_merged_network_that_workers_map(tmp_path):
    """A backend that takes a merged network gets one merge for all shards: the file the
    workers map holds the same plan as merging in place (read-only views), and the sharded run
    equals one run whether the preparation is shared or each worker merges its own."""
    from spartan_py.api import infer, resolve_inputs, resolve_network
    from spartan_py.engines.shared.column_merge import merge_network
    from spartan_py.scale_out.shard import release_prepared, shared_preparation

    network, inputs = "generated:1024:5", "generated:600:6"
    path = shared_preparation(network, 6, "gpu-merged-twin")
    assert path is not None and shared_preparation(network, 6, "gpu-merged-twin") == path  # once per process
    assert shared_preparation(network, 6, "cpu") is None  # the cpu engine takes no merged network
    from spartan_py.engines.shared.merged_store import read_merged

    here, mapped = merge_network(resolve_network(network, 6)), read_merged(path)
    assert mapped.width == here.width and len(mapped.layers) == 6
    for a, b in zip(here.layers, mapped.layers):
        assert np.array_equal(a.plan.index, b.plan.index) and np.array_equal(a.plan.weight, b.plan.weight)
        assert np.array_equal(a.groups, b.groups) and np.array_equal(a.sizes, b.sizes)
        assert (a.plan.uniform, a.plan.nnz, a.width_in, a.original_nnz) == (
            b.plan.uniform,
            b.plan.nnz,
            b.width_in,
            b.original_nnz,
        )
        assert not b.plan.index.flags.writeable
    one = infer(resolve_network(network, 6), resolve_inputs(inputs, 1024), backend="gpu-merged-twin")
    with open_executor(None, 2) as pool:
        shared = infer_sharded(network, inputs, workers=pool, backend="gpu-merged-twin", layers=6)
        own = infer_sharded(network, inputs, workers=pool, backend="gpu-merged-twin", layers=6, share_preparation=False)
    release_prepared()
    assert not os.path.exists(path)
    assert shared.shared_preparation and not own.shared_preparation
    for result in (shared, own):
        assert np.array_equal(result.categories, one.categories)
        assert result.live_rows_by_layer == one.live_rows_by_layer
        assert len(result.shard_setup_seconds) == 2


def test_a_merged_network_file_is_checked(tmp_path):
    from spartan_py.api import resolve_network
    from spartan_py.engines.merged.twin import MergedTwinEngine
    from spartan_py.engines.shared.column_merge import merge_network
    from spartan_py.engines.shared.merged_store import read_merged, write_merged

    (tmp_path / "other.bin").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}xyz")
    with pytest.raises(InputError, match="other.bin.*not a merged network file"):
        read_merged(tmp_path / "other.bin")
    with pytest.raises(InputError, match="missing.bin.*not a readable merged network file"):
        read_merged(tmp_path / "missing.bin")
    path = write_merged(merge_network(resolve_network("generated:1024:5", 3)), tmp_path / "three.bin")
    with pytest.raises(InputError, match="3 layers; expected this network's 1024 x 4"):
        MergedTwinEngine(resolve_network("generated:1024:5", 4), merged=read_merged(path))


def test_no_room_for_the_shared_file_means_each_worker_merges_its_own(monkeypatch):
    """A container's small /dev/shm, a full temporary folder: the run goes on as before sharing."""
    import spartan_py.scale_out.shard as shard
    from spartan_py.api import infer, resolve_inputs, resolve_network

    class Full:
        f_bavail, f_frsize = 1, 4096

    monkeypatch.setattr(shard.os, "statvfs", lambda folder: Full())
    shard.release_prepared()
    assert shard.shared_preparation("generated:1024:5", 4, "gpu-merged-twin") is None
    one = infer(
        resolve_network("generated:1024:5", 4), resolve_inputs("generated:300:6", 1024), backend="gpu-merged-twin"
    )
    with open_executor(None, 1) as inline:
        result = infer_sharded(
            "generated:1024:5", "generated:300:6", workers=inline, shards=2, backend="gpu-merged-twin", layers=4
        )
    assert not result.shared_preparation and np.array_equal(result.categories, one.categories)


def test_a_merged_network_file_half_written_is_not_left_behind(tmp_path, monkeypatch):
    """A disk that fills up mid-write leaves neither the file nor its partial copy."""
    import spartan_py.engines.shared.merged_store as store
    from spartan_py.api import resolve_network
    from spartan_py.engines.shared.column_merge import merge_network

    merged = merge_network(resolve_network("generated:1024:5", 2))
    real, written = np.ascontiguousarray, []

    def filling(array):
        written.append(array)
        if len(written) > 2:
            raise OSError(28, "No space left on device")
        return real(array)

    monkeypatch.setattr(store.np, "ascontiguousarray", filling)
    with pytest.raises(OSError, match="No space"):
        store.write_merged(merged, tmp_path / "net.bin")
    assert list(tmp_path.iterdir()) == []
