"""The peer harness's checks and bookkeeping (``benchmarks/peers.py``): the unpatched build
run on the peers' own file layout beside the patched one, the device and its clocks, merging
several calls' result files into one."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np

from benchmarks import _peers_build as pb
from spartan_py.files import atomic_write_text
from spartan_py.graph_challenge.check import compare_categories


def unpatched_check(binary: Path, case: dict, systems: dict, modes: list[str], timeout_s: float) -> dict:
    """Run the unpatched build on its own layout (``../dataset/SDGC/...`` beside its ``bin``,
    linked to the files written here; ``../scheduled_bm`` the patched peers' binary cache as
    text, :func:`~benchmarks._peers_inputs.scheduled_as_text`) and compare what it prints with
    the patched run: the inference-time line, the differing-categories count (BF, SNIG: against
    our categories as golden), the CHALLENGE line (XY, SNICIT: their own category count)."""
    from benchmarks._peers_inputs import scheduled, scheduled_as_text

    neurons, layers, files, golden = case["neurons"], case["layers"], case["files"], case["golden"]
    tree = binary.parent.parent
    mnist = tree / "dataset" / "SDGC" / "MNIST"
    weights = tree / "dataset" / "SDGC" / "tsv_weights" / f"neuron{neurons}"
    mnist.mkdir(parents=True, exist_ok=True)
    weights.parent.mkdir(parents=True, exist_ok=True)
    links = {
        weights: files["weights"],
        mnist / f"sparse-images-{neurons}.tsv": files["input"],
        mnist / f"neuron{neurons}-l{layers}-categories.tsv": golden,
    }
    report: dict = {}
    text = case["folder"] / "scheduled-text"
    cache = case["folder"] / "scheduled"
    if set(modes) & set(pb.SCHEDULING):
        if all(scheduled(cache, neurons, layer) for layer in range(layers)):
            shutil.rmtree(text, ignore_errors=True)
            links[tree / "scheduled_bm"] = scheduled_as_text(cache, neurons, layers, text)
        else:
            why = (
                "not checked: the patched peers' scheduling did not finish, so there is no cache to give the unpatched"
            )
            report |= {pb.PEERS[m]: {"error": why} for m in modes if m in pb.SCHEDULING}
            modes = [m for m in modes if m not in pb.SCHEDULING]
    for link, target in links.items():
        if link.is_symlink() or link.exists():
            link.unlink() if link.is_symlink() or link.is_file() else shutil.rmtree(link)
        link.symlink_to(Path(target).resolve())
    for mode in modes:
        run = pb.run_peer(binary, mode, neurons, layers, [], timeout_s)
        patched = systems.get(pb.PEERS[mode], {}).get("runs", [{}])[0]
        same = {k: getattr(run, k) == patched.get(k) for k in ("differing_categories", "challenge_line")}
        report[pb.PEERS[mode]] = {
            "unpatched_inference_seconds": run.inference_seconds,
            "patched_inference_seconds": patched.get("inference_seconds"),
            "unpatched_differing_categories": run.differing_categories,
            "unpatched_challenge_line": run.challenge_line,
            "same_output": all(same.values()) and run.returncode == 0,
            **({"tail": run.tail} if run.returncode else {}),
        }
    shutil.rmtree(text, ignore_errors=True)  # the text copy is the check's alone (34 GB at 65536 x 1920)
    return report


def device_info() -> dict:
    """The GPU and its clocks as ``nvidia-smi`` reports them (empty where it is absent)."""
    fields = "name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.limit,memory.total"
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True, text=True, check=True
        ).stdout.splitlines()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return {}
    return dict(zip(fields.split(","), (v.strip() for v in out.split(","))))


def nvcc_version() -> str | None:
    """The last line of ``nvcc --version`` (its release), or None."""
    try:
        return subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    except (OSError, IndexError):
        return None


def utc_now() -> str:
    """The time now, UTC, as the peers' result files give their dates (``2026-12-07T11:26:31Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def merge(out: Path, inputs: list[Path], command: str) -> dict:
    """Merge several ``run`` files into one: networks side by side (a network in two files:
    the later file's), each call's provenance kept (its commit, date and command where it names
    them), the merged file's date the latest call's (today where none names one), its commit the
    calls' and ``command`` the merge's; written atomically."""
    records = [json.loads(p.read_text()) for p in inputs]
    if not records:
        raise SystemExit("merge: no input files")
    devices = {r.get("device") for r in records}
    dates = sorted(str(r["date"]) for r in records if r.get("date"))
    commits = list(dict.fromkeys(str(r.get("commit")) for r in records))
    merged: dict = {
        "benchmark": "peers",
        "device": records[0].get("device") if len(devices) == 1 else sorted(map(str, devices)),
        "date": dates[-1] if dates else utc_now(),
        "commit": ", ".join(commits),
        "command": command,
        "calls": [
            {k: r.get(k) for k in ("commit", "date", "command", "peers_commit", "patch_sha256", "device_info", "build")}
            | {"file": p.name, "networks": sorted(r.get("networks", {}))}
            for p, r in zip(inputs, records, strict=True)
        ],
        "networks": {},
    }
    for record in records:
        merged["networks"].update(record.get("networks", {}))
    atomic_write_text(out, json.dumps(merged, indent=2) + "\n")
    return merged


def category_verdict(network, inputs, found: np.ndarray, reference: np.ndarray) -> dict:
    """``categories_equal`` (identical) and ``categories_passed`` (identical, or only rows
    that float32 rounding can flip differ: the project's rule, spartan_py.graph_challenge.check),
    with the check's one-line account."""
    check = compare_categories(network, inputs, found, reference)
    return {"categories_equal": check.equal, "categories_passed": check.passed, "categories_check": check.describe()}
