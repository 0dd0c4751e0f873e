"""Multigrid vs the plain schedule on the quick-start motion data: wall time and validation top-1.

    python -m benchmarks.multigrid [--epochs 16] [--threads 1] [--out DIR]

Trains the quick-start SlowFast (configs/quickstart/slowfast_tiny_motion.yaml) in one CPU
process twice with the same settings, ``CONFIG.TRAIN.MULTIGRID`` "" and "long+short" (the run
of tests/test_multigrid.py's slow test, :func:`train_args`), and prints the machine, each run's
wall time, training time (the epochs alone), optimizer steps and final validation top-1, and
the ratios. The data is generated before the timings. Figures: docs/benchmarks.md#multigrid.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

CONFIG = "configs/quickstart/slowfast_tiny_motion.yaml"

# The quick-start clip (16 frames, 56x56) and AdamW on 60 training / 50 validation videos per
# class, with a Step schedule (multigrid's long cycle re-times its steps) and a batch of 4 so
# that the multigrid run still takes a few hundred optimizer steps. LR 0.001: the long cycle
# multiplies it by its batch factor (4 here), and AdamW diverges at 4 x the quick start's 0.003.
# One process with one thread: a second torch thread on a shared 2-core machine can make a step
# ten times slower whenever another process takes a core.
SETTINGS = ["DATA.SYNTHETIC.TRAIN_PER_CLASS", "60", "DATA.SYNTHETIC.VAL_PER_CLASS", "50",
            "DDP_CONFIG.NUM_CPU_PROCS", "1", "VAL.FREQ", "100", "TRAIN.BATCH_SIZE", "4",
            "TRAIN.LR", "0.001", "TRAIN.WARMUP_START_LR", "0.0001",
            "TRAIN.LR_POLICY", "Step", "TRAIN.LR_FACTORS", "[1.0, 0.1]",
            "TRAIN.MULTIGRID_LONG_CYCLE_FACTORS", "[[0.5, 0.7071], [1.0, 1.0]]"]


def train_args(mode: str, epochs: int, out: str, cache: str, threads: int = 1) -> List[str]:
    """tools/train_ddp.py's arguments for one run (``mode`` "" = the plain schedule): output in
    ``out``/``run_name(mode)``, the LR step at 3/4 of the epochs."""
    return ["--config-file", CONFIG, "DATA.SYNTHETIC.ROOT", cache, "LOG.BASE_PATH", out,
            "LOG.EXP_NAME", run_name(mode), "TRAIN.EPOCH_NUM", str(epochs),
            "TRAIN.LR_MILESTONE", f"[{epochs * 3 // 4}]", "TRAIN.MULTIGRID", mode or '""',
            "DDP_CONFIG.THREADS_PER_PROC", str(threads), *SETTINGS]


def run_name(mode: str) -> str:
    return mode.replace("+", "_") or "plain"


def results(run_dir: str) -> Dict[str, float]:
    """The last validation record of a run, its epochs' summed training time and its steps."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    val = [r for r in records if r.get("split") == "val"][-1]
    return {"top1": val["top1"], "epochs": val["epoch"],
            "train_s": sum(r["time_s"] for r in records if r.get("split") == "train_epoch"),
            "steps": max(r["iter"] for r in records if r.get("split") == "train")}


def run(mode: str, epochs: int, out: str, cache: str, threads: int) -> Dict[str, float]:
    cmd = [sys.executable, "tools/train_ddp.py", *train_args(mode, epochs, out, cache, threads)]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return {"mode": mode or "plain", "wall_s": time.perf_counter() - start,
            **results(os.path.join(out, run_name(mode)))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the process")
    parser.add_argument("--out", default=tempfile.mkdtemp(prefix="zoo_multigrid_"))
    args = parser.parse_args()
    import torch

    from benchmarks.common import machine_info
    from zoo.config import load_config
    from zoo.data import prepare_synthetic

    cache = os.path.join(args.out, "data")
    prepare_synthetic(load_config(CONFIG, train_args("", args.epochs, args.out, cache)[2:]))
    info = machine_info(torch.device("cpu"))
    print(f"machine: {info['cpu']}, {info['cores']} cores, torch {info['torch']}, "
          f"{args.threads} thread(s), load average {info['load_average_start']}")
    rows = [run(mode, args.epochs, args.out, cache, args.threads) for mode in ("", "long+short")]
    for r in rows:
        print(f"{r['mode']:>10}: wall {r['wall_s']:6.1f} s, training {r['train_s']:6.1f} s, "
              f"{r['epochs']} epochs, {r['steps']} steps, val top-1 {r['top1']:.1f}%")
    plain, multi = rows
    print(f"plain / long+short: wall x{plain['wall_s'] / multi['wall_s']:.2f}, training "
          f"x{plain['train_s'] / multi['train_s']:.2f}; top-1 {multi['top1'] - plain['top1']:+.1f} "
          f"points; load average at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
