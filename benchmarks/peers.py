"""Graph Challenge against its published peers on one GPU: SNICIT, XY-2021, SNIG-2020 and
BF-2019 (public repository IDEA-CUHK/SNICIT, ``src/SDGC/``) beside our ``gpu-merged``,
``gpu`` and ``auto`` on the same networks and the same 60000 input rows.

    python -m benchmarks.peers prepare --git-dir PATH/TO/SNICIT.git        # -> .peers/src
    python -m benchmarks.peers run --networks 1024x120,1024x480 [--data .peers/data] [--check]
    python -m benchmarks.peers merge OUT.json IN1.json IN2.json ...
    python -m benchmarks.peers table benchmarks/results/peers-h100.json.gz --out docs/snippets/peers-table.md

``run`` builds the peers with ``nvcc`` (``benchmarks/peer_patches``; ``_peers_build``), writes
their inputs with our code (layer TSVs, input TSV, our categories as their golden file) under
``--work``, runs ours (CUDA events, median of ``--repeats`` after warm-up; set-up apart) and
each peer (the inference time it prints, as its paper reports it; the process's wall time
and, for XY and SNICIT, the scheduling of their weights apart), compares categories, and
rewrites one result file after each system, so a call cut short keeps what ran (``--resume``
skips the networks it holds whole and, of one cut short, runs ours again and the peers that did not run).
1024 x 120 is the official network with the 60000-row proxy input (``--data``: a folder with
``neuron1024/``, ``sparse-images-1024-proxy60k.tsv.gz`` and its truth); the others are
generated (``generated:N``, seed 0; ``generated:60000`` inputs), as in
``experiments/graph-challenge-all.yaml``; the peers read them with the hidden neurons
renumbered as the official files number them (``_peers_networks``: same categories).
``--check`` also runs the unpatched build (the compat patch only) on the original file layout
and compares what both print.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

import numpy as np

from benchmarks import _peers_build as pb
from benchmarks import _peers_check as pc
from benchmarks import _peers_networks as pn
from benchmarks import _peers_ours as po
from benchmarks._peers_inputs import plan_disk, schedule, tsv_bytes, write_peer_inputs
from benchmarks.harness import ROOT, commit
from spartan_py.files import atomic_write_text
from spartan_py.report.peers_table import peers_table
from spartan_py.result_files import read_summary

DEFAULT_NETWORKS = "1024x120,1024x480,1024x1920"
ALL_NETWORKS = ",".join(f"{n}x{layers}" for n in (1024, 4096, 16384, 65536) for layers in (120, 480, 1920))
OURS = ("gpu-merged", "gpu", "auto")
ROWS = 60000


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_networks(text: str) -> list[tuple[int, int]]:
    """``NxL,NxL,...`` (or ``all``) into (neurons, layers) pairs; sizes the challenge has only."""
    if text == "all":
        text = ALL_NETWORKS
    pairs = []
    for item in text.split(","):
        try:
            neurons, layers = (int(v) for v in item.lower().split("x"))
        except ValueError:
            raise SystemExit(f"--networks: {item!r} is not NEURONSxLAYERS (e.g. 1024x120)") from None
        if neurons not in (1024, 4096, 16384, 65536) or layers not in (120, 480, 1920):
            raise SystemExit(f"--networks: {item} is not a challenge network (1024-65536 x 120/480/1920)")
        pairs.append((neurons, layers))
    return pairs


def is_official(neurons: int, layers: int, data: Path | None) -> bool:
    """1024 x 120 from the official files when ``data`` has them."""
    return neurons == 1024 and layers == 120 and data is not None and (data / "neuron1024").is_dir()


def load_case(neurons: int, layers: int, data: Path | None):
    """(family, network, inputs, truth or None) of one network."""
    import spartan_py as sp

    if is_official(neurons, layers, data):
        assert data is not None
        network = sp.load_network(data / "neuron1024", layers=layers)
        inputs = sp.load_inputs(data / "sparse-images-1024-proxy60k.tsv.gz", 1024, rows=ROWS)
        truth_path = data / "neuron1024-l120-categories-proxy60k.tsv"
        return "official", network, inputs, sp.read_truth(truth_path) if truth_path.exists() else None
    return "generated", sp.generate_network(neurons, layers, seed=0), sp.generate_inputs(ROWS, neurons, seed=0), None


def read_categories(path: Path) -> np.ndarray | None:
    """A categories file as a sorted int64 array, or None when absent."""
    if not path.exists():
        return None
    text = path.read_text().split()
    return np.sort(np.array([int(v) for v in text], dtype=np.int64))


def peer_entry(run: pb.PeerRun, mine: np.ndarray | None, written: Path | None, network=None, inputs=None) -> dict:
    """A peer's result: times, what it printed and whether its categories equal ours (with
    ``network`` and ``inputs``, differing rows judged by the project's rule)."""
    entry = asdict(run)
    found = read_categories(written) if written is not None else None
    entry["categories"] = None if found is None else int(found.size)
    entry["categories_equal"] = None if found is None or mine is None else bool(np.array_equal(found, mine))
    if found is not None and mine is not None and network is not None and inputs is not None:
        entry |= pc.category_verdict(network, inputs, found, mine)
    if run.returncode != 0 or run.inference_seconds is None:
        entry["error"] = f"exit {run.returncode}, no runtime printed: {run.tail[-500:]}"
    return entry


