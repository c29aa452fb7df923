"""cuDNN's convolution as the second dense baseline of a training step, beside cuBLAS on the
im2col GEMMs: PyTorch's ``conv2d`` forward and its two backward convolutions (the input
gradient and the weight gradient, ``aten.convolution_backward``), on the very maps, weights and
output gradient the step's GEMMs multiply (shared with CuPy through DLPack, no copy), each
checked against the cuBLAS product it stands for.

cuDNN reads the maps where cuBLAS reads their im2col: its three calls do the work of the three
GEMMs plus im2col and col2im. PyTorch (the optional ``torch`` extra) is imported only here;
CuPy and PyTorch must queue on the same stream (both default to the legacy null stream), so
that the clock's CUDA events bracket PyTorch's kernels.
"""

from __future__ import annotations

import math

import numpy as np

from spartan_py.sparsity.arrays import array_module
from spartan_py.workloads.conv.layers import ConvLayer, col2im
from spartan_py.workloads.conv.operands import relative_diff

#: the precisions cuDNN runs (fp32x3 has no cuDNN form)
CUDNN_PRECISIONS = ("fp32", "tf32")


def _torch():
    """torch, or None where it does not import or sees no cuDNN GPU."""
    try:
        import torch  # an optional dependency (the torch extra)
    except ImportError:
        return None
    if not torch.cuda.is_available() or not torch.backends.cudnn.is_available():
        return None
    return torch


def cudnn_unavailable(xp, precision: str) -> str | None:
    """Why the step has no cuDNN baseline (one line), or None where it runs one."""
    if xp is np:
        return "not run: no cuDNN on the CPU"
    if precision not in CUDNN_PRECISIONS:
        return f"not run: cuDNN has no {precision} convolution"
    torch = _torch()
    if torch is None:
        return "not run: PyTorch with cuDNN does not import here (pip install -e '.[torch]')"
    if xp.cuda.get_current_stream().ptr != 0 or torch.cuda.current_stream().cuda_stream != 0:
        return "not run: CuPy and PyTorch queue on different streams (the clock's events would not bracket cuDNN)"
    return None


def cudnn_description() -> str:
    """What ran as the cuDNN baseline, with its versions."""
    torch = _torch()
    assert torch is not None
    return (
        f"cuDNN {torch.backends.cudnn.version()} through PyTorch {torch.__version__}: conv2d forward and "
        "aten.convolution_backward (input and weight gradients), cudnn.benchmark on"
    )


class CudnnLayer:
    """One layer's three cuDNN calls on the step's operands: ``maps`` (NCHW, CuPy), ``w``
    (``[K_pad x N]``, its first ``K`` rows the weights in im2col order), ``gradient`` (the
    output's gradient as GEMM rows ``[M_pad x N]``, its first ``batch x out_h x out_w`` real)."""

    def __init__(self, layer: ConvLayer, maps, w, gradient, precision: str, torch=None):
        torch = torch or _torch()  # given: PyTorch on the CPU's arrays (the tests check the layouts there)
        assert torch is not None, "cudnn_unavailable said it runs"
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
        self.torch, self.layer = torch, layer
        batch, channels = maps.shape[:2]
        k = channels * layer.kernel**2
        out = layer.out_size
        self.x = torch.from_dlpack(maps)
        self.weight = torch.from_dlpack(w[:k].T.copy()).reshape(layer.out_channels, channels, layer.kernel, -1)
        rows = gradient[: batch * out * out].reshape(batch, out, out, layer.out_channels)
        self.dy = torch.from_dlpack(rows.transpose(0, 3, 1, 2).copy())
        self.shape = tuple(maps.shape)

    def _backward(self, mask: list[bool]):
        t, layer = self.torch, self.layer
        return t.ops.aten.convolution_backward(
            self.dy, self.x, self.weight, None, [layer.stride] * 2, [layer.pad] * 2, [1, 1], False, [0, 0], 1, mask
        )

    def run(self, gemm: str):
        """The call standing for ``gemm`` (``forward``, ``weight_grad``, ``input_grad``)."""
        if gemm == "forward":
            layer = self.layer
            return self.torch.nn.functional.conv2d(self.x, self.weight, None, layer.stride, layer.pad)
        if gemm == "weight_grad":
            return self._backward([False, True, False])[1]
        return self._backward([True, False, False])[0]

    def difference(self, gemm: str, reference) -> float:
        """Largest difference of the call's result from the cuBLAS GEMM's ``reference``, over
        the largest entry of the reference in the same layout (the input gradient's columns
        summed back to maps by col2im first)."""
        xp = array_module(reference)
        got = xp.from_dlpack(self.run(gemm).contiguous())
        layer, (batch, channels) = self.layer, self.shape[:2]
        out = layer.out_size
        if gemm == "forward":
            want = reference[: batch * out * out].reshape(batch, out, out, -1).transpose(0, 3, 1, 2)
        elif gemm == "weight_grad":
            got = got.reshape(layer.out_channels, -1).T
            want = reference[: channels * layer.kernel**2]
        else:
            want = col2im(reference, self.shape, layer.kernel, layer.stride, layer.pad)
        return relative_diff(got, xp.ascontiguousarray(want))


def time_cudnn(rows: list[dict], layer: ConvLayer, operands: tuple, references: dict, clock, precision: str) -> None:
    """Add each GEMM row's cuDNN time (``cudnn_us``, with ``clock``) and its check against the
    cuBLAS ``references`` (by GEMM name; ``cudnn_max_rel_diff``). ``operands``: the maps, the
    weights and the output's gradient of :class:`CudnnLayer`."""
    maps, w, gradient = operands
    calls = CudnnLayer(layer, maps, w, gradient, precision)
    for row in rows:
        gemm = row["gemm"]
        row["cudnn_us"] = clock(lambda gemm=gemm: calls.run(gemm))
        row["cudnn_max_rel_diff"] = calls.difference(gemm, references[gemm])


def choose_dense_path(rows: list[dict]) -> str:
    """The adaptive step's path through one layer, and each row's ``adaptive_us``: where every
    GEMM of the layer runs dense and cuDNN's three calls take less than cuBLAS's three GEMMs
    with im2col and col2im, the layer runs cuDNN (``cudnn``); otherwise the policy's kernels on
    the im2col GEMMs (``cublas``: im2col charged to the forward row, col2im to the input
    gradient's). The choice is by the layer's measured times, as ``cudnn.benchmark`` picks its
    algorithms by timing them; the monitor's cost stays on the step either way."""
    cudnn = [row.get("cudnn_us", math.nan) for row in rows]
    extra = {"forward": rows[0].get("im2col_us", 0.0), "input_grad": rows[0].get("col2im_us", 0.0)}
    cublas = [row["chosen_us"] + extra.get(row["gemm"], 0.0) for row in rows]
    dense = all(row["kernel"] == "dense" for row in rows)
    path = "cudnn" if dense and all(map(math.isfinite, cudnn)) and sum(cudnn) < sum(cublas) else "cublas"
    for row, via_cudnn, via_cublas in zip(rows, cudnn, cublas, strict=True):
        row["dense_path"] = path
        row["adaptive_us"] = via_cudnn if path == "cudnn" else via_cublas
    return path
