"""The peer harness (benchmarks/peers.py) on the CPU: argument parsing, the input writers
round-tripping through our readers, the disk plan, what a peer prints, the merge step, and
(where the peers' repository has been fetched) the patches applying to it and building."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from benchmarks import _peers_build as pb
from benchmarks import _peers_check as pc
from benchmarks import peers
from benchmarks._peers_inputs import schedule_bytes, scheduled_as_text, scheduled_file
from spartan_py.report.peers_table import peers_table
from spartan_py.result_files import read_summary

MIRROR = Path(os.environ.get("SNICIT_GIT_DIR", "/work/.mirror/IDEA-CUHK+SNICIT/repo"))
needs_mirror = pytest.mark.skipif(not MIRROR.is_dir(), reason=f"the peers' repository is not at {MIRROR}")


def test_networks_parse_and_refuse_sizes_the_challenge_lacks():
    assert peers.parse_networks("1024x120,65536X1920") == [(1024, 120), (65536, 1920)]
    assert len(peers.parse_networks("all")) == 12
    with pytest.raises(SystemExit, match="2048x120 is not a challenge network"):
        peers.parse_networks("2048x120")
    with pytest.raises(SystemExit, match="not NEURONSxLAYERS"):
        peers.parse_networks("1024-120")


def test_run_arguments(tmp_path):
    args = peers.parse_args(["run", "--networks", "1024x120", "--peers", "snicit,bf", "--batch", "65536=30000"])
    assert args.peers == ["SNICIT", "BF"] and args.batch == {65536: 30000}
    assert args.ours == ["gpu-merged", "gpu", "auto"]
    with pytest.raises(SystemExit, match="unknown FOO"):
        peers.parse_args(["run", "--peers", "foo"])
    missing = peers.parse_args(["run", "--data", str(tmp_path / "none")])
    assert missing.data is None  # generated networks only
    assert peers.parse_args(["build", "--check"]).peers == ["SNICIT", "XY", "SNIG", "BF"]


def test_peer_inputs_round_trip_through_our_readers(tmp_path):
    import spartan_py as sp

    network = sp.generate_network(1024, 3, seed=0)
    inputs = sp.generate_inputs(40, 1024, seed=0)
    files = peers.write_peer_inputs(tmp_path, network, inputs)
    back = sp.load_network(files["weights"])
    assert back.layers == 3
    for mine, read in zip(network.weights, back.weights):
        assert (mine != read).nnz == 0
    rows = sp.load_inputs(files["input"], 1024, rows=40)
    assert (rows != inputs).nnz == 0
    size = (files["weights"] / "n1024-l1.tsv").stat().st_size
    assert abs(peers.tsv_bytes(1024, 1) - size) / size < 0.15  # the disk plan's estimate


def test_streamed_inputs_write_no_layer(tmp_path):
    import spartan_py as sp

    network = sp.generate_network(1024, 2, seed=0)
    files = peers.write_peer_inputs(tmp_path, network, sp.generate_inputs(5, 1024), last=0)
    assert not list(files["weights"].iterdir()) and files["input"].exists()


def test_disk_plan():
    modes = ["SNICIT", "XY", "SNIG", "BF"]
    assert peers.plan_disk(1024, 120, modes, 60 << 30, 40) == (modes, [], {})
    runnable, streamed, why = peers.plan_disk(65536, 1920, modes, 60 << 30, 40)
    assert runnable == streamed == ["SNICIT", "XY"]
    assert set(why) == {"SNIG", "BF"} and "do not fit" in why["BF"]
    assert peers.tsv_bytes(65536, 1920) > 64 << 30  # the issue's ~90 GB
    assert peers.plan_disk(65536, 1920, modes, 1 << 30, 40)[0] == []


def test_parse_what_a_peer_prints():
    text = "read input 3, 2.0\nSNICIT info: runtime 10.5ms avgpost 0.1ms\nSNICIT info: runtime 2.5ms avgpost 0.1ms\n"
    text += "categories written: 1812\nCHALLENGE FAILED\n"
    got = pb.parse_output("SNICIT", text)
    assert got == {
        "inference_seconds": pytest.approx(0.013),
        "differing_categories": None,
        "challenge_line": "FAILED",
        "categories_written": 1812,
    }
    bf = pb.parse_output("BF", "BF info: runtime 306.5 ms\n\nNumber of different categories: 0\nCHALLENGE PASSED\n")
    assert bf["inference_seconds"] == pytest.approx(0.3065) and bf["differing_categories"] == 0
    assert pb.parse_output("XY", "SNIG info: runtime 1 ms")["inference_seconds"] is None
    assert "read input" not in pb._quiet_tail(text)


def test_peer_entry_compares_categories(tmp_path):
    out = tmp_path / "cats.tsv"
    out.write_text("3\n1\n")
    run = pb.PeerRun("BF", 0, 1.0, 0.2, 0, "PASSED", 2, "")
    assert peers.peer_entry(run, np.array([1, 3]), out)["categories_equal"] is True
    assert peers.peer_entry(run, np.array([1, 2]), out)["categories_equal"] is False
    failed = peers.peer_entry(pb.PeerRun("BF", 1, 1.0, None, None, None, None, "boom"), None, tmp_path / "x")
    assert "boom" in failed["error"] and failed["categories"] is None


def test_merge_keeps_every_call(tmp_path):
    one = {"device": "H100", "commit": "a", "peers_commit": "p", "networks": {"1024x120": {"x": 1}}}
    two = {"device": "H100", "commit": "b", "peers_commit": "p", "networks": {"65536x1920": {"x": 2}}}
    paths = []
    for name, record in (("one.json", one), ("two.json", two)):
        paths.append(tmp_path / name)
        paths[-1].write_text(json.dumps(record))
    merged = pc.merge(tmp_path / "all.json", paths, command="python -m benchmarks.peers merge all.json a.json b.json")
    assert set(merged["networks"]) == {"1024x120", "65536x1920"}
    assert [c["commit"] for c in merged["calls"]] == ["a", "b"] and merged["device"] == "H100"
    assert merged["commit"] == "a, b" and merged["command"].endswith("merge all.json a.json b.json")
    assert len(merged["date"]) == 20  # no call names its date: the merge's, UTC
    assert json.loads((tmp_path / "all.json").read_text()) == merged


@needs_mirror
def test_prepare_and_patches_apply(tmp_path):
    src = tmp_path / "src"
    commit = pb.prepare(MIRROR, src)
    assert len(commit) == 40 and pb.peers_commit(src) == commit
    size = sum(p.stat().st_size for p in src.rglob("*") if p.is_file())
    assert size < 64 << 20  # what the GPU machine is sent
    tree = tmp_path / "tree"
    shutil.copytree(src, tree)
    pb.apply_patch(tree, pb.COMPAT_PATCH)
    pb.apply_patch(tree, pb.HARNESS_PATCH)
    assert "harness_write_categories" in (tree / "main" / "SDGC.cu").read_text()
    assert "for(int l = 0; l < 1920; ++l)" not in (tree / "src" / "SDGC" / "SNICIT" / "SNICIT.hpp").read_text()
    with pytest.raises(pb.PeerError, match="does not apply"):
        pb.apply_patch(tree, pb.HARNESS_PATCH)  # already applied


@pytest.mark.slow
@needs_mirror
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")
# about 9 minutes of nvcc on a 2-core machine: more than CI's slow suite can give, so asked for by name
@pytest.mark.skipif(not os.environ.get("SPARTAN_BUILD_PEERS"), reason="set SPARTAN_BUILD_PEERS=1 to build the peers")
def test_patched_peers_build_for_sm90(tmp_path):
    src = tmp_path / "src"
    pb.prepare(MIRROR, src)
    binary, seconds = pb.build(src, tmp_path / "harness", (pb.COMPAT_PATCH, pb.HARNESS_PATCH))
    assert binary.exists() and seconds > 0
    assert pb.build(src, tmp_path / "harness", (pb.COMPAT_PATCH, pb.HARNESS_PATCH))[1] == 0.0  # kept
    # scheduling needs no GPU: streamed in parallel chunks it gives the files one process gives
    import filecmp
    import types

    import spartan_py as sp
    from benchmarks._peers_networks import lane_ordered

    network, inputs = lane_ordered(sp.generate_network(1024, 8, seed=0)), sp.generate_inputs(1000, 1024)
    whole = peers.write_peer_inputs(tmp_path / "whole", network, inputs)
    (tmp_path / "whole" / "scheduled").mkdir()
    common = ["--input", str(whole["input"]), "--cache", str(tmp_path / "whole" / "scheduled"), "-b", "1000"]
    pb.run_all(
        [[str(binary), "-m", "SNICIT", "-l", "8", "--weights", str(whole["weights"]), *common, "--schedule-only"]],
        binary.parent,
        300,
    )
    streamed = peers.write_peer_inputs(tmp_path / "streamed", network, inputs, last=0)
    args = types.SimpleNamespace(schedule_chunk=3, schedule_workers=2, timeout_s=300)
    case = {"neurons": 1024, "layers": 8, "folder": tmp_path / "streamed", "network": network, "inputs": inputs}
    assert peers.schedule(binary, "SNICIT", {**case, "streamed": True, "files": streamed}, args)["ok"]
    assert not list(streamed["weights"].iterdir())  # each chunk's TSVs deleted once scheduled
    one, parts = (tmp_path / name / "scheduled" / "neuron1024" for name in ("whole", "streamed"))
    names = sorted(p.name for p in one.iterdir())
    assert len(names) == 16 and all(filecmp.cmp(one / n, parts / n, shallow=False) for n in names)
    assert all(name.endswith(".bin") for name in names)  # the binary cache, no half-written .part left
    text = scheduled_as_text(tmp_path / "whole" / "scheduled", 1024, 8, tmp_path / "text")
    assert (text / "neuron1024" / "n1024-weight-l7.tsv").read_text().splitlines()[0] == "0.0625"


def test_the_binary_cache_reads_back_as_the_original_text(tmp_path):
    """The unpatched build of --check reads the text its own writer makes (one value a line,
    the stream's %g): scheduled_as_text writes that from the patched peers' binary cache."""
    cache = tmp_path / "cache"
    (cache / "neuron1024").mkdir(parents=True)
    np.array([0.0625, 0.333333, -2.0, 1e-07], dtype=np.float32).tofile(scheduled_file(cache, 1024, "weight", 0))
    np.array([0, 17, 1023], dtype=np.int32).tofile(scheduled_file(cache, 1024, "row", 0))
    text = scheduled_as_text(cache, 1024, 1, tmp_path / "text") / "neuron1024"
    assert (text / "n1024-weight-l0.tsv").read_text() == "0.0625\n0.333333\n-2\n1e-07\n"
    assert (text / "n1024-row-l0.tsv").read_text() == "0\n17\n1023\n"
    assert schedule_bytes(65536, 1920) < 24e9  # the binary cache at the largest network


@pytest.mark.gpu
def test_ours_alone_on_the_generated_1024x120(tmp_path):
    args = peers.parse_args(["run", "--networks", "1024x120", "--peers", "", "--data", str(tmp_path / "none")])
    args.work, args.repeats = tmp_path / "work", 2
    entry = peers.run_network(1024, 120, args, {}, None)
    systems = entry["systems"]
    assert entry["network"] == "generated" and set(systems) == {"gpu-merged", "gpu", "auto"}
    # the rows kernel may differ from the merged one on rows float32 rounding can flip (the project's rule)
    assert all(s["categories_passed"] and s["inference_seconds"] > 0 for s in systems.values()), systems


def test_lane_ordered_network_is_the_same_network_renumbered():
    import spartan_py as sp
    from benchmarks._peers_networks import lane_ordered

    network = sp.generate_network(1024, 9, seed=0)
    renumbered = lane_ordered(network)
    inputs = sp.generate_inputs(1500, 1024, seed=0)
    mine, theirs = (sp.make_engine("cpu", n).run(inputs) for n in (network, renumbered))
    assert mine.live_rows.size > 0 and np.array_equal(mine.live_rows, theirs.live_rows)
    assert mine.live_rows_by_layer == theirs.live_rows_by_layer
    last = renumbered.weights[8].tocsc()  # a relabelled layer: outputs of one lane read the same inputs
    columns = [tuple(last.indices[last.indptr[c] : last.indptr[c + 1]]) for c in range(1024)]
    assert [c for c in range(1024) if columns[c] == columns[5]] == list(range(5, 1024, 64))


def test_the_docs_table_is_the_committed_result_and_marks_what_it_should():
    """docs/snippets/peers-table.md is the committed peers result rendered; a time from a log
    is starred, a failed category check says FAILED, a system that did not run is '-'."""
    root = Path(__file__).resolve().parents[1]
    result = read_summary(root / "benchmarks/results/peers-h100.json.gz")
    assert (root / "docs/snippets/peers-table.md").read_text() == "\n".join(peers_table(result)) + "\n", (
        "stale: run python -m benchmarks.peers table benchmarks/results/peers-h100.json.gz "
        "--out docs/snippets/peers-table.md"
    )
    made_up = {
        "networks": {
            "4096x120": {
                "network": "generated",
                "complete": False,
                "auto_command": {"wall_seconds": 12.34},
                "systems": {
                    "auto": {"inference_seconds": 0.004, "setup_seconds": 0.5, "categories_equal": True},
                    "SNICIT": {"inference_seconds": 0.030, "categories_equal": True, "from_log": "log"},
                    "BF-2019": {"inference_seconds": 0.8, "categories_equal": False, "categories_passed": False},
                },
            }
        }
    }
    row = peers_table(made_up)[2]
    assert (
        row
        == "| 4096x120 (generated, cut short) | - | - | 4 | 30* | - | - | 800 | 0.5 | 12.3 | 7.5x | FAILED: BF-2019 |"
    )


def test_a_cut_call_keeps_what_ran_and_the_resumed_one_runs_only_the_rest(tmp_path, monkeypatch):
    """run_network saves the entry after each system, so a call whose time runs out mid-network
    keeps what ran (``complete`` False); given those systems back (``kept``), it runs ours again
    (the reference) and only the peers that had not run."""
    import spartan_py as sp

    network, inputs = sp.generate_network(1024, 2, seed=0), sp.generate_inputs(50, 1024, seed=0)
    monkeypatch.setattr(peers, "load_case", lambda *_: ("generated", network, inputs, None))
    monkeypatch.setattr(peers.po, "time_ours", lambda *_: ({"inference_seconds": 0.001}, np.array([1, 3, 7])))
    monkeypatch.setattr(peers.pc, "category_verdict", lambda *_: {"categories_equal": True, "categories_passed": True})
    monkeypatch.setattr(peers.pb, "free_bytes", lambda _: 1 << 40)
    monkeypatch.setattr(peers.po, "time_command", lambda *_: {"wall_seconds": 1.0})
    ran: list[str] = []

    def run_peer(binary, mode, neurons, layers, extra, timeout_s, cut=("BF",)):
        ran.append(mode)
        if mode in cut:
            raise TimeoutError("the call's time ran out")
        Path(extra[extra.index("--categories-out") + 1]).write_text("1\n3\n7\n")
        return pb.PeerRun(mode, 0, 1.0, 0.01, 0, "PASSED", 3, "")

    monkeypatch.setattr(peers.pb, "run_peer", run_peer)
    args = peers.parse_args(["run", "--networks", "1024x480", "--peers", "snig,bf", "--data", str(tmp_path / "none")])
    args.work, args.peer_repeats = tmp_path / "work", 1
    binaries = {"SNIG": tmp_path / "snig", "BF": tmp_path / "bf"}
    saved: list[dict] = []
    with pytest.raises(TimeoutError):
        peers.run_network(1024, 480, args, binaries, None, save=lambda e: saved.append(json.loads(json.dumps(e))))
    cut = saved[-1]
    assert cut["complete"] is False and list(cut["systems"]) == ["gpu-merged", "gpu", "auto", "SNIG-2020"]
    ran.clear()
    monkeypatch.setattr(peers.pb, "run_peer", lambda *a: run_peer(*a, cut=()))
    entry = peers.run_network(1024, 480, args, binaries, None, kept=cut["systems"])
    assert ran == ["BF"] and entry["complete"] is True
    assert entry["systems"]["SNIG-2020"] == cut["systems"]["SNIG-2020"]
    assert entry["systems"]["BF-2019"]["inference_seconds"] == pytest.approx(0.01)


def test_the_whole_command_is_the_one_a_user_runs_and_its_failure_is_said():
    """``auto``'s whole command: ``spartan infer`` on the same generated network and rows, timed
    as a process, with what it reported; a command that fails says how."""
    from benchmarks import _peers_ours as po

    command = po.infer_command(1024, 3, None, False, 200)
    assert command[command.index("--network") + 1] == "generated:1024:0" and "--json" in command
    done = po.time_command(command, 120)
    assert done["wall_seconds"] > 0 and done["categories"] > 0 and done["command"].startswith("python -m spartan_py")
    failed = po.time_command([*command[:-2], "--backend", "no-such-backend"], 120)
    assert "exit 2" in failed["error"]


def test_the_unpatched_check_skips_a_scheduling_peer_whose_cache_is_not_whole(tmp_path):
    """A scheduling cut short leaves layers missing: --check says so for XY and SNICIT instead
    of failing the call (it used to give the unpatched build a half cache)."""
    cache = tmp_path / "case" / "scheduled"
    (cache / "neuron1024").mkdir(parents=True)
    for layer in (0, 1):  # of 3
        for what, dtype in (("weight", np.float32), ("row", np.int32)):
            np.zeros(4, dtype=dtype).tofile(scheduled_file(cache, 1024, what, layer))
    files = {"weights": tmp_path / "weights", "input": tmp_path / "in.tsv"}
    case = {"neurons": 1024, "layers": 3, "files": files, "golden": tmp_path / "g.tsv", "folder": tmp_path / "case"}
    binary = tmp_path / "tree" / "bin" / "SDGC"
    report = pc.unpatched_check(binary, case, {}, ["SNICIT", "XY"], 1.0)
    assert set(report) == {"SNICIT", "XY-2021"} and all("did not finish" in r["error"] for r in report.values())
    assert not (tmp_path / "case" / "scheduled-text").exists()
