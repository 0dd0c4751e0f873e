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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from zoo.benchmark import commands, common  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICKSTART = os.path.join(ROOT, "configs", "quickstart", "slowfast_tiny_motion.yaml")


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
    t.add_argument("--gemm-size", type=int, default=0,
                   help="side of the square GEMM whose FLOP/s is the peak for percent of peak "
                   "(0 = 4096 on CPU, 1024 for bf16 on a CPU without bf16 instructions, 8192 on "
                   "GPU; -1 = do not report percent of peak)")
    t.set_defaults(func=commands.cmd_train)

    c = sub.add_parser("compare", help="zoo SlowFast-R50 vs PyTorchVideo's create_slowfast")
    # A fresh process needs ~3 steps before glibc's allocator settles (see docs/benchmarks.md).
    common_args(c, warmup=3, runs=7)
    shape_args(c, 32, 224, 1)
    c.add_argument("--width", type=int, default=64, help="slow stem width (64 = R50)")
    c.add_argument("--no-ablation", action="store_true",
                   help="skip the zoo fp32 variants that only explain the fp32 gain")
    c.set_defaults(func=commands.cmd_compare)

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
    s.set_defaults(func=commands.cmd_scaling)

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
    d.set_defaults(func=commands.cmd_data)

    u = sub.add_parser("startup", help="seconds from the training command to its first iteration")
    u.add_argument("--out", default="output/benchmarks", help="folder for CSV/JSON")
    u.add_argument("--config-file", default=QUICKSTART)
    u.add_argument("--runs", type=int, default=2,
                   help="runs in a row; the first generates the synthetic data, later ones "
                   "reuse it")
    u.add_argument("--cache", default="", help="DATA.SYNTHETIC.ROOT to use (default: a new one)")
    u.add_argument("--timeout", type=float, default=300)
    u.add_argument("opts", nargs=argparse.REMAINDER, help="KEY VALUE config overrides")
    u.set_defaults(func=commands.cmd_startup)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    args.root = ROOT
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
