"""Where the gpu-merged fused monitor's time goes: variants of gc_merged.cu with parts of the
monitor removed, timed by turns against the unmonitored run (whole run as a graph, and per launch)."""
import os, sys, json
import numpy as np
sys.path.insert(0, os.getcwd())
import spartan_py as sp
from spartan_py.engines import gpu_merged
from spartan_py.engines.gpu_merged import GpuMergedEngine
from spartan_py.resources import kernel_source
from spartan_py.timing import paired_difference

data = os.environ["SPARTAN_GC_DATA"]
network = sp.load_network(data + "/neuron1024")
inputs = sp.load_inputs(data + "/sparse-images-1024-proxy60k.tsv.gz", 1024, rows=60000)
truth = sp.read_truth(data + "/neuron1024-l120-categories-proxy60k.tsv")
src = kernel_source("gc_merged.cu")
OLD = open("scratch/old_gm.cu").read()

def engine(mode, text=None):
    if text is None:
        return GpuMergedEngine(network, monitor=mode)
    gpu_merged.kernel_source = lambda name: text
    gpu_merged._merged_kernels.cache_clear()
    try:
        e = GpuMergedEngine(network, monitor=mode)
        if mode != "off":  # the old kernel held counts in the stage: masks only where they fit
            pass
        return e
    finally:
        gpu_merged.kernel_source = kernel_source
        gpu_merged._merged_kernels.cache_clear()

engines = {"off": engine("off"), "fused": engine("fused"), "off B": engine("off"), "fused B": engine("fused"),
           "old off": engine("off", OLD), "old fused": engine("fused", OLD), "old off B": engine("off", OLD), "old fused B": engine("fused", OLD)}
batches = {n: e.upload(inputs) for n, e in engines.items()}
for n, e in engines.items():
    for _ in range(3):
        e.run_device(batches[n])
    ids, _, _ = batches[n].final_rows(e)
    print(n, "truth", bool(np.array_equal(ids + 1, truth)), flush=True)
print("chunks", engines["off"].chunks, "rows per tile", engines["off"].rows_per_tile, engines["off"].first_rows, flush=True)
times = {n: [] for n in engines}
per = {n: [] for n in engines}
names = list(engines)
for r in range(40):
    for n in (names if r % 2 == 0 else names[::-1]):
        times[n].append(engines[n].run_device(batches[n]))
for r in range(20):
    for n in (names if r % 2 == 0 else names[::-1]):
        engines[n].run_device(batches[n], per_layer_times=True)
        per[n].append(list(batches[n].layer_seconds))
res = {}
for n in names:
    base = "old off" if n.startswith("old") else "off"
    d = paired_difference(times[n], times[base])
    res[n] = {"median_ms": float(np.median(times[n])) * 1e3, "extra_us": d["median"] * 1e6,
              "extra_pct": 100 * d["median"] / float(np.median(times[base]))}
    pl = np.median(np.array(per[n]), axis=0) * 1e6
    res[n]["per_launch_us"] = pl.tolist()
    print(f"{n:24s} {res[n]['median_ms']:.4f} ms  extra {res[n]['extra_us']:+.1f} us ({res[n]['extra_pct']:+.2f}%)", flush=True)
off = np.array(res["off"]["per_launch_us"])
for n in names:
    print(f"{n:24s} per-launch delta us:", " ".join(f"{v:+.1f}" for v in np.array(res[n]["per_launch_us"]) - off), flush=True)
print("off per-launch us:", " ".join(f"{v:.1f}" for v in off))
json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "merged_ablation.json"), "w"), indent=1)