def run_network(
    neurons: int,
    layers: int,
    args,
    binaries: dict,
    check_binary: Path | None,
    save: Callable[[dict], None] = lambda entry: None,
    kept: dict | None = None,
) -> dict:
    """Every system on one network; the network's entry of the result file. ``save(entry)`` is
    called after each system with the entry so far (``complete`` False until the end), so a call
    cut short keeps what ran; ``kept``: such an entry's systems, whose peers that ran are kept
    rather than run again (ours run again: the peers' categories are compared with theirs)."""
    key = f"{neurons}x{layers}"
    started = time.perf_counter()
    family, network, inputs, truth = load_case(neurons, layers, args.data)
    entry: dict = {"network": family, "neurons": neurons, "layers": layers, "rows": int(inputs.shape[0])}
    entry["load_seconds"] = time.perf_counter() - started
    systems: dict = {}
    entry |= {"systems": systems, "complete": False}
    reference = None
    for name in args.ours:
        systems[name], categories = po.time_ours(name, network, inputs, args.repeats)
        if categories is not None:
            if reference is None:
                reference, entry["reference"] = categories, name
            systems[name] |= pc.category_verdict(network, inputs, categories, reference)
            if truth is not None:
                systems[name]["passed_truth"] = bool(np.array_equal(categories, truth))
        log(f"{key} {name}: {systems[name]}")
        save(entry)
    if reference is None and truth is not None:
        reference, entry["reference"] = truth, "truth"
    if "auto" in args.ours:
        official = family == "official"
        command = po.infer_command(neurons, layers, args.data, official, int(inputs.shape[0]))
        entry["auto_command"] = po.time_command(command, args.timeout_s)
        log(f"{key} spartan infer: {entry['auto_command']}")
        save(entry)
    folder = args.work / f"{family}-{neurons}"
    # XY and SNICIT need the official numbering: the peers get the same network renumbered
    peer_network = network if family == "official" else pn.lane_ordered(network)
    free = pb.free_bytes(args.work)
    entry["disk"] = {"tsv_bytes": tsv_bytes(neurons, layers), "free_bytes": free}
    available = [m for m in args.peers if binaries.get(m)]
    if args.force:
        peers, streamed, why = available, [], {}  # type: list[str], list[str], dict[str, str]
    else:
        peers, streamed, why = plan_disk(neurons, layers, available, free, args.schedule_chunk)
    systems.update({pb.PEERS[m]: {"error": f"not run: {w}"} for m, w in why.items()})
    kept = kept or {}
    done = [m for m in peers if pb.PEERS[m] in kept and "error" not in kept[pb.PEERS[m]]]
    systems.update({pb.PEERS[m]: kept[pb.PEERS[m]] for m in done})
    peers = [m for m in peers if m not in done]
    if peers:
        files = write_peer_inputs(folder, peer_network, inputs, last=0 if streamed else None)
        golden = folder / f"ours-l{layers}-categories.tsv"
        if reference is not None:
            from spartan_py.graph_challenge import write_truth

            write_truth(golden, reference)
        entry["peer_inputs_seconds"] = time.perf_counter() - started - entry["load_seconds"]
        entry["tsv_streamed"] = bool(streamed)
    case = {"neurons": neurons, "layers": layers, "folder": folder, "network": peer_network, "inputs": inputs}
    case["streamed"] = bool(streamed)
    for mode in peers:
        extra = ["--weights", str(files["weights"]), "--input", str(files["input"]), "--golden", str(golden)]
        extra += ["--rows", str(ROWS), "--cache", str(folder / "scheduled")]
        if mode in pb.SCHEDULING:
            extra += ["-t", str(args.threshold), "-b", str(args.batch.get(neurons, ROWS))]
            setup = schedule(binaries[mode], mode, {**case, "files": files}, args)
            if not setup.get("cached") and not setup.get("ok"):
                systems[pb.PEERS[mode]] = {"error": "scheduling failed", "schedule": setup}
                continue
        runs = []
        for _ in range(args.peer_repeats):
            out = folder / f"{mode}-l{layers}-categories.tsv"
            out.unlink(missing_ok=True)
            run = pb.run_peer(
                binaries[mode], mode, neurons, layers, [*extra, "--categories-out", str(out)], args.timeout_s
            )
            runs.append(peer_entry(run, reference, out, network, inputs))
            if "error" in runs[-1]:
                break
        good = [r["inference_seconds"] for r in runs if "error" not in r]
        result = {"runs": runs, "inference_seconds": statistics.median(good) if good else None}
        result["categories_equal"] = all(r["categories_equal"] for r in runs) if good else None
        result["categories_passed"] = (
            all(r.get("categories_passed", r["categories_equal"]) for r in runs) if good else None
        )
        result["wall_seconds"] = statistics.median(r["wall_seconds"] for r in runs)
        if mode in pb.SCHEDULING:
            result["schedule"] = setup
        if not good:
            result["error"] = runs[-1].get("error")
        systems[pb.PEERS[mode]] = result
        log(f"{key} {pb.PEERS[mode]}: {result['inference_seconds']} s, equal {result['categories_equal']}")
        save(entry)
    if check_binary is not None and peers and family == "official":
        case.update(files=files, golden=golden)
        entry["unpatched_check"] = pc.unpatched_check(check_binary, case, systems, peers, args.timeout_s)
        log(f"{key} unpatched check: {entry['unpatched_check']}")
    entry["seconds"] = time.perf_counter() - started
    entry["complete"] = True
    return entry


