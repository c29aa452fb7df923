"""The published peers of the Graph Challenge (SNICIT, XY-2021, SNIG-2020, BF-2019, all in the
public repository IDEA-CUHK/SNICIT, ``src/SDGC/``): extract the files that build them, patch,
build with ``nvcc``, run one, read what it printed. Used by ``benchmarks/peers.py``.

Two patches live in ``benchmarks/peer_patches/``: ``compat.patch`` only lets the code build
with CUDA 13 (thrust include, taskflow's graph calls, ``cudaMemPrefetchAsync``'s location
argument; guarded by ``CUDART_VERSION``, a no-op on CUDA 12), ``harness.patch`` reads paths
from the command line, schedules only the layers asked for into a cache folder given there,
and writes the categories the peer found. The *unpatched* build is the compat-only one.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATCHES = ROOT / "benchmarks" / "peer_patches"
COMPAT_PATCH = PATCHES / "compat.patch"
HARNESS_PATCH = PATCHES / "harness.patch"
#: What builds ``SDGC`` (the peers' Graph Challenge program), and nothing else (about 8 MB).
SOURCE_PATHS = (
    "main/SDGC.cu",
    "src/SDGC",
    "3rd-party/CLI11",
    "3rd-party/Eigen",
    "3rd-party/taskflow",
    "3rd-party/cuda_error.hpp",
)
COMMIT_FILE = "PEERS_COMMIT"
#: The peers by their ``-m`` mode, with the name their papers use.
PEERS = {"SNICIT": "SNICIT", "XY": "XY-2021", "SNIG": "SNIG-2020", "BF": "BF-2019"}
#: Modes that schedule their weights into a cache folder the first time (their set-up).
SCHEDULING = ("XY", "SNICIT")


class PeerError(RuntimeError):
    """A peer could not be prepared, built or run; the message says why."""


def prepare(git_dir: Path, dest: Path, commit: str = "HEAD") -> str:
    """Extract :data:`SOURCE_PATHS` of ``commit`` of the peers' repository (a git directory,
    bare or not) into ``dest`` (replaced); returns the full commit hash, also written to
    ``dest/PEERS_COMMIT``."""
    full = _git(git_dir, "rev-parse", f"{commit}^{{commit}}").strip()
    archive = subprocess.run(
        ["git", f"--git-dir={git_dir}", "archive", "--format=tar", full, *SOURCE_PATHS],
        capture_output=True,
        check=False,
    )
    if not archive.stdout:
        raise PeerError(f"git archive of {git_dir} gave nothing: {archive.stderr.decode(errors='replace')[-400:]}")
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    missing = [p for p in SOURCE_PATHS if not (dest / p).exists()]
    if missing:
        raise PeerError(f"{git_dir} at {full[:12]} lacks {', '.join(missing)}")
    (dest / COMMIT_FILE).write_text(full + "\n")
    return full


def _git(git_dir: Path, *args: str) -> str:
    done = subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, text=True, check=False)
    if done.returncode:
        raise PeerError(f"git {' '.join(args)} in {git_dir}: {done.stderr.strip()}")
    return done.stdout


def peers_commit(source: Path) -> str:
    """The peers' commit a prepared ``source`` came from (``unknown`` without the file)."""
    path = source / COMMIT_FILE
    return path.read_text().strip() if path.exists() else "unknown"


def patch_sha256(*patches: Path) -> str:
    """One hash over the patches' bytes, in order."""
    digest = hashlib.sha256()
    for patch in patches:
        digest.update(patch.read_bytes())
    return digest.hexdigest()


def apply_patch(tree: Path, patch: Path, *, check_only: bool = False) -> None:
    """Apply ``patch`` (``diff -ruN a b`` form, one leading path part) to ``tree`` with
    ``git apply`` (works outside a repository), falling back to ``patch -p1``."""
    git = ["git", "apply", "-p1", "--whitespace=nowarn", *(["--check"] if check_only else []), str(patch)]
    plain = ["patch", "-p1", "--forward", "--quiet", *(["--dry-run"] if check_only else []), "-i", str(patch)]
    errors = []
    for command in (git, plain):
        if shutil.which(command[0]) is None:
            continue
        done = subprocess.run(command, cwd=tree, capture_output=True, text=True, check=False)
        if done.returncode == 0:
            return
        errors.append(f"{command[0]}: {(done.stderr or done.stdout).strip()[-400:]}")
    raise PeerError(f"{patch.name} does not apply to {tree}: {'; '.join(errors) or 'neither git nor patch found'}")


