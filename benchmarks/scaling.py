"""DDP scaling: the same short training run with 1, 2, ... worker processes (or GPUs).

Each process count runs in a fresh interpreter (:func:`run_one`) that starts its workers with
:func:`zoo.launch.launch` exactly as ``zoo-train`` (``tools/train_ddp.py``) does: CPU processes
(gloo) with ``DDP_CONFIG.NUM_CPU_PROCS`` and ``THREADS_PER_PROC``, or one process per visible GPU
(``CUDA_VISIBLE_DEVICES`` limits the count). Every worker builds the config's model with
``prepare_model`` (DDP) and trains it with :class:`~zoo.train.step.TrainStep` on a fixed batch
of random clips of the config's shape held in memory, so the loader is not measured
(``zoo-benchmark data`` measures it). The per-process batch is the config's ``TRAIN.BATCH_SIZE``
(weak scaling, as in the seed's GPU table); throughput is clips per second of all processes.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

import torch

from zoo.cli.configure import with_extra_modules
from zoo.cli.parser import tool_parser
from zoo.config import load_config
from zoo.launch.job import resolve_job
from zoo.launch.launch import launch
from zoo.solver import build_lr_scheduler, build_optimizer
from zoo.train.checkpoint import unwrap
from zoo.train.model_setup import prepare_model
from zoo.train.precision import execution_settings
from zoo.train.step import TrainStep
from zoo.utils import comm
from zoo.utils.env import import_extra_modules
from zoo.utils.logger import setup_logger

from . import child_env
from .common import sync


def _worker(cfg, steps: int, warmup: int, result_path: str) -> None:
    setup_logger(None, comm.get_rank())
    import_extra_modules(cfg.CONFIG.EXTRA_MODULES)  # a user model the config names
    device = comm.get_device()
    torch.manual_seed(cfg.CONFIG.SEED)
    model = prepare_model(cfg, device, logging.getLogger("zoo"))
    world = comm.get_world_size()
    train, data = cfg.CONFIG.TRAIN, cfg.CONFIG.DATA
    optimizer = build_optimizer(cfg, unwrap(model))
    scheduler = build_lr_scheduler(cfg, optimizer, steps + warmup, world)
    precision, channels_last = execution_settings(train, device)
    step = TrainStep(model, optimizer, scheduler, device, data.NUM_CLASSES, precision=precision,
                     channels_last=channels_last, accum_steps=train.ACCUM_STEPS)
    g = torch.Generator().manual_seed(cfg.CONFIG.SEED + comm.get_rank())
    video = any(isinstance(m, torch.nn.Conv3d) for m in unwrap(model).modules())
    shape = (train.BATCH_SIZE, 3) + ((data.CLIP_LEN,) if video else ()) + (data.CROP_SIZE,) * 2
    clips = torch.randn(shape, generator=g)
    labels = torch.randint(0, data.NUM_CLASSES, (train.BATCH_SIZE,), generator=g)
    for _ in range(warmup):
        step(clips, labels)
    sync(device)
    comm.synchronize()
    start, start_cpu = time.perf_counter(), time.thread_time()
    for _ in range(steps):
        loss = step(clips, labels)
    sync(device)
    comm.synchronize()
    seconds = time.perf_counter() - start
    # The CPU time of this (the computing) thread: with one torch thread, all of the forward and
    # backward work; wall time beyond it is time the step waited (for its gradients to arrive)
    # or was not scheduled.
    cpu_seconds = time.thread_time() - start_cpu
    if comm.is_main_process():
        result = {
            "processes": world, "threads_per_proc": torch.get_num_threads(),
            "device": device.type, "precision": precision, "channels_last": channels_last,
            "batch_per_proc": train.BATCH_SIZE, "steps": steps, "seconds": round(seconds, 4),
            "compression": cfg.DDP_CONFIG.GRAD_COMPRESSION,
            "bucket_cap_mb": cfg.DDP_CONFIG.BUCKET_CAP_MB,
            "clips_per_s": round(steps * train.BATCH_SIZE * world / seconds, 3),
            "s_per_step": round(seconds / steps, 4),
            "thread_cpu_s_per_step": round(cpu_seconds / steps, 4),
            "last_loss": round(float(loss), 4),
        }
        with open(result_path, "w", encoding="utf-8") as f:
            json.dump(result, f)


# A fresh interpreter per run; "-c" rather than "-m" so the worker pickles by its module name.
_ENTRY = "import sys; from benchmarks.scaling import main; main(sys.argv[1:])"


def _child_env(procs: int) -> Dict[str, str]:
    env = child_env(os.environ)
    if torch.cuda.is_available():
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(procs))
    return env


def _command(config_file: str, opts: Sequence[str], procs: int, threads: int, steps: int,
             warmup: int, result: str, extra_modules: Sequence[str],
             world: Sequence[str] = ()) -> List[str]:
    cmd = [sys.executable, "-c", _ENTRY, "--config-file", config_file,
           "--procs", str(procs), "--threads", str(threads), "--steps", str(steps),
           "--warmup", str(warmup), "--result", result]
    if world:
        cmd += ["--world", *world]
    if extra_modules:
        cmd += ["--extra-modules", *extra_modules]
    return cmd + ["--", *opts]


def _read_result(result: str, what: str, output: str) -> Dict[str, Any]:
    if not os.path.isfile(result):
        raise RuntimeError(f"scaling run with {what} failed:\n{output[-3000:]}")
    with open(result, encoding="utf-8") as f:
        return json.load(f)


def run_one(config_file: str, opts: Sequence[str], procs: int, threads: int, steps: int,
            warmup: int, timeout: float = 600,
            extra_modules: Sequence[str] = ()) -> Dict[str, Any]:
    """One process count in a fresh interpreter; returns its result row.

    Raises:
        RuntimeError: the run failed (its output is in the message).
    """
    with tempfile.TemporaryDirectory(prefix="zoo_scaling_") as tmp:
        result = os.path.join(tmp, "result.json")
        cmd = _command(config_file, opts, procs, threads, steps, warmup, result, extra_modules)
        r = subprocess.run(cmd, env=_child_env(procs), capture_output=True, text=True,
                           timeout=timeout)
        return _read_result(result if r.returncode == 0 else "", f"{procs} processes",
                            r.stdout + r.stderr)


def scaling_throughput(config_file: str, opts: Sequence[str] = (),
                       procs: Sequence[int] = (1, 2), threads: int = 1, steps: int = 30,
                       warmup: int = 5, repeats: int = 3,
                       extra_modules: Sequence[str] = ()) -> List[Dict[str, Any]]:
    """Throughput, speed-up and efficiency for each process count.

    Speed-up is over the first count (1 by default); efficiency = speed-up / (count / first).

    The counts take turns ``repeats`` times (1, 2, 1, 2, ...) so a busy moment of the machine
    hits them alike; each count's figure is the median of its repeats.

    Args:
        config_file: A training YAML (its model, batch, clip shape and precision are used).
        opts: ``KEY VALUE`` overrides.
        procs: Process counts (CPU processes, or GPUs where CUDA is available).
        threads: Torch threads per CPU process (0 = cores / processes).
        steps, warmup: Timed and untimed steps per run.
        repeats: Runs per process count.
        extra_modules: User files or modules to import (``--extra-modules``).
    """
    runs: Dict[int, List[Dict[str, Any]]] = {n: [] for n in procs}
    for _ in range(repeats):
        for n in procs:
            runs[n].append(run_one(config_file, opts, n, threads, steps, warmup,
                                   extra_modules=extra_modules))
    rows = []
    for n in procs:
        ordered = sorted(runs[n], key=lambda r: r["clips_per_s"])
        row = dict(ordered[len(ordered) // 2])
        row["clips_per_s_all_runs"] = " ".join(str(r["clips_per_s"]) for r in runs[n])
        rows.append(row)
    for row in rows:
        row["speedup"] = round(row["clips_per_s"] / rows[0]["clips_per_s"], 3)
        row["efficiency"] = round(row["speedup"] * rows[0]["processes"] / row["processes"], 3)
    return rows


def main(argv: Optional[List[str]] = None) -> None:
    """Entry point of one scaling run (started by :func:`run_one`, or on each node of a
    two-node run with ``--world ADDR0 ADDR1 PORT``)."""
    p = tool_parser("One run of the DDP scaling benchmark.", config=True, required=True)
    p.add_argument("--procs", type=int, required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--result", required=True)
    p.add_argument("--world", nargs=3, default=None, metavar=("ADDR0", "ADDR1", "PORT"),
                   help="two nodes: their addresses (node 0 first) and the rendezvous port")
    args = p.parse_args(argv)
    if args.world:
        addr0, addr1, port = args.world
        where = ["DDP_CONFIG.WORLD_URLS", f"['{addr0}', '{addr1}']", "DDP_CONFIG.WORLD_SIZE", "2",
                 "DDP_CONFIG.AUTO_RANK_MATCH", "True",
                 "DDP_CONFIG.DIST_URL", f"tcp://{addr0}:{port}"]
    else:
        where = ["DDP_CONFIG.DIST_URL", "tcp://127.0.0.1:0", "DDP_CONFIG.WORLD_SIZE", "1"]
    with tempfile.TemporaryDirectory(prefix="zoo_scaling_run_") as tmp:
        cfg = load_config(args.config_file, [
            *args.opts, "DDP_CONFIG.NUM_CPU_PROCS", str(args.procs),
            "DDP_CONFIG.THREADS_PER_PROC", str(args.threads), *where, "LOG.BASE_PATH", tmp,
        ])
        cfg = with_extra_modules(cfg, args.extra_modules)
        launch(_worker, resolve_job(cfg), cfg, args.steps, args.warmup, args.result)


if __name__ == "__main__":
    main()
