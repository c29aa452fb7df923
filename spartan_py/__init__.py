"""spartan_py: activation sparsity in deep neural networks on GPUs.

Graph Challenge inference::

    import spartan_py as sp
    network = sp.generate_network(1024, layers=120, seed=0)
    inputs = sp.generate_inputs(6000, 1024, seed=0)
    result = sp.infer(network, inputs, backend="cpu")
    print(result.categories.size, result.edges_per_second)

The Spartan machinery (monitor, compaction, tile-sparse GEMM, policy) and the cost model
(machines, prediction, calibration) are here too; see the documentation's API reference.
"""

from importlib.metadata import PackageNotFoundError, version

from spartan_py.api import InferenceResult, infer, resolve_inputs, resolve_network
from spartan_py.costmodel import (
    Machine,
    Variant,
    calibrate,
    carry_over,
    load_machine,
    load_variants,
    machine_names,
    predict,
)
from spartan_py.costmodel.machine import DEFAULT_MACHINE
from spartan_py.costmodel.simulate import resolve_machine, simulate_trace, trust
from spartan_py.engines import BACKEND_CHOICES, choose_backend, make_engine, resolve_backend
from spartan_py.errors import BackendUnavailableError, DeviceMemoryError, InputError, SpartanError
from spartan_py.graph_challenge import (
    Network,
    generate_inputs,
    generate_network,
    load_inputs,
    load_network,
    read_truth,
    write_network,
    write_triples,
    write_truth,
)
from spartan_py.sparsity import (
    AdaptiveMlp,
    BlockedEll,
    CompactRows,
    CompactTiles,
    Decision,
    KernelPolicy,
    LayerProfile,
    SparsityMonitor,
    TileCounts,
    TileList,
    TileShape,
    blocked_ell_matmul,
    compact_rows,
    compact_tiles,
    dense_matmul,
    expand_rows,
    expand_tiles,
    run_mlp,
    tile_list,
    tile_sparse_matmul,
    to_blocked_ell,
)
from spartan_py.trace import TraceRecord, read_trace, to_frame, write_trace

try:
    __version__ = version("spartan-py")
except PackageNotFoundError:  # a checkout on PYTHONPATH, not installed
    __version__ = "0.1.0"

__all__ = [
    "BACKEND_CHOICES",
    "DEFAULT_MACHINE",
    "AdaptiveMlp",
    "BackendUnavailableError",
    "CompactRows",
    "CompactTiles",
    "Decision",
    "DeviceMemoryError",
    "InferenceResult",
    "InputError",
    "BlockedEll",
    "KernelPolicy",
    "LayerProfile",
    "Machine",
    "Network",
    "SpartanError",
    "SparsityMonitor",
    "TileCounts",
    "TileList",
    "TileShape",
    "TraceRecord",
    "Variant",
    "calibrate",
    "carry_over",
    "compact_rows",
    "compact_tiles",
    "dense_matmul",
    "expand_rows",
    "expand_tiles",
    "generate_inputs",
    "generate_network",
    "infer",
    "load_inputs",
    "load_machine",
    "load_network",
    "load_variants",
    "machine_names",
    "choose_backend",
    "make_engine",
    "predict",
    "read_trace",
    "read_truth",
    "resolve_backend",
    "resolve_inputs",
    "resolve_machine",
    "resolve_network",
    "run_mlp",
    "simulate_trace",
    "tile_list",
    "blocked_ell_matmul",
    "tile_sparse_matmul",
    "to_blocked_ell",
    "to_frame",
    "trust",
    "write_trace",
    "write_network",
    "write_triples",
    "write_truth",
]
