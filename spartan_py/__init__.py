"""spartan_py: activation sparsity in deep neural networks on GPUs.

Graph Challenge inference::

    import spartan_py as sp
    network = sp.generate_network(1024, layers=120, seed=0)
    inputs = sp.generate_inputs(6000, 1024, seed=0)
    result = sp.infer(network, inputs, backend="cpu")
    print(result.categories.size, result.edges_per_second)
"""

from spartan_py.api import InferenceResult, infer, resolve_inputs, resolve_network
from spartan_py.engines import BACKEND_CHOICES, make_engine, resolve_backend
from spartan_py.errors import BackendUnavailableError, DeviceMemoryError, InputError, SpartanError
from spartan_py.graph_challenge import (
    Network,
    generate_inputs,
    generate_network,
    load_inputs,
    load_network,
    read_truth,
    write_triples,
    write_truth,
)
from spartan_py.trace import TraceRecord, read_trace, to_frame, write_trace

__version__ = "0.1.0"

__all__ = [
    "BACKEND_CHOICES",
    "BackendUnavailableError",
    "DeviceMemoryError",
    "InferenceResult",
    "InputError",
    "Network",
    "SpartanError",
    "TraceRecord",
    "generate_inputs",
    "generate_network",
    "infer",
    "load_inputs",
    "load_network",
    "make_engine",
    "read_trace",
    "read_truth",
    "resolve_backend",
    "resolve_inputs",
    "resolve_network",
    "to_frame",
    "write_trace",
    "write_triples",
    "write_truth",
]
