"""Stock-library GPU baselines, selectable as backends, timed the same way as ``gpu``.

* ``gpu-cusparse-spgemm``: activations as CuPy CSR, ``Y @ W`` by cuSPARSE SpGEMM.
* ``gpu-cusparse-spmm``: dense activations, ``W^T @ Y^T`` by cuSPARSE SpMM (all rows).
* ``gpu-cublas-dense``: dense activations and dense weights, cuBLAS SGEMM (all rows).
* ``gpu-dense-compact``: as ``gpu-cublas-dense`` but on the live rows only, compacting with
  a boolean mask each layer (one host sync per layer, as the obvious code does).

Inputs and weights are uploaded before timing; ``seconds`` covers the layer loop, measured
with CUDA events. With ``time_limit_seconds`` the loop synchronises every
:data:`LIMIT_CHECK_LAYERS` layers and stops with :class:`~spartan_py.errors.TimeLimitError`
once past the limit (how "the stock path does not finish in a minute" is told).
"""

from __future__ import annotations

import functools

import numpy as np
import scipy.sparse as sp

from spartan_py.engines.base import Engine, EngineOutput, live_rows_matrix
from spartan_py.engines.shared.cuda import cupy_unavailable_reason, device_name, import_cupy
from spartan_py.errors import DeviceMemoryError, TimeLimitError
from spartan_py.trace import TraceRecord

#: Layers between the time-limit checks (each a host synchronisation: one every 16 layers
#: of a stock path's 0.1-100 ms layers adds well under 1%).
LIMIT_CHECK_LAYERS = 16


@functools.cache
def _epilogue():
    # optional dependency (extra gpu)
    import cupy

    return cupy.ElementwiseKernel(
        "float32 z, float32 bias, float32 clamp",
        "float32 y",
        "y = (z != 0.0f) ? fminf(fmaxf(z + bias, 0.0f), clamp) : 0.0f",
        "spartan_gc_epilogue",
    )


class _CupyBaseline(Engine):
    """Shared set-up and timing; subclasses define the per-layer step."""

    kernel_name = "?"
    uses_gpu = True
    stock_library = True
    takes_options = ("time_limit_seconds",)

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return cupy_unavailable_reason()

    def __init__(self, network, *, time_limit_seconds: float | None = None):
        super().__init__(network)
        self.time_limit_seconds = time_limit_seconds
        self.cp = import_cupy()
        self._device = device_name(self.cp)
        try:
            self.weights = [self._prepare(w) for w in network.weights]
        except self.cp.cuda.memory.OutOfMemoryError:
            raise DeviceMemoryError(f"{self.name}: the weights of {network.layers} layers do not fit the GPU") from None
        self._warm_up()

    def _warm_up(self) -> None:
        """One layer on a one-row input, untimed: the library's handles, plans and kernels
        are set up here, not in the first timed run."""
        probe = sp.csr_matrix(np.ones((1, self.network.neurons), dtype=np.float32))
        self._step(self._start(probe), self.weights[0])
        self.cp.cuda.Device().synchronize()

    @property
    def device(self) -> str:
        return self._device

    def _check_time(self, start, stop, layer: int) -> None:
        stop.record()
        stop.synchronize()
        elapsed = self.cp.cuda.get_elapsed_time(start, stop) / 1e3
        if elapsed > self.time_limit_seconds:
            raise TimeLimitError(
                f"{self.name}: {elapsed:.1f} s after {layer} of {self.network.layers} layers, past the "
                f"{self.time_limit_seconds:g} s limit"
            )

    def _prepare(self, matrix):
        raise NotImplementedError

    def _start(self, inputs):
        raise NotImplementedError

    def _step(self, state, weights):
        raise NotImplementedError

    def _finish(self, state, rows):
        """(live rows, final values as a (live, N) host array), aligned."""
        raise NotImplementedError

    def run(self, inputs: sp.csr_matrix, *, run_id: str = "") -> EngineOutput:
        cp = self.cp
        network = self.network
        inputs = sp.csr_matrix(inputs, dtype=np.float32)
        try:
            state = self._start(inputs)
            cp.cuda.Device().synchronize()
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            for layer, weights in enumerate(self.weights, start=1):
                state = self._step(state, weights)
                if self.time_limit_seconds is not None and layer % LIMIT_CHECK_LAYERS == 0:
                    self._check_time(start, stop, layer)
            stop.record()
            stop.synchronize()
            # Per-layer counts come from a second, untimed pass (the same computation), so the
            # timed loop holds the baseline's own work only.
            del state
            state, live, nnz = self._start(inputs), [], []
            for weights in self.weights:
                state = self._step(state, weights)
                live.append(state.live_count())
                nnz.append(state.nnz_count())
        except cp.cuda.memory.OutOfMemoryError as exc:
            raise DeviceMemoryError(f"{self.name}: {inputs.shape[0]} rows do not fit the GPU ({exc})") from None
        seconds = cp.cuda.get_elapsed_time(start, stop) / 1e3
        live_counts = [int(v) for v in cp.asnumpy(cp.stack(live))] if live else []
        nnz_counts = [int(v) for v in cp.asnumpy(cp.stack(nnz))] if nnz else []
        rows, values = self._finish(state, inputs.shape[0])
        order = np.argsort(rows)
        rows = rows[order]
        final = live_rows_matrix(rows, values[order], inputs.shape[0])
        trace = [
            TraceRecord(
                run=run_id,
                layer=network.layers,
                kernel=self.kernel_name,
                rows_in=inputs.shape[0],
                rows_out=int(rows.size),
                cols=network.neurons,
                host_syncs=1,
                measured_us=seconds * 1e6,
                device=self.device,
            )
        ]
        return EngineOutput(rows, final, live_counts, nnz_counts, seconds, self.device, trace)


