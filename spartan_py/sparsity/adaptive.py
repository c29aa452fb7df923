"""Adaptive inference of a ReLU MLP: each layer's output is profiled by the monitor as its
epilogue writes it, and the policy picks the next layer's GEMM from that profile.

Example::

    from spartan_py.sparsity import KernelPolicy, SparsityMonitor, run_mlp
    from spartan_py.sparsity.digits import load_digits, train_mlp
    data = load_digits()
    mlp = train_mlp(data, hidden=(128, 128), epochs=10)
    run = run_mlp(mlp, data.x, policy=KernelPolicy(), monitor=SparsityMonitor(tile=(64, 32)))
    print([d.kernel for d in run.decisions], run.accuracy(data.y))
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spartan_py.sparsity.arrays import array_module, as_matrix, is_gpu_array
from spartan_py.sparsity.digits import Mlp
from spartan_py.sparsity.monitor import LayerProfile, SparsityMonitor
from spartan_py.sparsity.policy import Decision, KernelPolicy
from spartan_py.sparsity.tile_gemm import dense_matmul


@dataclass
class MlpRun:
    """Logits of every row, and per layer the decision taken and the profile of its output."""

    logits: object
    decisions: list[Decision]
    profiles: list[LayerProfile | None]

    def accuracy(self, labels) -> float:
        """Fraction of rows whose largest logit is the label."""
        logits = self.logits.get() if is_gpu_array(self.logits) else np.asarray(self.logits)
        return float((logits.argmax(axis=1) == np.asarray(labels)).mean())


def device_weights(mlp: Mlp, like) -> tuple[list, list]:
    """The MLP's weights and biases on the device of ``like`` (NumPy or CuPy)."""
    xp = array_module(like)
    return [xp.asarray(w) for w in mlp.weights], [xp.asarray(b) for b in mlp.biases]


def run_mlp(mlp: Mlp, x, *, policy: KernelPolicy | None = None, monitor: SparsityMonitor | None = None,
            weights=None) -> MlpRun:
    """Forward ``x`` through ``mlp`` on ``x``'s device. Without a policy every layer is dense
    (cuBLAS or NumPy); without a monitor (or mode ``off``) there are no profiles, so the
    policy chooses dense. ``weights``: ``device_weights(mlp, x)`` computed once by the caller."""
    x = as_matrix(x, "x")
    ws, bs = weights if weights is not None else device_weights(mlp, x)
    monitor = monitor or SparsityMonitor(mode="off")
    decisions, profiles = [], []
    a, profile = x, None
    for i, (w, b) in enumerate(zip(ws, bs)):
        if policy is None:
            decision = Decision(i, "dense", reason="no policy")
            z = dense_matmul(a, w)
        else:
            decision = policy.choose(profile, w.shape[1], layer=i)
            z = policy.run(decision, a, w, profile)
        decisions.append(decision)
        if i == len(ws) - 1:
            z += b
            profiles.append(None)
            return MlpRun(z, decisions, profiles)
        a, profile = monitor.epilogue(z, b, layer=i, out=z)
        profiles.append(profile)
    raise AssertionError("unreachable: an MLP has at least one layer")
