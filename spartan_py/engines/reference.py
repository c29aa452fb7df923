"""The reference engine: the exact challenge semantics with SciPy sparse in float64.

It is the oracle every other backend is checked against, written the obvious way.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from spartan_py.engines.base import Engine, EngineOutput, weight_bytes
from spartan_py.trace import TraceRecord


def reference_layer(activations: sp.csr_matrix, weights: sp.spmatrix, bias: float, clamp: float) -> sp.csr_matrix:
    """One challenge layer: ``min(clamp, ReLU(Y @ W + b))``, the bias only where ``Y @ W != 0``."""
    product = sp.csr_matrix(activations @ weights)
    product.eliminate_zeros()
    product.data += bias
    np.clip(product.data, 0.0, clamp, out=product.data)
    product.eliminate_zeros()
    return product


class ReferenceEngine(Engine):
    """SciPy CSR @ CSR in float64, every row, every layer."""

    name = "reference"

    @property
    def device(self) -> str:
        return "cpu (SciPy, float64)"

    def run(self, inputs: sp.csr_matrix, *, run_id: str = "") -> EngineOutput:
        network = self.network
        activations = sp.csr_matrix(inputs, dtype=np.float64)
        activations.eliminate_zeros()
        live_by_layer, nnz_by_layer, trace = [], [], []
        seconds = 0.0
        for layer, weights in enumerate(network.weights, start=1):
            weights64 = sp.csr_matrix(weights, dtype=np.float64)
            rows_in, nnz_in = int(np.count_nonzero(np.diff(activations.indptr))), activations.nnz
            useful = int(np.asarray(weights64.getnnz(axis=1))[activations.indices].sum())
            start = time.perf_counter()
            activations = reference_layer(activations, weights64, network.bias, network.clamp)
            elapsed = time.perf_counter() - start
            seconds += elapsed
            rows_out = int(np.count_nonzero(np.diff(activations.indptr)))
            live_by_layer.append(rows_out)
            nnz_by_layer.append(activations.nnz)
            trace.append(
                TraceRecord(
                    run=run_id,
                    layer=layer,
                    kernel="reference.spgemm",
                    variant="scipy-csr-float64",
                    rows_in=rows_in,
                    rows_out=rows_out,
                    cols=network.neurons,
                    nnz_in=nnz_in,
                    nnz_out=activations.nnz,
                    bytes_read=nnz_in * 12 + weight_bytes(weights64),
                    bytes_written=activations.nnz * 12,
                    useful_macs=useful,
                    executed_macs=useful,
                    measured_us=elapsed * 1e6,
                    device="cpu",
                )
            )
        live = np.flatnonzero(np.diff(activations.indptr))
        return EngineOutput(
            live_rows=live,
            values=sp.csr_matrix(activations, dtype=np.float32),
            live_rows_by_layer=live_by_layer,
            nonzeros_by_layer=nnz_by_layer,
            seconds=seconds,
            device=self.device,
            trace=trace,
        )
