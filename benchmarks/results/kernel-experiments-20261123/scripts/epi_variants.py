"""Old vs new epilogue kernels: correctness against NumPy, then times on the conv shapes."""
import json, os, sys, subprocess
import numpy as np
import cupy as cp
sys.path.insert(0, os.getcwd())
from spartan_py.resources import kernel_source
from spartan_py.sparsity.workloads import conv_layer
from spartan_py.timing import time_interleaved, paired_difference

CASES = (("alexnet/conv2", 128), ("alexnet/conv4", 128), ("vgg16/conv3_2", 16), ("vgg16/conv5_2", 64),
         ("resnet18/conv2_x", 64), ("resnet18/conv4_x", 64), ("resnet18/conv5_x", 128))

def module(src):
    names = {f"epilogue_{m}": f"epilogue<{c}>" for m, c in {"plain": 0, "fused": 1, "count": 2}.items()}
    mod = cp.RawModule(code=src, options=("-std=c++17", "-DSPARTAN_TILES_NO_EXPLICIT_INSTANCES"), name_expressions=list(names.values()))
    return {k: mod.get_function(v) for k, v in names.items()}

NEW = kernel_source("spartan_tiles.cu")
LOAD = "*reinterpret_cast<const float4*>(z + (size_t)(warp_row0 + step) * N + col)"
assert LOAD in NEW
VARIANTS = {"old": open("scratch/old_tiles.cu").read(), "nib": NEW, "cur": open("scratch/cur_tiles.cu").read(),
            "cs": NEW.replace(LOAD, "__ldcs(reinterpret_cast<const float4*>(z + (size_t)(warp_row0 + step) * N + col))"),
            "cg": NEW.replace(LOAD, "__ldcg(reinterpret_cast<const float4*>(z + (size_t)(warp_row0 + step) * N + col))")}
SYNC = ("    float4 b = make_float4(0.f, 0.f, 0.f, 0.f);", "    __syncwarp();\n    float4 b = make_float4(0.f, 0.f, 0.f, 0.f);")
BREAK = [("        float4 x = v[step];", "        if (step >= rows_here) break;\n        float4 x = v[step];"),
         ("            if (step < rows_here) *reinterpret_cast<float4*>(y", "            *reinterpret_cast<float4*>(y")]
def edit(text, pairs):
    for a, b in pairs:
        assert a in text, a
        text = text.replace(a, b)
    return text
VARIANTS["lb3"] = edit(NEW, [("__global__ void __launch_bounds__(256) epilogue(", "__global__ void __launch_bounds__(256, 3) epilogue(")])
VARIANTS["sync"] = edit(NEW, [SYNC])
WHICH = os.environ.get("VARIANTS", "old,nib,cur").split(",")
out = os.environ.get("OUT", "/tmp")
MODS = {}
for v in WHICH:
    MODS[v] = module(VARIANTS[v])
    open(f"/tmp/{v}.cu", "w").write(VARIANTS[v])
    subprocess.run(["nvcc", "-std=c++17", "-arch=sm_90", "-cubin", "-o", f"/tmp/{v}.cubin", f"/tmp/{v}.cu"], check=True)
    for k in (1, 2):
        sass = subprocess.run(["cuobjdump", "-sass", "-fun", f"_Z8epilogueILi{k}EEvPKfS1_PfiifiiPiS3_", f"/tmp/{v}.cubin"], capture_output=True, text=True).stdout
        ops = [l for l in sass.splitlines() if "LDG" in l or "STG" in l]
        first_st = next((i for i, l in enumerate(ops) if "STG" in l), len(ops))
        idx = [i for i, l in enumerate(sass.splitlines()) if "LDG" in l]
        print(v, "MODE", k, "loads before first store:", sum("LDG" in l for l in ops[:first_st]), "of", sum("LDG" in l for l in ops),
              "SASS lines from first to last load:", idx[-1] - idx[0] if idx else None, flush=True)
old, new = MODS["old"], MODS[WHICH[1]]
for name, mods in MODS.items():
    for k, f in mods.items():
        print(name, k, "regs", f.num_regs, flush=True)

