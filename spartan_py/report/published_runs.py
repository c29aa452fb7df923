"""Published figures shown beside ours: Graph Challenge runs (1024 neurons x 120 layers,
60000-row proxy). Spartan's conv-layer training speed-ups sit with the networks they are of
(:data:`spartan_py.workloads.conv.layers.SPARTAN_TRAINING_SPEEDUP`)."""

from __future__ import annotations

#: (name, milliseconds, what the time includes, source)
PROXY_1024x120 = (
    (
        "SNICIT-2023",
        12.4,
        "inputs and weights on the device",
        "issue 3: published code run on an H100 with the proxy input",
    ),
    (
        "XY-2021",
        16.5,
        "inputs and weights on the device",
        "issue 3: published code run on an H100 with the proxy input",
    ),
    ("SNIG-2020", 77.6, "includes transfers", "issue 3: published code run on an H100 with the proxy input"),
    ("BF-2019", 231.0, "includes transfers", "issue 3: published code run on an H100 with the proxy input"),
)
PROXY_EDGES = 60000 * 120 * 32 * 1024  # rows x layers x edges per layer


def published_rates() -> list[dict]:
    """The published runs as rows: name, seconds, edges per second, what is included, source."""
    return [
        {
            "name": name,
            "seconds": ms / 1e3,
            "edges_per_second": PROXY_EDGES / (ms / 1e3),
            "includes": includes,
            "source": source,
        }
        for name, ms, includes, source in PROXY_1024x120
    ]
