"""Adaptive inference of a ReLU MLP: each layer's output is profiled by the monitor as its
epilogue writes it, and the policy picks the next layer's GEMM from that profile.

:func:`run_mlp` runs one batch, deciding each layer from the profile just taken: the host
reads the counts, so it waits for the GPU once per layer. :class:`AdaptiveMlp` runs batch
after batch and decides from the previous batch's profile of the same layer, whose counts
were copied to the host while the GPU worked on: the host queues a whole batch without
waiting, as a dense run does. The kernel chosen always runs on the current batch's own
counts (the tile GEMM's list is built from them on the device).

Example::

    from spartan_py.sparsity import AdaptiveMlp, KernelPolicy, SparsityMonitor, run_mlp
    from spartan_py.sparsity.digits import load_digits, train_mlp
    data = load_digits()
    mlp = train_mlp(data, hidden=(128, 128), epochs=10)
    run = run_mlp(mlp, data.x, policy=KernelPolicy(), monitor=SparsityMonitor(tile=(64, 32)))
    print([d.kernel for d in run.decisions], run.accuracy(data.y))
    model = AdaptiveMlp(mlp, KernelPolicy(), SparsityMonitor(tile=(64, 32)))
    runs = [model(batch) for batch in (data.x[:900], data.x[900:])]
    print(runs[1].decisions[1].reason)   # decided from the first batch's profile
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from spartan_py.errors import InputError
from spartan_py.sparsity.arrays import array_module, as_matrix, is_gpu_array
from spartan_py.sparsity.digits import Mlp
from spartan_py.sparsity.monitor import LayerProfile, SparsityMonitor
from spartan_py.sparsity.policy import Decision, KernelPolicy
from spartan_py.sparsity.tile_gemm import dense_matmul


@dataclass
class MlpRun:
    """Logits of every row, and per layer the decision taken and the profile of its output."""

    logits: Any
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


class AdaptiveMlp:
    """``mlp`` run batch after batch (``model(x)`` gives an :class:`MlpRun`), each layer's
    GEMM picked by ``policy`` from the ``monitor``'s profile of its input.

    ``lag=1``: a layer decides from its profile in the previous batch (counts scaled to the
    current batch's rows), prefetched to the host when that batch ran, so no decision waits
    for the GPU; the first batch, and a layer whose previous profile is missing, decide from
    their own profile. A decision is reused while the counts behind it are the same (the
    stale profiles of a ``sampled`` monitor). ``lag=0``: every layer decides from its own
    profile (one wait each). Without a policy every layer is dense; without a monitor (or mode ``off``) there are no
    profiles, so every layer is dense. ``weights``: ``device_weights(mlp, x)`` computed
    once by the caller (else on first use, per device)."""

    def __init__(
        self,
        mlp: Mlp,
        policy: KernelPolicy | None = None,
        monitor: SparsityMonitor | None = None,
        *,
        weights=None,
        lag: int = 1,
    ):
        if lag not in (0, 1):
            raise InputError(f"lag must be 0 (decide from this batch) or 1 (from the previous batch), got {lag!r}")
        self.mlp = mlp
        self.policy = policy
        self.monitor = monitor or SparsityMonitor(mode="off")
        self.lag = lag
        self._weights = {} if weights is None else {is_gpu_array(weights[0][0]): weights}
        self._previous: list[LayerProfile | None] = []
        self._decided: dict[int, tuple] = {}  # layer -> (what it was decided from, decision)

    def _weights_for(self, x):
        key = is_gpu_array(x)
        if key not in self._weights:
            self._weights[key] = device_weights(self.mlp, x)
        return self._weights[key]

    def _decide(self, i: int, profile: LayerProfile | None, m: int, n: int) -> Decision:
        if self.policy is None:
            return Decision(i, "dense", reason="no policy")
        earlier = self._previous[i - 1] if self.lag and 0 < i <= len(self._previous) else None
        if earlier is None:
            return self.policy.choose(profile, n, layer=i)
        key = (i, earlier.call, earlier.shape, m)  # a sampled monitor's stale profiles repeat their counts' call
        if self._decided.get(i, (None,))[0] != key:
            decision = self.policy.choose(earlier, n, m=m, layer=i)
            self._decided[i] = (key, replace(decision, reason=f"{decision.reason}; from the previous batch's profile"))
        return self._decided[i][1]

    def __call__(self, x) -> MlpRun:
        """One batch ``x`` ``[rows x inputs]`` (NumPy or CuPy) through the network."""
        x = as_matrix(x, "x")
        if x.shape[1] != self.mlp.sizes[0]:
            raise InputError(f"x has {x.shape[1]} columns; the MLP takes {self.mlp.sizes[0]} inputs")
        ws, bs = self._weights_for(x)
        decisions: list = []
        profiles: list = []
        a, profile = x, None
        for i, (w, b) in enumerate(zip(ws, bs)):
            decision = self._decide(i, profile, a.shape[0], w.shape[1])
            if decision.kernel == "dense" or self.policy is None:  # no policy decides dense
                z = dense_matmul(a, w)
            else:
                z = self.policy.run(decision, a, w, profile)
            decisions.append(decision)
            if i == len(ws) - 1:
                z += b
                profiles.append(None)
                break
            a, profile = self.monitor.epilogue(z, b, layer=i, out=z)
            if self.lag and self.policy is not None:
                self.policy.prefetch(profile)
            profiles.append(profile)
        self._previous = profiles
        return MlpRun(z, decisions, profiles)


def run_mlp(
    mlp: Mlp, x, *, policy: KernelPolicy | None = None, monitor: SparsityMonitor | None = None, weights=None
) -> MlpRun:
    """Forward one batch ``x`` through ``mlp`` on ``x``'s device, each layer deciding from its
    own input's profile (:class:`AdaptiveMlp` with ``lag=0``). Without a policy every layer
    is dense (cuBLAS or NumPy); without a monitor (or mode ``off``) there are no profiles, so
    the policy chooses dense. ``weights``: ``device_weights(mlp, x)`` computed once by the
    caller."""
    return AdaptiveMlp(mlp, policy, monitor, weights=weights, lag=0)(x)