def build_all(args) -> tuple[dict, Path | None, dict]:
    """Build the patched peers and, for ``--check``, the unpatched one (both at once: each is
    one long single-threaded nvcc): the binaries by mode, the unpatched binary, and what the
    builds took or why they failed."""
    info: dict = {"nvcc": pc.nvcc_version(), "arch": args.arch}
    work = args.work / "build"
    wanted = {"harness": (pb.COMPAT_PATCH, pb.HARNESS_PATCH), **({"compat": (pb.COMPAT_PATCH,)} if args.check else {})}
    with ThreadPoolExecutor(max_workers=len(wanted)) as pool:
        futures = {
            k: pool.submit(pb.build, args.peers_src, work / k, patches, args.arch) for k, patches in wanted.items()
        }
    built = {}
    for name, future in futures.items():
        try:
            built[name], info[f"{name}_build_seconds"] = future.result()
        except pb.PeerError as exc:
            info[f"{name}_error"] = str(exc)
    binaries = {mode: built["harness"] for mode in args.peers} if "harness" in built else {}
    return binaries, built.get("compat"), info


def _command_line(argv: list[str] | None) -> str:
    """The command as run from the repository root (``argv``: None for this process's)."""
    return shlex.join(["python", "-m", "benchmarks.peers", *(sys.argv[1:] if argv is None else argv)])


def run(args) -> int:
    """The ``run`` subcommand."""
    import cupy as cp

    args.work.mkdir(parents=True, exist_ok=True)
    previous = json.loads(args.resume.read_text()) if args.resume and args.resume.exists() else {}
    networks = dict(previous.get("networks", {}))
    binaries, check_binary, build_info = build_all(args) if args.peers else ({}, None, {})
    payload = {
        "workload": f"Graph Challenge, {ROWS} rows; 1024x120 official (proxy input), the rest generated (seed 0)",
        "device_info": pc.device_info(),
        "peers_commit": pb.peers_commit(args.peers_src),
        "patch_sha256": {p.name: pb.patch_sha256(p) for p in (pb.COMPAT_PATCH, pb.HARNESS_PATCH)},
        "build": build_info,
        "timing": {
            "ours": f"CUDA events, median of {args.repeats} after 2 warm-ups; set-up: engine made, inputs uploaded",
            "peers": "the runtime each peer prints (its paper's inference time); wall = the whole process; "
            "XY/SNICIT weight scheduling apart",
        },
        "networks": networks,
    }
    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    out = args.resume or args.out / f"peers-{time.strftime('%Y%m%d-%H%M%S')}.json"

    def write(key: str, entry: dict) -> None:
        networks[key] = entry
        record = {
            "benchmark": "peers",
            "device": device,
            "commit": commit(),
            "date": pc.utc_now(),
            "command": _command_line(None),
            **payload,
        }
        atomic_write_text(out, json.dumps(record, indent=2) + "\n")

    for neurons, layers in parse_networks(args.networks):
        key = f"{neurons}x{layers}"
        before = networks.get(key)
        if before is not None and before.get("complete", True):  # files before 2026-12-07 hold whole networks
            log(f"{key}: already in {out}, skipped")
            continue
        kept = before["systems"] if before is not None else None
        write(key, run_network(neurons, layers, args, binaries, check_binary, lambda e, k=key: write(k, e), kept))
        log(f"{key}: written to {out}")
    return 0


