"""What tells GPUs of one name apart, as the driver reports them: clocks, power limit, the
GPUs in the node. A run records them (``environment.json``), so that two runs on "an H200"
can be told apart afterwards, and a machine file can say which of them it assumes."""

from __future__ import annotations

import shutil
import subprocess

QUERY_FIELDS = (
    "index",
    "name",
    "clocks.max.sm",
    "clocks.max.mem",
    "clocks.sm",
    "clocks.mem",
    "power.limit",
    "power.max_limit",
    "pci.bus_id",
)
"""``nvidia-smi --query-gpu`` fields, in the order they are asked for (MHz, W)."""
_NAMES = (
    "index",
    "name",
    "sm_clock_max_mhz",
    "memory_clock_max_mhz",
    "sm_clock_mhz",
    "memory_clock_mhz",
    "power_limit_w",
    "power_max_limit_w",
    "pci_bus_id",
)


def _number(text: str) -> float | int | str | None:
    text = text.strip()
    if text in ("", "[N/A]", "N/A", "[Not Supported]"):
        return None
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() else value


def parse_gpu_query(text: str) -> list[dict]:
    """The rows of ``nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits``."""
    gpus = []
    for line in text.strip().splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != len(_NAMES):
            continue
        gpus.append(
            {name: (part if name in ("name", "pci_bus_id") else _number(part)) for name, part in zip(_NAMES, parts)}
        )
    return gpus


def gpu_facts() -> dict:
    """``{"gpus": [...], "gpus_in_node": N}`` from the driver, or empty lists where there is
    no NVIDIA driver (``nvidia-smi`` absent or failing); never raises."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return {"gpus": [], "gpus_in_node": 0}
    try:
        done = subprocess.run(
            [tool, f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return {"gpus": [], "gpus_in_node": 0}
    gpus = parse_gpu_query(done.stdout) if done.returncode == 0 else []
    return {"gpus": gpus, "gpus_in_node": len(gpus)}
