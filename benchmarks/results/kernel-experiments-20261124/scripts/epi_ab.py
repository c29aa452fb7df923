"""A/B: the epilogue holding its 16 loads in registers (HEAD) vs staged in shared memory by
cp.async (working tree), on the conv shapes: bit-equal outputs, then times by turns."""
import os
import sys
from pathlib import Path

import numpy as np
import cupy as cp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.spartan_machinery import CONV_CASES, GEMM_TILE  # noqa: E402
from spartan_py.sparsity.gpu_kernels import epilogue_grid  # noqa: E402
from spartan_py.sparsity.workloads import conv_layer, tiled_preactivations  # noqa: E402
from spartan_py.sparsity.tile_gemm import dense_matmul  # noqa: E402
from spartan_py.timing import paired_difference, time_interleaved  # noqa: E402

new_src = Path(__file__).resolve().parents[1].joinpath("kernels", "spartan_tiles.cu").read_text()
old_src = Path(__file__).with_name("spartan_tiles_old.cu").read_text()
hybrid_src = Path(__file__).with_name("spartan_tiles_hybrid.cu").read_text()  # s12, s8: some rows held in registers
names = [f"epilogue<{c}>" for c in (0, 1, 2)]
VERSIONS = {}
WANTED = os.environ.get("VERSIONS", "old,s16,s12,s8").split(",")
for vname, src, staged in (("old", old_src, None), ("s16", new_src, None), ("s12", hybrid_src, 12), ("s8", hybrid_src, 8)):
    if vname not in WANTED:
        continue
    opts = ("-std=c++17", "-DSPARTAN_TILES_NO_EXPLICIT_INSTANCES") + ((f"-DEPI_STAGED_ROWS={staged}",) if staged else ())
    mod = cp.RawModule(code=src, options=opts, name_expressions=names)
    smem = 0 if vname == "old" else 8 * (staged or 16) * 128 * 4
    ks = {}
    for mode, c in (("plain", 0), ("fused", 1), ("count", 2)):
        k = mod.get_function(f"epilogue<{c}>")
        if smem:
            k.max_dynamic_shared_size_bytes = smem
        per_sm = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(k.kernel.ptr, 256, smem)
        print(vname, mode, "regs", k.attributes["num_regs"], "blocks/SM", per_sm, flush=True)
        ks[mode] = k
    VERSIONS[vname] = (ks, smem)


def launcher(version, mode, zs, ys, bias, tile):
    m, n = zs[0].shape
    grid = epilogue_grid(m, n)
    tile_nnz = cp.empty((-(-m // tile[0]), -(-n // tile[1])), dtype=cp.int32)
    row_part = cp.empty((m, grid[0]), dtype=cp.int32)
    shape = (np.int32(m), np.int32(n), np.float32(np.inf), np.int32(tile[0]), np.int32(tile[1]), tile_nnz, row_part)
    ks, smem = VERSIONS[version]
    k = ks[mode]
    return (lambda i: k(grid, (256,), (zs[i % len(zs)], bias, ys[i % len(ys)], *shape), shared_mem=smem)), tile_nnz, row_part


rows = []
for label, batch in CONV_CASES:
    m, k, n = conv_layer(label).gemm_shape(batch)
    a = cp.asarray(tiled_preactivations(m, k, 0.5, tile=GEMM_TILE, seed=2, xp=cp).clip(0, None))
    rng = np.random.default_rng(3)
    ws = [cp.asarray((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)) for _ in range(4)]
    zs = [dense_matmul(a, w) for w in ws]
    ys = {v: [cp.empty_like(z) for z in zs] for v in VERSIONS}
    bias = cp.asarray(rng.standard_normal(n).astype(np.float32) * 0.1)
    cases, outs = {}, {}
    for version in VERSIONS:
        for mode, tile in (("plain", (1, 4)), ("fused", (32, 32)), ("count", (32, 32))):
            src = ys[version] if mode == "count" else zs
            work, tn, rp = launcher(version, mode, src, ys[version], bias, tile)
            cases[f"{version}_{mode}"] = work
            outs[(version, mode)] = (tn, rp)
    for version in VERSIONS:
        cases[f"{version}_plain"](0); cases[f"{version}_fused"](0); cases[f"{version}_count"](0)
    cp.cuda.Device().synchronize()
    equal = True
    for version in VERSIONS:
        if version == "old":
            continue
        equal = equal and bool(cp.array_equal(ys["old"][0], ys[version][0]))
        for mode in ("fused", "count"):
            equal = equal and all(bool(cp.array_equal(x, y)) for x, y in zip(outs[("old", mode)], outs[(version, mode)]))
        for tile in ((16, 32), (64, 32), (128, 128), (8, 4)):
            w1, a1, b1 = launcher("old", "fused", zs, ys["old"], bias, tile)
            w2, a2, b2 = launcher(version, "fused", zs, ys[version], bias, tile)
            w1(1); w2(1)
            equal = equal and bool(cp.array_equal(a1, a2)) and bool(cp.array_equal(b1, b2)) and bool(cp.array_equal(ys["old"][1], ys[version][1]))
    t = time_interleaved(cases, rounds=int(os.environ.get("ROUNDS", "40")), calls=8)
    med = {name: float(np.median(v)) for name, v in t.items()}
    row = {"layer": label, "M": m, "N": n, "equal": equal, **{f"{k}_us": round(v, 2) for k, v in med.items()}}
    for version in VERSIONS:
        d = paired_difference(t[f"{version}_fused"], t[f"{version}_plain"])
        row[f"{version}_fused_extra"] = [round(d["median"], 3), round(d["p10"], 2), round(d["p90"], 2)]
    print(row, flush=True)
    rows.append(row)
    zs = ys = a = ws = cases = None
    cp.get_default_memory_pool().free_all_blocks()
import json, os
out = Path(os.environ.get("OUT", "/tmp")) / "epi_ab.json"
out.write_text(json.dumps(rows, indent=1))