def grid(m, n):
    return (-(-n // 128), -(-m // 128))

def run(mods, kind, z, bias, clamp, tile):
    m, n = z.shape
    g = grid(m, n)
    y = cp.empty_like(z)
    tn = cp.full((-(-m // tile[0]), -(-n // tile[1])), -7, dtype=cp.int32)
    rp = cp.full((m, g[0]), -7, dtype=cp.int32)
    mods[kind](g, (256,), (z, bias, y, np.int32(m), np.int32(n), np.float32(clamp), np.int32(tile[0]), np.int32(tile[1]), tn, rp))
    return y, tn, rp

bad = 0
rng = np.random.default_rng(0)
for (m, n) in ((300, 256), (300, 196), (1000, 520), (37, 12), (129, 132), (2048, 1024)):
    z = rng.standard_normal((m, n)).astype(np.float32)
    z[rng.random((m, n)) < 0.3] = 0
    bias = (rng.standard_normal(n) * 0.2).astype(np.float32)
    y_ref = np.minimum(np.maximum(z + bias, 0), 1.5)
    for tile in ((1, 4), (2, 8), (4, 16), (8, 8), (16, 32), (32, 32), (32, 4), (64, 128), (128, 32), (128, 128), (16, 4), (8, 64)):
        for kind in ("fused", "count"):
            src = y_ref if kind == "fused" else z
            y, tn, rp = run(new, "epilogue_" + kind, cp.asarray(z if kind == "fused" else src), cp.asarray(bias), 1.5, tile)
            tm, tnn = -(-m // tile[0]), -(-n // tile[1])
            pad = np.zeros((tm * tile[0], tnn * tile[1]), bool); pad[:m, :n] = src != 0
            want_t = pad.reshape(tm, tile[0], tnn, tile[1]).sum(axis=(1, 3))
            ok = np.array_equal(tn.get(), want_t) and np.array_equal(rp.get().sum(axis=1), (src != 0).sum(axis=1))
            if kind == "fused":
                ok = ok and np.array_equal(y.get(), y_ref)
            if not ok:
                bad += 1
                print("MISMATCH", m, n, tile, kind, flush=True)
print("correctness:", "ALL EQUAL" if not bad else f"{bad} mismatches", flush=True)

results = []
for label, batch in CASES[int(os.environ.get("FIRST_CASE", "0")):]:
    m, k, n = conv_layer(label).gemm_shape(batch)
    zs = [cp.asarray(rng.standard_normal((m, n), dtype=np.float32)) for _ in range(4)]
    ys = [cp.empty_like(z) for z in zs]
    bias = cp.asarray((rng.standard_normal(n) * 0.1).astype(np.float32))
    g = grid(m, n)
    cases = {}
    for name, mods in MODS.items():
        for kind, tile in (("plain", (1, 4)), ("fused", (32, 32)), ("fused", (16, 32)), ("fused", (128, 32)), ("count", (32, 32))):
            tn = cp.empty((-(-m // tile[0]), -(-n // tile[1])), dtype=cp.int32)
            rp = cp.empty((m, g[0]), dtype=cp.int32)
            f = mods[f"epilogue_{kind}"]
            src = zs if kind != "count" else ys
            def work(i, f=f, tn=tn, rp=rp, tile=tile, src=src):
                f(g, (256,), (src[i % 4], bias, ys[i % 4], np.int32(m), np.int32(n), np.float32(np.inf), np.int32(tile[0]), np.int32(tile[1]), tn, rp))
            cases[f"{name} {kind} {tile[0]}x{tile[1]}"] = work
    for f in ys: pass
    t = time_interleaved(cases, rounds=int(os.environ.get("ROUNDS", "40")), calls=8)
    row = {"layer": label, "M": m, "N": n, "median_us": {c: float(np.median(v)) for c, v in t.items()}}
    line = f"{label} "
    for name in MODS:
        for tile in ("32x32", "16x32", "128x32"):
            row[f"{name} extra {tile}"] = paired_difference(t[f"{name} fused {tile}"], t[f"{name} plain 1x4"])
        line += f"| {name}: plain {row['median_us'][name + ' plain 1x4']:.2f} count {row['median_us'][name + ' count 32x32']:.2f} extra32 {row[name + ' extra 32x32']['median']:.3f} 16x32 {row[name + ' extra 16x32']['median']:.3f} 128x32 {row[name + ' extra 128x32']['median']:.3f} "
    results.append(row)
    print(line, flush=True)
    zs = ys = None
    cp.get_default_memory_pool().free_all_blocks()
out = os.environ.get("OUT", "/tmp")
json.dump(results, open(os.path.join(out, "epi_variants.json"), "w"), indent=1)
