"""What every inference engine provides, and what a run of one returns."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

import numba
import numpy as np
import scipy.sparse as sp

from spartan_py.graph_challenge.network import Network
from spartan_py.host.threads import csr_by_parts
from spartan_py.trace import TraceRecord


@dataclass
class EngineOutput:
    """The outcome of running a network over input rows.

    ``live_rows`` are the 0-based input rows with a non-zero after the last layer (sorted);
    ``values`` holds the final activations of every row (rows x neurons, float32 CSR).
    ``seconds`` is inference time only: no file reading, no weight preparation.
    """

    live_rows: np.ndarray
    values: sp.csr_matrix
    live_rows_by_layer: list[int]
    nonzeros_by_layer: list[int]
    seconds: float
    device: str
    trace: list[TraceRecord] = field(default_factory=list)
    simulated: bool = False


class Engine(ABC):
    """An inference backend, ready to run once constructed.

    The constructor does all one-off preparation (weight format conversion, compilation,
    transfers), so that :meth:`run` times inference alone.
    """

    name: ClassVar[str] = "?"
    #: The backend that computes this one's results on the CPU with the same trace records,
    #: timed by the cost model in simulated mode (None: no twin).
    cpu_twin: ClassVar[str | None] = None
    #: The experiment options (:mod:`spartan_py.engines.options`) its constructor takes, by name;
    #: the runner passes exactly these, and the schema's help names the backends taking each.
    takes_options: ClassVar[tuple[str, ...]] = ()
    #: Whether it runs on a GPU (so that a sharded run puts each shard on one).
    uses_gpu: ClassVar[bool] = False
    #: The kernel families (:mod:`spartan_py.costmodel.families`) it launches and the cost
    #: model replays; empty for backends the model does not describe.
    trace_families: ClassVar[tuple[str, ...]] = ()
    #: Whether it is a stock-library path (cuBLAS/cuSPARSE through CuPy), the baseline ours
    #: are compared with (they take ``time_limit_seconds``: the run stops with
    #: :class:`~spartan_py.errors.TimeLimitError` when its inference goes past it).
    stock_library: ClassVar[bool] = False
    #: The network widths it runs (None: any); checked before a network is loaded.
    supported_neurons: ClassVar[tuple[int, ...] | None] = None
    #: Whether its constructor takes a network merged elsewhere (``merged=``, a
    #: :class:`~spartan_py.engines.shared.column_merge.MergedNetwork`), so that the shards of a
    #: sharded run can share one preparation.
    takes_merged_network: ClassVar[bool] = False

    def __init__(self, network: Network):
        self.network = network

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """Why this backend cannot run here, or None when it can."""
        return None

    @property
    @abstractmethod
    def device(self) -> str:
        """What the engine runs on, in words (e.g. ``cpu: 2 threads``)."""

    @abstractmethod
    def run(self, inputs: sp.csr_matrix, *, run_id: str = "") -> EngineOutput:
        """Run every layer of the network over ``inputs`` (rows x neurons CSR)."""

    def time(self, inputs: sp.csr_matrix, *, repeats: int = 20, warmup: int = 2) -> list[float]:
        """Inference seconds of ``repeats`` runs of ``inputs`` after ``warmup`` untimed ones
        (each run's own ``seconds``: inference only). Report the median; a GPU engine times
        with CUDA events (:meth:`~spartan_py.engines.shared.gpu_base.GpuEngineBase.time`)."""
        for _ in range(warmup):
            self.run(inputs)
        return [self.run(inputs).seconds for _ in range(repeats)]


def weight_bytes(matrix: sp.spmatrix) -> int:
    """Bytes of a compressed sparse weight matrix: values, indices and pointers."""
    return int(matrix.data.nbytes + matrix.indices.nbytes + matrix.indptr.nbytes)


def live_rows_matrix(live_rows: np.ndarray, values: np.ndarray, total_rows: int) -> sp.csr_matrix:
    """A ``total_rows`` x N CSR matrix whose rows ``live_rows`` (sorted) are ``values`` (live x N)."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    if values.ndim != 2 or values.shape[0] != len(live_rows):
        raise ValueError(f"expected one row of values per live row ({len(live_rows)}), got shape {values.shape}")
    live_rows = np.asarray(live_rows, dtype=np.int64)
    indptr, indices, data = csr_by_parts(_rows_to_csr, len(live_rows), total_rows, values, live_rows)
    return sp.csr_matrix((data, indices, indptr), shape=(total_rows, values.shape[1]))


@numba.njit(cache=True, nogil=True)
def _rows_to_csr(first, stop, values, live_rows, indptr, indices, data):  # pragma: no cover - compiled
    """The CSR arrays of :func:`live_rows_matrix` for rows ``first:stop`` of ``values``: with
    ``indices`` empty, each row's count of non-zeros (NaN included, as SciPy keeps them) to
    ``indptr[live_rows[r] + 1]``; else its non-zeros in column order. Every value is written
    and the position advanced past non-zeros only (a zero's write is overwritten by the next
    non-zero), so no branch is mispredicted on half-dense rows."""
    n = values.shape[1]
    if indices.size == 0:
        for r in range(first, stop):
            count = 0
            for j in range(n):
                count += values[r, j] != 0
            indptr[live_rows[r] + 1] = count
        return
    for r in range(first, stop):
        at, end = indptr[live_rows[r]], indptr[live_rows[r] + 1]
        for j in range(n):
            value = values[r, j]
            if at < end:  # false only past the row's last non-zero
                indices[at] = j
                data[at] = value
            at += value != 0
