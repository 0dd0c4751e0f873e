#!/usr/bin/env python
"""Benchmarks: train-step speed, zoo vs PyTorchVideo, DDP scaling, loader speed, time to start.

    python tools/benchmark.py compare                  # zoo SlowFast-R50 vs PyTorchVideo's
    python tools/benchmark.py scaling --procs 1 2      # quick-start model, 1 and 2 processes
    python tools/benchmark.py train --model slowfast_tiny_resnet18 --frames 16 --size 56 \\
        --batch 8 --precision fp32 bf16 --memory-format contiguous channels_last
    python tools/benchmark.py data --workers 0 2       # loader clips/s of the quick start
    python tools/benchmark.py startup                  # quick start: command -> first iteration

Each writes NAME.csv, NAME.json (with the machine and its load average) and NAME.png under
--out (default output/benchmarks). See docs/benchmarks.md.
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from zoo.benchmark import common, plots  # noqa: E402
from zoo.utils.env import available_cpus  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICKSTART = os.path.join(ROOT, "configs", "quickstart", "slowfast_tiny_motion.yaml")


def _device(args) -> torch.device:
    if args.device == "auto":
        return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    return torch.device(args.device)


def _finish(args, name, rows, machine, columns, extra=None):
    paths = common.write_results(args.out, name, rows, machine, extra)
    print(common.format_table(rows, columns))
    return paths


def cmd_train(args) -> list:
    from zoo.benchmark.train import train_throughput

    device = _device(args)
    torch.set_num_threads(args.threads or available_cpus())
    machine = common.machine_info(device)
    kwargs = dict(zip(args.kwargs[0::2], [_literal(v) for v in args.kwargs[1::2]]))
    rows = train_throughput(args.model, args.frames, args.size, args.batch, args.precision,
                            args.memory_format, args.warmup, args.runs, device, args.num_classes,
                            kwargs, args.compile)
    paths = _finish(args, "train", rows, machine, ["precision", "memory_format",
                    "resolved_precision", "channels_last", "median_s", "clips_per_s",
                    "first_loss"])
    png = os.path.join(args.out, "train.png")
    plots.bar_chart(png, [f"zoo {r['precision']} / {r['memory_format']}" for r in rows],
                    [r["clips_per_s"] for r in rows],
                    f"{args.model} train step, batch {args.batch}, {args.frames}x{args.size}²",
                    "clips/s (higher is better)", footer=plots.machine_footer(machine))
    return paths + [png]


def cmd_compare(args) -> list:
    from zoo.benchmark.compare import compare_pytorchvideo

    device = _device(args)
    torch.set_num_threads(args.threads or available_cpus())
    machine = common.machine_info(device)
    rows, ratios = compare_pytorchvideo(args.frames, args.size, args.batch, args.width,
                                        args.num_classes, args.warmup, args.runs, device,
                                        ablation=not args.no_ablation)
    paths = _finish(args, "compare", rows, machine, ["variant", "precision", "channels_last",
                    "median_s", "clips_per_s", "speedup_vs_ptv_fp32", "first_loss",
                    "loss_rel_diff_vs_ptv_fp32"], {"ratios": ratios})
    print(f"zoo fp32 / PyTorchVideo fp32: {ratios['zoo_fp32_vs_ptv_fp32']:.2f}x (loss relative "
          f"difference {ratios['loss_rel_diff_fp32']:.2g})")
    print(f"zoo defaults ({ratios['zoo_defaults_precision']}) / PyTorchVideo defaults (fp32): "
          f"{ratios['zoo_defaults_vs_ptv_defaults']:.2f}x (loss relative difference "
          f"{ratios['loss_rel_diff_defaults']:.2g})")
    print(f"zoo defaults / PyTorchVideo with the same settings: "
          f"{ratios['zoo_defaults_vs_ptv_same_settings']:.2f}x")
    png = os.path.join(args.out, "compare.png")
    plots.bar_chart(png, [r["variant"] for r in rows], [r["clips_per_s"] for r in rows],
                    "SlowFast-R50 8x8 train step (forward + backward + SGD step)\n"
                    f"batch {args.batch}, {args.frames}x{args.size}², "
                    f"{torch.get_num_threads()} threads, same process, same weights",
                    "clips/s (higher is better)",
                    notes=[f"{r['speedup_vs_ptv_fp32']:.2f}x" for r in rows],
                    footer=plots.machine_footer(machine))
    return paths + [png]


def cmd_scaling(args) -> list:
    from zoo.benchmark.scaling import scaling

    device = _device(args)
    machine = common.machine_info(device)
    rows = scaling(args.config_file, args.opts, args.procs, args.threads_per_proc, args.steps,
                   args.warmup, args.repeats)
    paths = _finish(args, "scaling", rows, machine, ["processes", "threads_per_proc",
                    "precision", "batch_per_proc", "clips_per_s", "speedup", "efficiency",
                    "clips_per_s_all_runs"], {"config_file": os.path.relpath(args.config_file),
                                              "opts": list(args.opts)})
    png = os.path.join(args.out, "scaling.png")
    threads = rows[0]["threads_per_proc"]
    what = "GPUs" if device.type == "cuda" else f"CPU processes x {threads} thread(s)"
    plots.scaling_chart(png, [r["processes"] for r in rows], [r["clips_per_s"] for r in rows],
                        [r["efficiency"] for r in rows], "clips/s",
                        f"{os.path.basename(args.config_file)}: {what}",
                        footer=plots.machine_footer(machine))
    return paths + [png]


def cmd_data(args) -> list:
    from zoo.benchmark.loader import loader_throughput
    from zoo.config import load_config

    machine = common.machine_info(torch.device("cpu"))
    cfg = load_config(args.config_file, args.opts)
    rows = loader_throughput(cfg, args.workers, args.batches, args.warmup, args.split)
    extra = {"config_file": os.path.relpath(args.config_file), "opts": list(args.opts)}
    if args.decoders is not None:
        extra["decoders"] = _decoder_benchmark(args.decoders)
    paths = _finish(args, "data", rows, machine, ["split", "num_workers", "batch", "clip_shape",
                    "clips_per_s", "skipped_videos"], extra)
    png = os.path.join(args.out, "data.png")
    plots.bar_chart(png, [f"zoo loader, {r['num_workers']} workers" for r in rows],
                    [r["clips_per_s"] for r in rows],
                    f"{os.path.basename(args.config_file)}: {args.split} loader",
                    "clips/s (higher is better)", footer=plots.machine_footer(machine))
    return paths + [png]


def _decoder_benchmark(decoders) -> dict:
    """Run the data layer's per-decoder benchmark (tools/benchmark_data.py) on generated videos."""
    import json
    import subprocess

    with tempfile.TemporaryDirectory(prefix="zoo_decoders_") as tmp:
        report = os.path.join(tmp, "decoders.json")
        cmd = [sys.executable, os.path.join(ROOT, "tools", "benchmark_data.py"), "--generate",
               "8", "--out", tmp, "--seconds", "6", "--rounds", "2", "--json", report]
        if decoders != "all":
            cmd += ["--decoders", *decoders.split(",")]
        r = subprocess.run(cmd, text=True)
        if r.returncode != 0 or not os.path.isfile(report):
            return {"error": f"tools/benchmark_data.py exited with {r.returncode}"}
        with open(report, encoding="utf-8") as f:
            return json.load(f)