def nvcc_command(tree: Path, arch: str) -> list[str]:
    """The peers' own build line (``bin/compile.sh``) for one GPU architecture."""
    return [
        "nvcc",
        "-std=c++17",
        "--extended-lambda",
        f"-arch={arch}",
        "-O3",
        str(tree / "main" / "SDGC.cu"),
        "-I",
        str(tree / "3rd-party"),
        "-I",
        str(tree / "src" / "SDGC"),
        "-o",
        str(tree / "bin" / "SDGC"),
        "-lstdc++fs",
    ]


def build(source: Path, tree: Path, patches: tuple[Path, ...], arch: str = "sm_90") -> tuple[Path, float]:
    """Copy ``source`` to ``tree``, apply ``patches`` and build ``tree/bin/SDGC``; a build of
    the same patches already there is kept. Returns (binary, seconds spent building)."""
    stamp = tree / "bin" / "BUILT_WITH"
    want = f"{peers_commit(source)} {patch_sha256(*patches)} {arch}\n"
    binary = tree / "bin" / "SDGC"
    if binary.exists() and stamp.exists() and stamp.read_text() == want:
        return binary, 0.0
    if tree.exists():
        shutil.rmtree(tree)
    shutil.copytree(source, tree)
    for patch in patches:
        apply_patch(tree, patch)
    (tree / "bin").mkdir(exist_ok=True)
    started = time.perf_counter()
    done = subprocess.run(nvcc_command(tree, arch), capture_output=True, text=True, check=False)
    if done.returncode:
        errors = [line for line in done.stderr.splitlines() if "error" in line]
        raise PeerError(f"nvcc failed building {tree}: {' | '.join(errors[:6]) or done.stderr[-600:]}")
    stamp.write_text(want)
    return binary, time.perf_counter() - started


@dataclass
class PeerRun:
    """What one run of a peer printed and took."""

    mode: str
    returncode: int
    wall_seconds: float
    inference_seconds: float | None
    differing_categories: int | None
    challenge_line: str | None
    categories_written: int | None
    tail: str


_RUNTIME = re.compile(r"(\w+) info: runtime ([0-9.eE+-]+) ?ms")
_DIFFERENT = re.compile(r"Number of different categories: (\d+)")
_CHALLENGE = re.compile(r"CHALLENGE (PASSED|FAILED)")
_WRITTEN = re.compile(r"categories written: (\d+)")


def parse_output(mode: str, text: str) -> dict:
    """The inference milliseconds a peer printed (``<MODE> info: runtime X ms``; one line per
    batch, summed), its count of categories differing from the golden file (BF, SNIG), its
    ``CHALLENGE PASSED/FAILED`` line and how many categories the patched build wrote."""
    times = [float(m.group(2)) for m in _RUNTIME.finditer(text) if m.group(1) == mode]
    different = _DIFFERENT.findall(text)
    challenge = _CHALLENGE.findall(text)
    written = _WRITTEN.findall(text)
    return {
        "inference_seconds": sum(times) / 1e3 if times else None,
        "differing_categories": int(different[-1]) if different else None,
        "challenge_line": challenge[-1] if challenge else None,
        "categories_written": int(written[-1]) if written else None,
    }


def run_peer(binary: Path, mode: str, neurons: int, layers: int, extra: list[str], timeout_s: float) -> PeerRun:
    """Run ``binary -m MODE -n N -l L EXTRA`` in its ``bin`` folder (its default paths are
    relative to it); a run past ``timeout_s`` is killed and reported as such."""
    command = [str(binary), "-m", mode, "-n", str(neurons), "-l", str(layers), *extra]
    started = time.perf_counter()
    try:
        done = subprocess.run(
            command, cwd=binary.parent, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        text, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        text, code = out + f"\n[killed after {timeout_s:.0f} s]", -9
    wall = time.perf_counter() - started
    parsed = parse_output(mode, text)
    return PeerRun(mode=mode, returncode=code, wall_seconds=wall, tail=_quiet_tail(text), **parsed)


def run_all(commands: list[list[str]], cwd: Path, timeout_s: float) -> list[int]:
    """Run ``commands`` at once (their output dropped), wait up to ``timeout_s`` in all, kill
    those still running then; their exit codes (-9 where killed)."""
    started = time.perf_counter()
    procs = [subprocess.Popen(c, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for c in commands]
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(1.0, timeout_s - (time.perf_counter() - started))))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            codes.append(-9)
    return codes


def _quiet_tail(text: str, lines: int = 12) -> str:
    """The last lines of a peer's output, without its per-entry input warnings."""
    kept = [line for line in text.splitlines() if not line.startswith("read input ")]
    return "\n".join(kept[-lines:])


def free_bytes(path: Path) -> int:
    """Free bytes on the file system holding ``path`` (or its nearest existing parent)."""
    probe = path
    while not probe.exists():
        probe = probe.parent
    stats = os.statvfs(probe)
    return stats.f_bavail * stats.f_frsize
