"""TF32 rounding, and ``fp32x3``: an FP32 product as three TF32 products on tensor cores.

Each operand is split into its TF32 part and the residual, ``x = hi + lo`` exactly
(``hi = round_to_tf32(x)``; ``lo = x - hi`` is exact in FP32), and ``A @ W`` is taken as
``lo_A hi_W + hi_A lo_W + hi_A hi_W``, accumulated in FP32, the small terms first. The
dropped ``lo_A lo_W`` is about ``2^-22`` of ``|A| |W|``, and rounding ``lo`` itself to TF32
another ``2^-22``: far closer to an FP32 product than TF32's ``2^-11``, though not equal to
it (``docs/spartan.md`` has the measured errors against float64). It is opt-in: only a
``precision="fp32x3"`` asked for by the caller runs it; FP32 layers never fall back to it.

The split is one pass over each operand (its cost is in the product's time); the three
products are cuBLAS TF32 GEMMs accumulating into the output (``beta = 1``) or the TF32 tile
GEMM, whose three outputs are summed.
"""

from __future__ import annotations

import functools

import numpy as np

from spartan_py.sparsity.arrays import array_module, is_gpu_array


def round_to_tf32(x):
    """``x`` (float32, either device) rounded to TF32's 10-bit mantissa, to nearest with ties
    away from zero (what ``cvt.rna.tf32.f32`` does); NaN and infinities pass unchanged."""
    xp = array_module(x)
    x = xp.ascontiguousarray(x, dtype=xp.float32)
    bits = x.view(xp.uint32)
    finite = (bits & 0x7F800000) != 0x7F800000
    rounded = ((bits + xp.uint32(0x1000)) & xp.uint32(0xFFFFE000)).astype(xp.uint32)
    return xp.where(finite, rounded, bits).astype(xp.uint32).view(xp.float32)


#: The order of the three products: (A part, W part), the smallest terms first.
PRODUCT_TERMS = (("lo", "hi"), ("hi", "lo"), ("hi", "hi"))


@functools.cache
def _split_kernel():
    # optional dependency (extra gpu)
    import cupy

    # the rounding of round_to_tf32 (to nearest, ties away from zero) in one pass
    return cupy.ElementwiseKernel(
        "float32 x",
        "float32 hi, float32 lo",
        """
        unsigned int bits = __float_as_uint(x);
        if ((bits & 0x7F800000u) == 0x7F800000u) { hi = x; lo = 0.0f; }
        else { hi = __uint_as_float((bits + 0x1000u) & 0xFFFFE000u); lo = x - hi; }
        """,
        "spartan_split_tf32",
    )


def split_tf32(x):
    """``(hi, lo)`` with ``hi`` the TF32 rounding of float32 ``x`` and ``lo = x - hi`` (exact),
    on ``x``'s device; NaN and infinities go to ``hi`` with ``lo`` zero."""
    if is_gpu_array(x):
        return _split_kernel()(x)
    hi = round_to_tf32(x)
    finite = np.isfinite(x)
    lo = np.zeros_like(hi)
    np.subtract(x, hi, out=lo, where=finite)
    return hi, lo


def three_tf32_product(a, w, product, out=None):
    """``A @ W`` as three TF32 products: ``product(a_part, w_part, out, accumulate)`` computes
    one TF32 product into ``out`` (adding to it when ``accumulate``) and returns it. ``a``
    and ``w`` are float32 on one device."""
    parts = {"A": dict(zip(("hi", "lo"), split_tf32(a), strict=True))}
    parts["W"] = dict(zip(("hi", "lo"), split_tf32(w), strict=True))
    for index, (a_part, w_part) in enumerate(PRODUCT_TERMS):
        out = product(parts["A"][a_part], parts["W"][w_part], out, index > 0)
    return out


def summed_product(tf32_product):
    """A ``product`` for :func:`three_tf32_product` from ``tf32_product(a, w, out)``, a TF32
    product that overwrites ``out``: the second and third go to a scratch matrix added in."""
    scratch: list = []

    def product(a, w, out, accumulate):
        if not accumulate:
            return tf32_product(a, w, out)
        if not scratch:
            scratch.append(array_module(out).empty_like(out))
        out += tf32_product(a, w, scratch[0])
        return out

    return product
