"""A small ReLU MLP trained on real handwritten digits, for activations with real sparsity.

The digits are scikit-learn's 1797 8x8 images (shipped inside its wheel; install the
``digits`` extra: ``pip install spartan-py[digits]``). Training is plain NumPy mini-batch
SGD with momentum on softmax cross-entropy, deterministic for a seed.

Example::

    from spartan_py.sparsity.digits import load_digits, train_mlp
    data = load_digits()
    mlp = train_mlp(data, hidden=(128, 128), epochs=20)
    print(mlp.test_accuracy)   # about 0.97
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spartan_py.errors import InputError, OptionalDependencyError


@dataclass(frozen=True)
class Digits:
    """Images ``x`` (float32 ``[n x 64]``, scaled to [0, 1]) and labels ``y``, split into a
    training and a test part (``split`` = index of the first test row)."""

    x: np.ndarray
    y: np.ndarray
    split: int

    @property
    def train(self) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of the training part."""
        return self.x[: self.split], self.y[: self.split]

    @property
    def test(self) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of the test part."""
        return self.x[self.split :], self.y[self.split :]


def load_digits(test_fraction: float = 0.2, seed: int = 0) -> Digits:
    """scikit-learn's handwritten digits, shuffled with ``seed`` and split."""
    try:
        # optional dependency (extra digits)
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError:
        raise OptionalDependencyError(
            "the digits workload needs scikit-learn, which ships the 1797 handwritten digits: "
            "pip install 'spartan-py[digits]' (or pip install scikit-learn)"
        ) from None
    bunch = sklearn_digits()
    order = np.random.default_rng(seed).permutation(len(bunch.target))
    x = (bunch.data[order] / 16.0).astype(np.float32)
    y = bunch.target[order].astype(np.int64)
    return Digits(x, y, int(round(len(y) * (1 - test_fraction))))


def shifted_copies(x: np.ndarray, shifts: int = 1) -> np.ndarray:
    """The 8x8 images and their copies moved by up to ``shifts`` pixels in each direction
    (zero-filled): ``(2 * shifts + 1) ** 2`` times as many real-looking rows."""
    images = x.reshape(-1, 8, 8)
    out = []
    for dy in range(-shifts, shifts + 1):
        for dx in range(-shifts, shifts + 1):
            moved = np.zeros_like(images)
            ys, yd = (slice(0, 8 - dy), slice(dy, 8)) if dy >= 0 else (slice(-dy, 8), slice(0, 8 + dy))
            xs, xd = (slice(0, 8 - dx), slice(dx, 8)) if dx >= 0 else (slice(-dx, 8), slice(0, 8 + dx))
            moved[:, yd, xd] = images[:, ys, xs]
            out.append(moved.reshape(-1, 64))
    return np.concatenate(out)


@dataclass(frozen=True)
class Mlp:
    """A ReLU MLP: ``weights[i]`` float32 ``[in x out]``, ``biases[i]`` ``[out]``; ReLU after
    every layer but the last."""

    weights: tuple
    biases: tuple
    train_accuracy: float = float("nan")
    test_accuracy: float = float("nan")

    @property
    def sizes(self) -> tuple[int, ...]:
        """Layer widths, input first."""
        return (self.weights[0].shape[0], *(w.shape[1] for w in self.weights))

    def forward(self, x: np.ndarray) -> list[np.ndarray]:
        """Each layer's output (hidden ones after ReLU; the last is the logits), in float32."""
        outputs = []
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            x = x @ w + b
            if i < len(self.weights) - 1:
                x = np.maximum(x, 0)
            outputs.append(x.astype(np.float32))
        return outputs

    def accuracy(self, x: np.ndarray, y: np.ndarray) -> float:
        """Fraction of rows whose largest logit is the label."""
        return float((self.forward(x)[-1].argmax(axis=1) == y).mean())


def train_mlp(
    data: Digits,
    *,
    hidden=(256, 256, 256),
    epochs: int = 30,
    learning_rate: float = 0.05,
    batch: int = 64,
    seed: int = 0,
) -> Mlp:
    """Train a ReLU MLP ``64 -> hidden... -> 10`` on ``data``'s training part."""
    if not hidden or any(int(h) < 1 for h in hidden):
        raise InputError(f"hidden must list at least one positive layer width, got {hidden!r}")
    rng = np.random.default_rng(seed)
    sizes = (data.x.shape[1], *map(int, hidden), 10)
    weights = [rng.standard_normal((a, b)) * np.sqrt(2.0 / a) for a, b in zip(sizes, sizes[1:])]
    biases = [np.zeros(b) for b in sizes[1:]]
    velocity = [np.zeros_like(p) for p in weights + biases]
    x_train, y_train = data.train
    for _ in range(epochs):
        order = rng.permutation(len(y_train))
        for first in range(0, len(order), batch):
            rows = order[first : first + batch]
            grads = _gradients(weights, biases, x_train[rows].astype(np.float64), y_train[rows])
            for i, (param, grad) in enumerate(zip(weights + biases, grads)):
                velocity[i] = 0.9 * velocity[i] - learning_rate * grad
                param += velocity[i]
    mlp = Mlp(tuple(w.astype(np.float32) for w in weights), tuple(b.astype(np.float32) for b in biases))
    return Mlp(mlp.weights, mlp.biases, mlp.accuracy(*data.train), mlp.accuracy(*data.test))


def _gradients(weights, biases, x, y):
    """Gradients of the mean softmax cross-entropy, weights then biases."""
    activations = [x]
    for i, (w, b) in enumerate(zip(weights, biases)):
        z = activations[-1] @ w + b
        activations.append(np.maximum(z, 0) if i < len(weights) - 1 else z)
    logits = activations[-1]
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(y)), y] -= 1
    delta = p / len(y)
    grad_w, grad_b = [None] * len(weights), [None] * len(weights)
    for i in range(len(weights) - 1, -1, -1):
        grad_w[i] = activations[i].T @ delta
        grad_b[i] = delta.sum(axis=0)
        if i:
            delta = (delta @ weights[i].T) * (activations[i] > 0)
    return grad_w + grad_b