class _DenseState:
    """Dense activations (rows x N) plus the input-row number of each row."""

    def __init__(self, cp, values, ids):
        self.cp, self.values, self.ids = cp, values, ids

    def live_count(self):
        return (self.values != 0).any(axis=1).sum()

    def nnz_count(self):
        return (self.values != 0).sum()


class CublasDenseEngine(_CupyBaseline):
    """Dense float32 matmul by cuBLAS on every row, every layer."""

    name = "gpu-cublas-dense"
    kernel_name = "gpu.cublas_sgemm"

    def _prepare(self, matrix):
        return self.cp.asarray(matrix.toarray().astype(np.float32))

    def _start(self, inputs):
        cp = self.cp
        return _DenseState(cp, cp.asarray(inputs.toarray()), cp.arange(inputs.shape[0]))

    def _step(self, state, weights):
        z = state.values @ weights
        _epilogue()(z, np.float32(self.network.bias), np.float32(self.network.clamp), z)
        return _DenseState(state.cp, z, state.ids)

    def _finish(self, state, rows):
        cp = self.cp
        alive = (state.values != 0).any(axis=1)
        return cp.asnumpy(state.ids[alive]), cp.asnumpy(state.values[alive])


class DenseCompactEngine(CublasDenseEngine):
    """Dense matmul on the live rows only; rows compacted by a boolean mask each layer."""

    name = "gpu-dense-compact"
    kernel_name = "gpu.cublas_sgemm_compact"

    def _step(self, state, weights):
        state = super()._step(state, weights)
        alive = (state.values != 0).any(axis=1)
        return _DenseState(state.cp, state.values[alive], state.ids[alive])


class CusparseSpmmEngine(_CupyBaseline):
    """Dense activations times CSR weights by cuSPARSE SpMM, every row."""

    name = "gpu-cusparse-spmm"
    kernel_name = "gpu.cusparse_spmm"

    def _prepare(self, matrix):
        # optional dependency (extra gpu)
        import cupyx.scipy.sparse as csp

        return csp.csr_matrix(sp.csr_matrix(matrix.T, dtype=np.float32))  # W^T, so Y^T <- W^T @ Y^T

    def _start(self, inputs):
        cp = self.cp
        return _DenseState(cp, cp.asfortranarray(cp.asarray(inputs.toarray())), cp.arange(inputs.shape[0]))

    def _step(self, state, weights):
        z = (weights @ state.values.T).T
        _epilogue()(z, np.float32(self.network.bias), np.float32(self.network.clamp), z)
        return _DenseState(state.cp, z, state.ids)

    _finish = CublasDenseEngine._finish


class _SparseState:
    def __init__(self, matrix):
        self.values = matrix

    def live_count(self):
        return (self.values.indptr[1:] > self.values.indptr[:-1]).sum()

    def nnz_count(self):
        return self.values.indptr[-1]


class CusparseSpgemmEngine(_CupyBaseline):
    """CSR activations times CSR weights by cuSPARSE SpGEMM."""

    name = "gpu-cusparse-spgemm"
    kernel_name = "gpu.cusparse_spgemm"

    def _prepare(self, matrix):
        # optional dependency (extra gpu)
        import cupyx.scipy.sparse as csp

        return csp.csr_matrix(sp.csr_matrix(matrix, dtype=np.float32))

    def _start(self, inputs):
        # optional dependency (extra gpu)
        import cupyx.scipy.sparse as csp

        return _SparseState(csp.csr_matrix(inputs))

    def _step(self, state, weights):
        z = state.values @ weights
        z.eliminate_zeros()
        _epilogue()(z.data, np.float32(self.network.bias), np.float32(self.network.clamp), z.data)
        z.eliminate_zeros()
        return _SparseState(z)

    def _finish(self, state, rows):
        host = state.values.get().tocsr()
        alive = np.flatnonzero(np.diff(host.indptr))
        return alive, host[alive].toarray()
