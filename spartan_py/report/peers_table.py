"""The peers result (``benchmarks/peers.py``: our Graph Challenge engines beside SNICIT, XY-2021,
SNIG-2020 and BF-2019 on one GPU) as a Markdown table: the results page's headline and the docs'
snippet (``python -m benchmarks.peers table``)."""

from __future__ import annotations

from spartan_py.report.cells import markdown_table as _table
from spartan_py.report.cells import ms as _ms
from spartan_py.report.cells import sig as _g

#: The peers result's columns: ours, then the peers as their papers name them.
PEERS_TABLE_SYSTEMS = ("gpu-merged", "gpu", "auto", "SNICIT", "XY-2021", "SNIG-2020", "BF-2019")


def _network_size(key: str) -> tuple[int, int]:
    neurons, layers = key.split("x")
    return int(neurons), int(layers)


def peers_table(data: dict) -> list[str]:
    """A peers result (``benchmarks/peers.py``) as a table: each system's inference time in ms
    per network (``-``: it did not run there; ``*``: the time comes from the call's log; a network
    whose call was cut short says so), ``auto``'s set-up and its whole ``spartan infer`` command's
    wall time, the fastest peer's time over ``auto``'s, and which systems' categories differed."""
    header = (
        "network",
        *PEERS_TABLE_SYSTEMS,
        "auto: set-up s",
        "auto: whole command s",
        "fastest peer / auto",
        "categories",
    )
    rows = []
    for key in sorted(data["networks"], key=_network_size):
        entry = data["networks"][key]
        systems = entry["systems"]
        cells: list[str] = []
        peer_seconds: list[float] = []
        borderline: list[str] = []
        failed: list[str] = []
        for name in PEERS_TABLE_SYSTEMS:
            system = systems.get(name)
            seconds = None if system is None else system.get("inference_seconds")
            cells.append(_ms(seconds) + ("*" if system and "from_log" in system else ""))
            if name in PEERS_TABLE_SYSTEMS[3:] and seconds is not None:
                peer_seconds.append(seconds)
            if system is not None and system.get("categories_equal") is False:
                (borderline if system.get("categories_passed") else failed).append(name)
        auto = systems.get("auto", {})
        ratio = min(peer_seconds) / auto["inference_seconds"] if peer_seconds and "inference_seconds" in auto else None
        verdict = "; ".join(
            [f"FAILED: {', '.join(failed)}"] * bool(failed)
            + [f"{', '.join(borderline)}: only borderline rows differ"] * bool(borderline)
        )
        rows.append(
            (
                f"{key} ({entry['network']}{', cut short' if entry.get('complete') is False else ''})",
                *cells,
                _g(auto.get("setup_seconds"), 2),
                _g(entry.get("auto_command", {}).get("wall_seconds"), 3),
                "-" if ratio is None else f"{_g(ratio, 3)}x",
                verdict or "identical",
            )
        )
    return _table(header, rows)
