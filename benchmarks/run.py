"""``zoo-benchmark`` (``tools/benchmark.py``): train-step speed, zoo vs PyTorchVideo, DDP scaling,
loader speed, time to start.

    zoo-benchmark compare                  # zoo SlowFast-R50 vs PyTorchVideo's
    zoo-benchmark scaling --procs 1 2      # quick-start model, 1 and 2 processes
    zoo-benchmark scaling --nodes 2 --compression none bf16   # two netns nodes, 1 Gbit/s (root)
    zoo-benchmark profile --precision bf16 # per-operator time of a SlowFast-R50 train step
    zoo-benchmark stems --batch 16         # the RGB stems: padded 3-D conv vs 2-D folds
    zoo-benchmark train --model slowfast_tiny_resnet18 --frames 16 --size 56 \\
        --batch 8 --precision fp32 bf16 --memory-format contiguous channels_last
    zoo-benchmark data --workers 0 2       # loader clips/s of the quick start
    zoo-benchmark data --generate 8 --clips-per-video 1 4 --rounds 4   # see docs/benchmarks.md
    zoo-benchmark startup                  # quick start: command -> first iteration
    zoo-benchmark gpu --out output/gpu_check   # the GPU check (benchmarks/gpu_check.sh runs it)

Each writes NAME.csv, NAME.json (with the machine and its load average) and NAME.png under
--out (default output/benchmarks). scaling, data and startup read the quick-start config
(configs/quickstart/slowfast_tiny_motion.yaml, relative to the current folder: run them from the
checkout) unless --config-file names another; they take --extra-modules and trailing KEY VALUE
overrides like every zoo command. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from zoo.accel.ddp_comm import COMPRESSIONS
from zoo.cli.parser import add_config_arguments, tool_parser

from . import commands, common
from .data import DECODERS

DESCRIPTION = ("Benchmarks: train-step speed, zoo vs PyTorchVideo, DDP scaling, loader speed, "
               "time to start, the GPU check.")
QUICKSTART = "configs/quickstart/slowfast_tiny_motion.yaml"
OUT = "output/benchmarks"


def _step_args(q: argparse.ArgumentParser, warmup: int, runs: int, frames: int, size: int,
               batch: int) -> None:
    """The arguments of the in-process train-step benchmarks (train, compare)."""
    q.add_argument("--out", default=OUT, help="folder for CSV/JSON/PNG")
    q.add_argument("--device", default="auto", help="auto (GPU 0 if any, else CPU), cpu, cuda")
    q.add_argument("--warmup", type=int, default=warmup, help="untimed steps/batches")
    q.add_argument("--runs", type=int, default=runs, help="timed steps (median reported)")
    q.add_argument("--frames", type=int, default=frames, help="clip length (fast pathway)")
    q.add_argument("--size", type=int, default=size, help="crop size (pixels)")
    q.add_argument("--batch", type=int, default=batch, help="clips per step")
    q.add_argument("--num-classes", type=int, default=400)
    q.add_argument("--threads", type=int, default=0, help="torch threads (0 = all cores)")


def _add_train(sub) -> None:
    t = sub.add_parser("train", help="clips/s of zoo's train step for a registered model")
    _step_args(t, warmup=2, runs=5, frames=32, size=224, batch=1)
    t.add_argument("--model", default="slowfast_8x8_resnet50")
    t.add_argument("--kwargs", nargs="*", default=[], metavar="KEY VALUE",
                   help="builder arguments, e.g. width 16")
    t.add_argument("--precision", nargs="+", default=["auto"],
                   choices=["auto", "fp32", "bf16", "fp16"])
    t.add_argument("--memory-format", nargs="+", default=["auto"],
                   choices=["auto", "channels_last", "contiguous"])
    _execution_args(t)
    t.add_argument("--act-checkpoint-memory", action="store_true",
                   help="instead of clips/s: peak memory of one fp32 step with and without "
                   "activation checkpointing (CONFIG.TRAIN.ACT_CHECKPOINT), each in a fresh "
                   "process")
    t.add_argument("--gemm-size", type=int, default=0,
                   help="side of the square GEMM whose FLOP/s is the peak for percent of peak "
                   "(0 = 4096 on CPU, 1024 for bf16 on a CPU without bf16 instructions, 8192 on "
                   "GPU; -1 = do not report percent of peak)")
    t.set_defaults(func=commands.cmd_train)


def _execution_args(parser, which: str = "") -> None:
    """The trainer's GPU step settings (CONFIG.TRAIN COMPILE, COMPILE_MODE, STEM_PAD_CHANNELS,
    CUDNN_BENCHMARK) as flags; "auto" resolves as the trainer does for one process."""
    switch = ["auto", "True", "False"]
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the model" + which)
    parser.add_argument("--compile-mode", default="auto",
                        choices=["auto", "default", "reduce-overhead", "max-autotune",
                                 "max-autotune-no-cudagraphs"],
                        help="TRAIN.COMPILE_MODE with --compile (auto: reduce-overhead = CUDA "
                        "graphs on a GPU, else default)")
    parser.add_argument("--stem-pad", default="auto", choices=switch,
                        help="TRAIN.STEM_PAD_CHANNELS: RGB stems padded to 8 channels (auto: on "
                        "a GPU)" + which)
    parser.add_argument("--cudnn-benchmark", default="auto", choices=switch,
                        help="TRAIN.CUDNN_BENCHMARK (auto: on a GPU)" + which)


def _add_profile(sub) -> None:
    p = sub.add_parser("profile", help="per-operator time of zoo's train step (torch.profiler)")
    _step_args(p, warmup=2, runs=3, frames=32, size=224, batch=1)
    p.add_argument("--model", default="slowfast_8x8_resnet50")
    p.add_argument("--kwargs", nargs="*", default=[], metavar="KEY VALUE",
                   help="builder arguments, e.g. width 16")
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16", "fp16"])
    p.add_argument("--memory-format", default="auto",
                   choices=["auto", "channels_last", "contiguous"])
    p.add_argument("--top", type=int, default=25, help="operators printed (all are saved)")
    _execution_args(p)
    p.set_defaults(func=commands.cmd_profile)


def _add_stems(sub) -> None:
    s = sub.add_parser("stems", help="a model's RGB stem convs: padded 3-D vs the 2-D folds "
                       "(forward + weight gradient)")
    _step_args(s, warmup=3, runs=10, frames=32, size=224, batch=16)
    s.add_argument("--model", default="slowfast_8x8_resnet50")
    s.set_defaults(func=commands.cmd_stems)


def _add_compare(sub) -> None:
    c = sub.add_parser("compare", help="zoo SlowFast-R50 vs PyTorchVideo's create_slowfast")
    # A fresh process needs ~3 steps before glibc's allocator settles (see docs/benchmarks.md).
    _step_args(c, warmup=3, runs=7, frames=32, size=224, batch=1)
    c.add_argument("--width", type=int, default=64, help="slow stem width (64 = R50)")
    c.add_argument("--no-ablation", action="store_true",
                   help="skip the zoo fp32 variants that only explain the fp32 gain")
    c.add_argument("--bf16-only", action="store_true",
                   help="time only PyTorchVideo's and zoo's bf16 + channels-last steps (with "
                   "--compile: one compile instead of two)")
    _execution_args(c, " (zoo's variants; cuDNN benchmark applies to both sides)")
    c.set_defaults(func=commands.cmd_compare)


def _add_scaling(sub) -> None:
    s = sub.add_parser("scaling", help="the same short training with 1, 2, ... processes")
    s.add_argument("--out", default=OUT, help="folder for CSV/JSON/PNG")
    s.set_defaults(device="auto")  # GPUs when present, else CPU processes
    s.add_argument("--procs", type=int, nargs="+", default=[1, 2])
    s.add_argument("--threads-per-proc", type=int, default=1, help="0 = cores / processes")
    s.add_argument("--steps", type=int, default=40, help="timed steps per run")
    s.add_argument("--warmup", type=int, default=5, help="untimed steps per run")
    s.add_argument("--repeats", type=int, default=5, help="runs per count (median reported)")
    s.add_argument("--nodes", type=int, choices=(1, 2), default=1,
                   help="2: one node against two network-namespace nodes (one process each) "
                        "over a tc-shaped veth link (root; --procs is then ignored)")
    s.add_argument("--compression", nargs="+", default=["none", "bf16"], choices=COMPRESSIONS,
                   help="with --nodes 2: the DDP_CONFIG.GRAD_COMPRESSION settings to run")
    s.add_argument("--bucket-cap-mb", type=float, nargs="+", default=[],
                   help="with --nodes 2: DDP_CONFIG.BUCKET_CAP_MB values to run with each "
                        "--compression (default: the config's)")
    s.add_argument("--link-rate", default="1gbit", help="with --nodes 2: tc rate of the link")
    s.add_argument("--link-delay-ms", type=float, default=0.5,
                   help="with --nodes 2: one-way delay (tc netem, where the kernel has it)")
    add_config_arguments(s, default=QUICKSTART)
    s.set_defaults(func=commands.cmd_scaling)


def _decoders(text: str) -> List[str]:
    """``--decoders all`` or ``NAME,NAME``: the decoder names, each checked."""
    names = list(DECODERS) if text == "all" else text.split(",")
    unknown = [n for n in names if n not in DECODERS]
    if unknown:
        raise argparse.ArgumentTypeError(f"{','.join(unknown)} (choose from "
                                         f"{', '.join(DECODERS)}, or all)")
    return names


def _add_data(sub) -> None:
    d = sub.add_parser("data", help="clips/s of the training loader (build_loader)")
    d.add_argument("--out", default=OUT, help="folder for CSV/JSON/PNG")
    d.add_argument("--workers", type=int, nargs="+", default=[0, 2], help="NUM_WORKERS values")
    d.add_argument("--batches", type=int, default=20, help="timed batches per value")
    d.add_argument("--warmup", type=int, default=3, help="untimed batches per value")
    d.add_argument("--split", default="train", choices=["train", "val", "test"])
    d.add_argument("--clips-per-video", type=int, nargs="+", default=[],
                   help="DATA.CLIPS_PER_VIDEO values to compare (default: the config's)")
    d.add_argument("--clips-window", nargs="+", default=[], choices=["independent", "shared"],
                   help="DATA.CLIPS_WINDOW values to compare for more than 1 clip per video")
    d.add_argument("--batch-buffers", type=int, nargs="+", default=[],
                   help="DATA.BATCH_BUFFERS_PER_WORKER values to compare (default: the config's)")
    d.add_argument("--decode-threads", type=int, nargs="+", default=[],
                   help="DATA.DECODE_THREADS values to compare (0 = each worker's share of the "
                   "cores, -1 = FFmpeg's one per core; default: the config's)")
    d.add_argument("--resize-on", nargs="+", default=[], choices=["loader", "device"],
                   help="DATA.RESIZE_ON values to compare (device: the workers hand over "
                   "unresized cuts, the resize is left to the training step; default: the "
                   "config's)")
    d.add_argument("--rounds", type=int, default=1,
                   help="measurements per setting, in alternating order (A B B A ...)")
    d.add_argument("--generate", type=int, default=0, metavar="N",
                   help="train on N generated 10-s 340x256 H.264 videos (kept under --out) "
                   "instead of the config's list")
    d.add_argument("--gop", type=int, default=250, help="keyframe interval of --generate")
    d.add_argument("--decoders", default=None, type=_decoders, metavar="all|NAME,NAME",
                   help="also measure decoding speed per decoder (one worker; what "
                   "zoo-benchmark-data measures) on 8 generated videos, for these decoders")
    add_config_arguments(d, default=QUICKSTART)
    d.set_defaults(func=commands.cmd_data)


def _add_startup(sub) -> None:
    u = sub.add_parser("startup", help="seconds from the training command to its first iteration")
    u.add_argument("--out", default=OUT, help="folder for CSV/JSON")
    u.add_argument("--runs", type=int, default=2,
                   help="runs in a row; the first generates the synthetic data, later ones "
                   "reuse it")
    u.add_argument("--cache", default="", help="DATA.SYNTHETIC.ROOT to use (default: a new one)")
    u.add_argument("--timeout", type=float, default=300)
    add_config_arguments(u, default=QUICKSTART)
    u.set_defaults(func=commands.cmd_startup)


def _add_gpu(sub) -> None:
    from .gpu_check import STEPS

    g = sub.add_parser("gpu", help="the GPU check: cuda tests, quick start, SlowFast-R50 step "
                       "fp32/bf16 (eager and compiled), real-decoding training, activation-"
                       "checkpointing memory (see docs/benchmarks.md)")
    g.add_argument("--out", default="", help="folder for every step's log and summary.json "
                   "(default output/gpu_check/<date-time>)")
    g.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: the children see no GPU (CUDA_VISIBLE_DEVICES empty)")
    g.add_argument("--quick", action="store_true",
                   help="small sizes everywhere (a minute or two on a CPU)")
    g.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS),
                   help="the steps to run, in this order")
    g.add_argument("--step-timeout", type=float, default=600,
                   help="seconds after which a step's child process is killed")
    g.add_argument("--budget", type=float, default=None,
                   help="seconds for the whole check: a child still running then is killed "
                   "and the steps not yet started are skipped (the table still comes last)")
    g.set_defaults(func=commands.cmd_gpu)


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(DESCRIPTION, __doc__)
    sub = p.add_subparsers(dest="command", required=True)
    for add in (_add_train, _add_profile, _add_stems, _add_compare, _add_scaling, _add_data,
                _add_startup, _add_gpu):
        add(sub)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    print(f"load average before: {common.load_average()}")
    paths = args.func(args)
    print(f"load average after: {common.load_average()}")
    for path in paths:
        print(f"wrote {path}")
    if getattr(args, "table", ""):
        print(args.table)  # the GPU check's summary comes last
    return 1 if getattr(args, "failed", False) else 0


if __name__ == "__main__":
    sys.exit(main())
