"""``spartan maps``: real activation maps from networks trained on Fashion-MNIST, their
sparsity at every granularity, and the figures of it."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from spartan_py.costmodel.spartan_hardware import DensePrices, SpartanAssumptions
from spartan_py.errors import InputError
from spartan_py.files import atomic_write_text, json_ready
from spartan_py.trained_maps.figures import bound_figures, load_summary
from spartan_py.trained_maps.job import JobSettings, run_job
from spartan_py.trained_maps.models import NETWORKS
from spartan_py.trained_maps.reprice import read_gemms, reprice_dense_steps, table_machine
from spartan_py.trained_maps.table import TableSettings, run_table
from spartan_py.trained_maps.table_text import load_table, step_figures, table_lines
from spartan_py.trained_maps.whatif import measured_dense, whatif_figures, whatif_rows, whatif_table


def _job_settings(args, out: Path, maps_dir: Path | None) -> JobSettings:
    return JobSettings(
        data=Path(args.data),
        out=out,
        networks=tuple(args.networks),
        steps=args.steps,
        batch=args.batch,
        px=args.px,
        images=args.images,
        seed=args.seed,
        device=args.device,
        amp=not args.no_amp,
        train_seconds=args.train_seconds,
        test_images=args.test_images,
        sensitivity=tuple(args.sensitivity),
        sample_images=args.sample_images,
        maps_dir=maps_dir,
        backend=args.backend,
    )


def _cmd_capture(args) -> int:
    settings = _job_settings(args, Path(args.out), None if args.maps_dir is None else Path(args.maps_dir))
    summary = run_job(settings, progress=lambda line: print(line, flush=True))
    for network, record in summary["networks"].items():
        late = record["points"].get("late", {})
        bounds = late.get("network", {}).get("relu_inputs", {}).get("step", {}).get("chw", {})
        shown = ", ".join(f"{g} {bounds[g]:.2f}" for g in ("64x32", "16x8", "4x4", "element") if bounds.get(g))
        print(f"{network}: late test accuracy {late.get('test_accuracy')}, step bound (chw) {shown}")
    print(f"summary: {settings.out / 'summary.json'}")
    return 0


def _cmd_figures(args) -> int:
    if str(args.summary).endswith(("table.json", "table.json.gz")):  # spartan maps table's summary
        paths = step_figures(load_table(args.summary), args.out)
    else:
        paths = bound_figures(load_summary(args.summary), args.out)
    for path in paths:
        print(path)
    return 0


def _cmd_whatif(args) -> int:
    grains = [g.strip() for g in args.grain.split(",") if g.strip()]
    try:
        base = SpartanAssumptions(
            grain=grains[0] if grains else "",
            order=args.order,
            precision=args.precision,
            skip_efficiency=args.skip_efficiency,
            compaction_hidden=args.compaction_hidden,
            compaction_free=args.compaction_free,
            monitor_us=args.monitor_us,
        )
        for grain in grains[1:]:
            SpartanAssumptions(grain=grain)
    except ValidationError as exc:
        raise InputError(f"spartan maps whatif: {exc.errors()[0]['msg']}") from None
    if args.batch < 1:
        raise InputError(f"--batch must be >= 1, got {args.batch}")
    measured = None if args.measured is None else measured_dense(args.measured, args.precision, args.batch)
    summary = load_summary(args.summary)
    rows = whatif_rows(summary, args.machine, grains, base, args.batch, path=args.summary, measured=measured)
    print(whatif_table(rows))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "summary": str(args.summary),
        "measured": args.measured,
        "assumptions": base.model_dump(exclude={"grain"}),
        "rates": DensePrices(args.machine).rates(args.precision),
        "rows": rows,
    }
    atomic_write_text(out / "whatif.json", json.dumps(json_ready(record), allow_nan=False, indent=1))
    for kernel, source in record["rates"].items():
        print(f"rate of {kernel}: {source.split(':')[0]} (whatif.json says from what)")
    print(f"wrote {out / 'whatif.json'}")
    for path in whatif_figures(rows, out):
        print(path)
    return 0


def _add_whatif(sub, common) -> None:
    what = sub.add_parser(
        "whatif",
        parents=[common],
        help="Spartan's hardware (free monitor, compaction engine, zero-skipping GEMM) priced at chosen grains",
    )
    what.add_argument("summary", help="summary.json of spartan maps capture")
    what.add_argument("--machine", default="h100-sxm", help="described GPU (sim/ name) whose dense GEMM is priced")
    what.add_argument("--grain", default="64x32,16x8,8x8,4x4,element", help="comma-separated grains")
    what.add_argument("--precision", default="fp32", choices=("fp32", "tf32"))
    what.add_argument("--order", default="chw", choices=("chw", "nhwc"), help="im2col column order of the tiles")
    what.add_argument("--batch", type=int, default=32, help="images per step the GEMMs are priced at (default 32)")
    what.add_argument("--skip-efficiency", type=float, default=1.0, help="share of dead work saved (default 1)")
    what.add_argument(
        "--compaction-hidden", type=float, default=0.0, help="share of the compaction hidden under the GEMM (0)"
    )
    what.add_argument("--compaction-free", action="store_true", help="a compaction engine that costs nothing")
    what.add_argument("--monitor-us", type=float, default=0.0, help="monitor cost per GEMM, us (default 0)")
    what.add_argument(
        "--measured", default=None, help="a training-step run's gemms.csv: its dense times replace the model's"
    )
    what.add_argument("--out", required=True, help="folder for whatif.json and whatif-NETWORK.png")
    what.set_defaults(handler=_cmd_whatif)


def _job_arguments(parser, images: int) -> None:
    """The training and capture options ``capture`` and ``table`` share."""
    parser.add_argument("--data", required=True, help="folder of Fashion-MNIST's four IDX .gz files")
    parser.add_argument("--networks", nargs="+", default=["alexnet", "vgg16", "resnet18"], choices=NETWORKS)
    parser.add_argument("--steps", type=int, default=1500, help="training steps per network (default 1500)")
    parser.add_argument("--batch", type=int, default=128, help="training batch (default 128)")
    parser.add_argument("--px", type=int, default=224, help="image side after upsampling (default 224)")
    parser.add_argument(
        "--images", type=int, default=images, help=f"test images captured at each point (default {images})"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--no-amp", action="store_true", help="train in FP32/TF32 without bfloat16 autocast")
    parser.add_argument(
        "--train-seconds", type=float, default=None, help="training time for all networks; steps are cut to fit"
    )
    parser.add_argument("--test-images", type=int, default=0, help="test images for accuracy (default 0: all)")
    parser.add_argument("--sensitivity", type=float, nargs="*", default=[0.7, 0.9], help="sparsities (default 0.7 0.9)")
    parser.add_argument("--sample-images", type=int, default=1, help="images per packed-bitmask sample (default 1)")
    parser.add_argument("--backend", default="auto", choices=("auto", "numpy", "cupy"), help="granularity arrays")


def _cmd_table(args) -> int:
    out = Path(args.out)
    settings = TableSettings(
        capture=_job_settings(args, out, None),
        experiment=Path(args.experiment),
        out=out,
        work=Path(args.work),
        simulated=args.simulated,
    )
    table = run_table(settings, progress=lambda line: print(line, flush=True))
    print(table_lines(table))
    print(f"wrote {out / 'table.json'}, {out / 'gemms.csv'} and {out / 'maps'}")
    return 0


def _add_table(sub, common) -> None:
    table = sub.add_parser(
        "table",
        parents=[common],
        help="Spartan's table on real maps: train, capture at init/middle/late, run the training step on each",
    )
    table.add_argument("--out", required=True, help="folder for table.json, gemms.csv and maps/ (summaries only)")
    table.add_argument("--work", required=True, help="folder for the full maps and the run folders (large)")
    table.add_argument(
        "--experiment", default="experiments/spartan-table.yaml", help="the step's settings (precisions, repeats, ...)"
    )
    table.add_argument("--simulated", action="store_true", help="the step's times from the cost model (CPU)")
    _job_arguments(table, images=32)
    table.set_defaults(handler=_cmd_table)


def _cmd_reprice(args) -> int:
    gemms, path = read_gemms(args.table)
    machine = args.machine or table_machine(args.table)
    if machine is None:
        raise InputError("name the machine to price on (--machine): the folder holds no table.json", path=args.table)
    steps = reprice_dense_steps(gemms, machine, path)
    print(f"{path}: the dense step's cuBLAS GEMMs measured, priced by the run, and priced on {machine} now")
    for row in steps.itertuples():
        print(
            f"  {row.network} {row.training_point} {row.precision}: measured {row.measured_ms:.3f} ms, "
            f"the run's price {row.table_model_ms:.3f} ms ({row.table_error:+.1%}), now {row.model_ms:.3f} ms "
            f"({row.error:+.1%})"
        )
    print("errors are against the GPU that ran the table: they mean something only on its machine file")
    return 0


def _add_reprice(sub, common) -> None:
    reprice = sub.add_parser(
        "reprice",
        parents=[common],
        help="a committed table's dense GEMMs priced again with today's machine files (CPU)",
    )
    reprice.add_argument("table", help="spartan maps table's output folder (gemms.csv or .csv.gz) or the file")
    reprice.add_argument(
        "--machine", default=None, help="machine file to price on (default: the one the table's run priced on)"
    )
    reprice.set_defaults(handler=_cmd_reprice)


def register(commands, common) -> None:
    """Add ``spartan maps capture``, ``figures``, ``whatif``, ``table`` and ``reprice``."""
    maps = commands.add_parser("maps", parents=[common], help="real activation maps of trained networks (PyTorch)")
    sub = maps.add_subparsers(dest="maps_command", required=True)
    cap = sub.add_parser(
        "capture",
        parents=[common],
        help="train AlexNet, VGG-16, ResNet-18 on Fashion-MNIST; capture maps and their sparsity at every grain",
    )
    cap.add_argument("--out", required=True, help="folder for summary.json and samples-NETWORK.npz")
    _job_arguments(cap, images=8)
    cap.add_argument("--maps-dir", default=None, help="also write full maps (activations: .npz form) here")
    cap.set_defaults(handler=_cmd_capture)
    fig = sub.add_parser(
        "figures",
        parents=[common],
        help="bound against granularity per network and point (a capture's summary.json), or where the step's time "
        "goes per layer (spartan maps table's table.json)",
    )
    fig.add_argument("summary", help="summary.json of spartan maps capture, or table.json of spartan maps table")
    fig.add_argument("--out", required=True, help="folder for the PNGs")
    fig.set_defaults(handler=_cmd_figures)
    _add_whatif(sub, common)
    _add_table(sub, common)
    _add_reprice(sub, common)
