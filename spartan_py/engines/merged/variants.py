"""Variants of the merged kernel's launches that a benchmark selects before any becomes the
default (``benchmarks/gc_merged_variants.py``): the launch schedule (the first launch taking
the cheap layers after it along, or layers per launch given outright) and compile-time
options of ``kernels/gc_merged.cu`` and ``kernels/gc_chain.cu``. None of them changes what is
computed: every row's sums run in the same order over the same operands, so values, live
rows, counts and the categories are the same bits; only the launches that write the fused
monitor's counts follow the schedule (each launch's last layer).

The schedule is worked out from the network alone, so the GPU engine and its CPU twin take
the same one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spartan_py.engines.shared.column_merge import MergedLayer
from spartan_py.engines.shared.launches import MAX_LAUNCH_LAYERS
from spartan_py.errors import InputError

#: Merged steps a layer has at most to ride along in the first launch (``fused_head``): such a
#: layer costs a tile a few shared loads a column (the official networks' layers 2 to 6 merge to
#: two steps of weight 1), far less than the row's trip through device memory and a launch of
#: its own that compacting after it takes.
CHEAP_LAYER_MAX_STEPS = 4

#: Compile-time options by name: (options of the first launches' module of
#: ``kernels/gc_merged.cu``, options of ``kernels/gc_chain.cu``). Each leaves the sums as they are.
KERNEL_OPTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # each chain launch's layer parameters read at once and every layer behind a barrier of its
    # own: a team starts a layer as soon as that layer's stage has landed
    "chain-async-prologue": ((), ("-DCH_ASYNC_PROLOGUE=1",)),
    # the last launch, when the chain kernel runs it, writes its rows n wide itself: no launch
    # of the expansion (gm_expand_rows) after it
    "chain-expand-final": ((), ("-DCH_EXPAND_FINAL=1",)),
    # the counts path's pixel table in shared memory (networks of up to 1024 neurons)
    "pixels-shared": (("-DGM_PIXELS_SHARED=1",), ()),
    # a warp loads the input entries of all its rows of a first-launch tile before scattering any
    "scatter-at-once": (("-DGM_SCATTER_AT_ONCE=1",), ()),
}

#: The widest network ``pixels-shared`` is built for (``GM_PIXELS_MAX`` in the kernel).
PIXELS_SHARED_MAX_NEURONS = 1024


def cheap_head_layers(layers: Sequence[MergedLayer], max_steps: int = CHEAP_LAYER_MAX_STEPS) -> int:
    """Layer 0 and the run of layers after it of at most ``max_steps`` merged steps each: the
    layers a fused first launch takes (at least 1; 0 for a network without layers)."""
    if not layers:
        return 0
    head = 1
    while head < len(layers) and layers[head].plan.steps <= max_steps:
        head += 1
    return head


def fused_head_schedule(chunks: Sequence[int], head: int, max_layers: int = MAX_LAUNCH_LAYERS) -> list[int]:
    """``chunks`` (layers per launch) with the first launch taking layers ``0 .. head - 1``
    (at most ``max_layers``): the launches after it keep their boundaries, the one that
    straddled ``head`` starting there."""
    ends = [int(end) for end in np.cumsum(chunks)]
    if not ends:
        return []
    head = min(head, max_layers, ends[-1])
    if head <= 1:
        return list(chunks)
    cuts = [head, *(end for end in ends if end > head)]
    return [cuts[0], *np.diff(cuts).tolist()]


def checked_launch_layers(launch_layers: Sequence[int], layers: int) -> list[int]:
    """``launch_layers`` (layers per launch, given outright) if every entry is 1 to
    :data:`~spartan_py.engines.shared.launches.MAX_LAUNCH_LAYERS` and they sum to the
    network's ``layers``, else an :class:`~spartan_py.errors.InputError` that says which."""
    sizes = [int(size) for size in launch_layers]
    if any(size < 1 or size > MAX_LAUNCH_LAYERS for size in sizes):
        raise InputError(f"launch_layers entries must be 1 to {MAX_LAUNCH_LAYERS} layers, got {sizes}")
    if sum(sizes) != layers:
        raise InputError(f"launch_layers must sum to the network's {layers} layers, got {sum(sizes)} ({sizes})")
    return sizes


def launch_schedule(
    chunks: Sequence[int],
    layers: Sequence[MergedLayer],
    *,
    fused_head: bool = False,
    launch_layers: Sequence[int] | None = None,
) -> list[int]:
    """Layers per launch of a merged engine: ``launch_layers`` when given, else ``chunks``
    (the engine's ``compact_every`` schedule), its first launch grown over the cheap layers
    after it when ``fused_head`` (:func:`cheap_head_layers`, :func:`fused_head_schedule`)."""
    if launch_layers is not None:
        return checked_launch_layers(launch_layers, len(layers))
    if fused_head:
        return fused_head_schedule(chunks, cheap_head_layers(layers))
    return list(chunks)


def kernel_defines(options: Sequence[str], neurons: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The nvcc options of the first launches' module and of the chain module for the named
    :data:`KERNEL_OPTIONS` (an unknown name, or ``pixels-shared`` on a network wider than
    :data:`PIXELS_SHARED_MAX_NEURONS`, is an :class:`~spartan_py.errors.InputError`)."""
    unknown = [name for name in options if name not in KERNEL_OPTIONS]
    if unknown:
        raise InputError(f"unknown kernel options {unknown}: known are {', '.join(KERNEL_OPTIONS)}")
    if "pixels-shared" in options and neurons > PIXELS_SHARED_MAX_NEURONS:
        raise InputError(
            f"kernel option pixels-shared holds a pixel table of up to {PIXELS_SHARED_MAX_NEURONS} neurons, "
            f"not {neurons}"
        )
    first = tuple(define for name in dict.fromkeys(options) for define in KERNEL_OPTIONS[name][0])
    chain = tuple(define for name in dict.fromkeys(options) for define in KERNEL_OPTIONS[name][1])
    return first, chain