def cmd_startup(args) -> list:
    from zoo.benchmark.startup import time_to_first_iteration

    machine = common.machine_info(torch.device("cpu"))
    rows = []
    with tempfile.TemporaryDirectory(prefix="zoo_startup_") as tmp:
        cache = args.cache or os.path.join(tmp, "cache")
        cmd = [sys.executable, os.path.join(ROOT, "tools", "train_ddp.py"), "--config-file",
               args.config_file, *args.opts, "LOG.BASE_PATH", os.path.join(tmp, "out"),
               "DATA.SYNTHETIC.ROOT", cache]
        for run in range(args.runs):
            r = time_to_first_iteration(cmd, args.timeout)
            r["data"] = "generated in this run" if r["data_generated"] else "cached"
            r["run"] = run + 1
            rows.append(r)
    paths = _finish(args, "startup", rows, machine, ["run", "data", "seconds", "logged_s"],
                    {"command": "python tools/train_ddp.py --config-file "
                     f"{os.path.relpath(args.config_file)} {' '.join(args.opts)}".strip()})
    return paths


def _literal(value: str):
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(value, value)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 2)[2])
    sub = p.add_subparsers(dest="command", required=True)

    def common_args(q, warmup=2, runs=5):
        q.add_argument("--out", default="output/benchmarks", help="folder for CSV/JSON/PNG")
        q.add_argument("--device", default="auto", help="auto (GPU 0 if any, else CPU), cpu, cuda")
        q.add_argument("--warmup", type=int, default=warmup, help="untimed steps/batches")
        q.add_argument("--runs", type=int, default=runs, help="timed steps (median reported)")

    def shape_args(q, frames, size, batch):
        q.add_argument("--frames", type=int, default=frames, help="clip length (fast pathway)")
        q.add_argument("--size", type=int, default=size, help="crop size (pixels)")
        q.add_argument("--batch", type=int, default=batch, help="clips per step")
        q.add_argument("--num-classes", type=int, default=400)
        q.add_argument("--threads", type=int, default=0, help="torch threads (0 = all cores)")

    t = sub.add_parser("train", help="clips/s of zoo's train step for a registered model")
    common_args(t)
    shape_args(t, 32, 224, 1)
    t.add_argument("--model", default="slowfast_8x8_resnet50")
    t.add_argument("--kwargs", nargs="*", default=[], metavar="KEY VALUE",
                   help="builder arguments, e.g. width 16")
    t.add_argument("--precision", nargs="+", default=["auto"],
                   choices=["auto", "fp32", "bf16", "fp16"])
    t.add_argument("--memory-format", nargs="+", default=["auto"],
                   choices=["auto", "channels_last", "contiguous"])
    t.add_argument("--compile", action="store_true", help="torch.compile the model")
    t.set_defaults(func=cmd_train)

    c = sub.add_parser("compare", help="zoo SlowFast-R50 vs PyTorchVideo's create_slowfast")
    # A fresh process needs ~3 steps before glibc's allocator settles (see docs/benchmarks.md).
    common_args(c, warmup=3, runs=7)
    shape_args(c, 32, 224, 1)
    c.add_argument("--width", type=int, default=64, help="slow stem width (64 = R50)")
    c.add_argument("--no-ablation", action="store_true",
                   help="skip the zoo fp32 variants that only explain the fp32 gain")
    c.set_defaults(func=cmd_compare)

    s = sub.add_parser("scaling", help="the same short training with 1, 2, ... processes")
    s.add_argument("--out", default="output/benchmarks", help="folder for CSV/JSON/PNG")
    s.set_defaults(device="auto")  # GPUs when present, else CPU processes
    s.add_argument("--config-file", default=QUICKSTART)
    s.add_argument("--procs", type=int, nargs="+", default=[1, 2])
    s.add_argument("--threads-per-proc", type=int, default=1, help="0 = cores / processes")
    s.add_argument("--steps", type=int, default=40, help="timed steps per run")
    s.add_argument("--warmup", type=int, default=5, help="untimed steps per run")
    s.add_argument("--repeats", type=int, default=5, help="runs per count (median reported)")
    s.add_argument("opts", nargs=argparse.REMAINDER, help="KEY VALUE config overrides")
    s.set_defaults(func=cmd_scaling)

    d = sub.add_parser("data", help="clips/s of the training loader (build_loader)")
    d.add_argument("--out", default="output/benchmarks", help="folder for CSV/JSON/PNG")
    d.add_argument("--config-file", default=QUICKSTART)
    d.add_argument("--workers", type=int, nargs="+", default=[0, 2], help="NUM_WORKERS values")
    d.add_argument("--batches", type=int, default=20, help="timed batches per value")
    d.add_argument("--warmup", type=int, default=3, help="untimed batches per value")
    d.add_argument("--split", default="train", choices=["train", "val", "test"])
    d.add_argument("--decoders", default=None, metavar="all|NAME,NAME",
                   help="also run tools/benchmark_data.py (decoding speed per decoder, one worker) "
                   "on 8 generated videos, for these decoders")
    d.add_argument("opts", nargs=argparse.REMAINDER, help="KEY VALUE config overrides")
    d.set_defaults(func=cmd_data)

    u = sub.add_parser("startup", help="seconds from the training command to its first iteration")
    u.add_argument("--out", default="output/benchmarks", help="folder for CSV/JSON")
    u.add_argument("--config-file", default=QUICKSTART)
    u.add_argument("--runs", type=int, default=2,
                   help="runs in a row; the first generates the synthetic data, later ones "
                   "reuse it")
    u.add_argument("--cache", default="", help="DATA.SYNTHETIC.ROOT to use (default: a new one)")
    u.add_argument("--timeout", type=float, default=300)
    u.add_argument("opts", nargs=argparse.REMAINDER, help="KEY VALUE config overrides")
    u.set_defaults(func=cmd_startup)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if hasattr(args, "opts"):
        args.opts = [o for o in args.opts if o != "--"]
    print(f"load average before: {common.load_average()}")
    paths = args.func(args)
    print(f"load average after: {common.load_average()}")
    for path in paths:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
