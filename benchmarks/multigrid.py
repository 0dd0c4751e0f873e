"""Multigrid vs the plain schedule on the quick-start motion data: wall time and validation top-1.

    python -m benchmarks.multigrid [--epochs 8] [--out DIR]

Trains the quick-start SlowFast (configs/quickstart/slowfast_tiny_motion.yaml, one CPU process)
twice, with ``CONFIG.TRAIN.MULTIGRID`` "" and "long+short" (the settings of
tests/test_multigrid.py's slow test), and prints the machine, both wall times and both final
validation accuracies. Figures: docs/benchmarks.md#multigrid.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

RUN = ["DATA.SYNTHETIC.TRAIN_PER_CLASS", "60", "DATA.SYNTHETIC.VAL_PER_CLASS", "20",
       "DDP_CONFIG.NUM_CPU_PROCS", "1", "VAL.FREQ", "100", "TRAIN.BATCH_SIZE", "8",
       "TRAIN.LR_POLICY", "Step", "TRAIN.LR_MILESTONE", "[6]", "TRAIN.LR_FACTORS", "[1.0, 0.1]",
       "TRAIN.MULTIGRID_LONG_CYCLE_FACTORS", "[[0.5, 0.7071], [1.0, 1.0]]"]


def run(mode: str, epochs: int, out: str, cache: str) -> dict:
    name = mode.replace("+", "_") or "plain"
    cmd = [sys.executable, "tools/train_ddp.py", "--config-file",
           "configs/quickstart/slowfast_tiny_motion.yaml", "DATA.SYNTHETIC.ROOT", cache,
           "LOG.BASE_PATH", out, "LOG.EXP_NAME", name, "TRAIN.EPOCH_NUM", str(epochs),
           "TRAIN.MULTIGRID", mode or '""', *RUN]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    with open(os.path.join(out, name, "metrics.jsonl")) as f:
        val = [r for r in map(json.loads, f) if r.get("split") == "val"][-1]
    return {"mode": mode or "plain", "seconds": seconds, "top1": val["top1"],
            "epochs": val["epoch"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--out", default=tempfile.mkdtemp(prefix="zoo_multigrid_"))
    args = parser.parse_args()
    cache = os.path.join(args.out, "data")
    run("", 1, args.out, cache)  # generate the data once, outside the timings
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}")
    for mode in ("", "long+short"):
        r = run(mode, args.epochs, args.out, cache)
        print(f"{r['mode']:>10}: {r['seconds']:7.1f} s, {r['epochs']} epochs, "
              f"val top-1 {r['top1']:.1f}%")


if __name__ == "__main__":
    main()