def parser() -> argparse.ArgumentParser:
    """The command line: prepare, run, merge."""
    main = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = main.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="extract what builds the peers into --dest")
    prep.add_argument("--git-dir", type=Path, required=True, help="the peers' repository (bare is fine)")
    prep.add_argument("--commit", default="HEAD")
    prep.add_argument("--dest", type=Path, default=ROOT / ".peers" / "src")
    go = sub.add_parser("run", help="build, write inputs, run ours and the peers")
    only = sub.add_parser("build", help="only build the peers (kept for later calls on the same machine)")
    go.add_argument("--networks", default=DEFAULT_NETWORKS, help="NEURONSxLAYERS,... or 'all'")
    go.add_argument("--data", type=Path, default=ROOT / ".peers" / "data", help="the official 1024 files")
    go.add_argument("--peers-src", type=Path, default=ROOT / ".peers" / "src")
    go.add_argument("--work", type=Path, default=ROOT / ".peers" / "work")
    go.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    go.add_argument(
        "--resume", type=Path, help="a result file to add to (whole networks skipped; one cut short goes on)"
    )
    go.add_argument("--peers", default="SNICIT,XY,SNIG,BF", help="modes, comma-separated ('' for none)")
    go.add_argument("--ours", default=",".join(OURS))
    go.add_argument("--repeats", type=int, default=5)
    go.add_argument("--peer-repeats", type=int, default=1)
    go.add_argument("--threshold", type=int, default=30, help="SNICIT's threshold layer (its default)")
    go.add_argument("--batch", default="", help="XY/SNICIT batch by width, e.g. 65536=30000")
    go.add_argument("--timeout-s", type=float, default=480.0, help="a peer run past this is killed")
    go.add_argument("--schedule-chunk", type=int, default=40, help="layers one scheduling process takes")
    go.add_argument("--schedule-workers", type=int, default=12, help="scheduling processes at once")
    go.add_argument("--arch", default="sm_90")
    go.add_argument("--check", action="store_true", help="also run the unpatched build (official 1024 x 120)")
    go.add_argument("--force", action="store_true", help="run the peers even where the disk looks too small")
    for name, kind, default in (("--peers-src", Path, ".peers/src"), ("--work", Path, ".peers/work")):
        only.add_argument(name, type=kind, default=ROOT / default)
    only.add_argument("--arch", default="sm_90")
    only.add_argument("--check", action="store_true", help="also the unpatched build")
    only.add_argument("--peers", default="SNICIT,XY,SNIG,BF")
    mer = sub.add_parser("merge", help="merge result files")
    mer.add_argument("out", type=Path)
    mer.add_argument("inputs", type=Path, nargs="+")
    tab = sub.add_parser("table", help="a merged result file as the docs' Markdown table")
    tab.add_argument("result", type=Path)
    tab.add_argument("--out", type=Path, help="write the table here (default: print it)")
    return main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and normalize the command line."""
    args = parser().parse_args(argv)
    if args.command in ("run", "build"):
        args.peers = [m.strip().upper() for m in args.peers.split(",") if m.strip()]
        unknown = [m for m in args.peers if m not in pb.PEERS]
        if unknown:
            raise SystemExit(f"--peers: unknown {', '.join(unknown)}; choose from {', '.join(pb.PEERS)}")
    if args.command == "run":
        args.ours = [n for n in args.ours.split(",") if n]
        args.batch = {int(k): int(v) for k, v in (p.split("=") for p in args.batch.split(",") if p)}
        if not args.data.is_dir():
            args.data = None
        parse_networks(args.networks)
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = parse_args(argv)
    if args.command == "prepare":
        full = pb.prepare(args.git_dir, args.dest, args.commit)
        log(f"peers at {full[:12]} in {args.dest}")
        return 0
    if args.command == "merge":
        merged = pc.merge(args.out, args.inputs, command=_command_line(argv))
        log(f"{len(merged['networks'])} networks in {args.out}")
        return 0
    if args.command == "table":
        text = "\n".join(peers_table(read_summary(args.result))) + "\n"
        if args.out is None:
            sys.stdout.write(text)
        else:
            atomic_write_text(args.out, text)
        return 0
    if args.command == "build":
        _, _, info = build_all(args)
        log(json.dumps(info))
        return 1 if any(k.endswith("_error") for k in info) else 0
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
