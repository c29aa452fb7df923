"""How a layer kernel's launches are scheduled and monitored: layers per launch (the chunk
schedule) and the fused monitor's modes, for every layer kernel and its CPU twin."""

from __future__ import annotations

from spartan_py.errors import InputError

#: Most layers one launch runs (the ``"doubling"`` schedule's last size).
MAX_LAUNCH_LAYERS = 32

#: Layers at the start of a network that the ``"doubling"`` schedule runs in launches of the
#: kernel's own size (``head_layers``) before doubling from 2.
HEAD_LAYERS = 4


def chunk_schedule(
    layers: int, compact_every: str | int = "doubling", max_layers: int = MAX_LAUNCH_LAYERS, head_layers: int = 1
) -> list[int]:
    """Layers per launch of a layer kernel; live rows are compacted after each launch.

    ``"doubling"``: the first four layers (where most rows of a sparse DNN die) in launches of
    ``head_layers``, then 2, 4, 8, ... layers per launch, at most ``max_layers``. An integer
    gives launches of that many layers.
    """
    if isinstance(compact_every, int):
        if compact_every < 1:
            raise ValueError("compact_every must be at least 1")
        sizes = [compact_every] * (layers // compact_every)
        return sizes + ([layers % compact_every] if layers % compact_every else [])
    if compact_every != "doubling":
        raise ValueError(f"compact_every must be 'doubling' or a positive integer, not {compact_every!r}")
    cap = max(max_layers, 1)
    sizes = []
    while sum(sizes) < min(HEAD_LAYERS, layers):
        sizes.append(min(head_layers, cap, min(HEAD_LAYERS, layers) - sum(sizes)))
    size = 2
    while sum(sizes) < layers:
        sizes.append(min(size, cap, layers - sum(sizes)))
        size = min(size * 2, cap)
    return sizes


#: Monitor modes of the gpu kernel: ``fused`` (its epilogue writes per-row, per-32-column
#: counts), ``sampled`` (fused on every k-th launch), ``software`` (monitor off in the kernel,
#: then a separate counting pass, a copy of the counts to the host and a sync after every
#: layer; this needs one layer per launch), ``off``.
GC_MONITOR_MODES = ("off", "fused", "sampled", "software")


def gc_monitor_mode(monitor: bool | str) -> str:
    """The monitor mode from a bool (True: fused) or a name in :data:`GC_MONITOR_MODES`."""
    if isinstance(monitor, bool):
        return "fused" if monitor else "off"
    if monitor not in GC_MONITOR_MODES:
        raise InputError(f"monitor must be one of {', '.join(GC_MONITOR_MODES)} (or a bool), not {monitor!r}")
    return monitor


def launch_monitored(mode: str, launch: int, every: int) -> bool:
    """Whether launch number ``launch`` writes the fused monitor's counts."""
    return mode == "fused" or (mode == "sampled" and launch % every == 0)
