"""Train the quick start on Ray Train: ``TorchTrainer`` with 2 CPU workers on a local Ray cluster
that this script starts, restarting once from the newest checkpoint if a worker dies.

    pip install -e ".[ray]"
    python examples/ray/train.py                       # the quick start, 2 workers
    python examples/ray/train.py --workers 4 TRAIN.EPOCH_NUM 8 LOG.EXP_NAME ray_run

Trailing ``KEY VALUE`` pairs override the config, as for tools/train_ddp.py. Ray starts the
workers and forms their process group; each worker runs ``zoo.integrations.ray.train``, which is
``zoo.train`` plus a hook that reports every checkpoint to Ray and a resume from the checkpoint
Ray hands back after a restart (docs/multi_node.md, "Ray Train"). The logs and metrics.jsonl go to
``LOG.BASE_PATH/LOG.EXP_NAME`` as usual; Ray keeps the checkpoints in ``--storage/--name``.
On a cluster, call ``ray.init(address="auto")`` instead (``--address auto``) and set
``--storage`` to a folder every node sees (or a cloud URI).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUICKSTART = os.path.join(ROOT, "configs", "quickstart", "slowfast_tiny_motion.yaml")


def train_func(config: dict) -> None:
    """What every Ray worker runs: zoo's training with Ray's reporting and resume."""
    from zoo.integrations.ray import train

    train(config["cfg"])


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config-file", default=QUICKSTART, help="zoo config (default: quick start)")
    p.add_argument("--workers", type=int, default=2, help="Ray Train workers (processes)")
    p.add_argument("--gpu", action="store_true", help="one GPU per worker (NCCL)")
    p.add_argument("--storage", default=os.path.join("output", "ray"),
                   help="Ray's run storage: reported checkpoints and results (default: "
                        "output/ray)")
    p.add_argument("--name", default="quickstart", help="the Ray run's name (a folder in "
                                                         "--storage)")
    p.add_argument("--max-failures", type=int, default=1,
                   help="worker failures Ray recovers from, each time from the newest checkpoint")
    p.add_argument("--address", default=None,
                   help="a running Ray cluster ('auto'); default: start a local one")
    p.add_argument("opts", nargs=argparse.REMAINDER, help="KEY VALUE config overrides")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from zoo.launch.setup import job_config

    # Loaded and checked once here; the generated dataset is made here, before any worker starts.
    cfg = job_config(args.config_file, args.opts)
    started = not ray.is_initialized()  # a caller may have started Ray already
    if started and args.address:
        ray.init(address=args.address)
    elif started:  # a local cluster: one CPU per worker, a small object store (configs travel)
        ray.init(num_cpus=args.workers, object_store_memory=128 * 1024 ** 2,
                 include_dashboard=False)
    try:
        trainer = TorchTrainer(
            train_func,
            train_loop_config={"cfg": cfg},
            scaling_config=ScalingConfig(num_workers=args.workers, use_gpu=args.gpu),
            run_config=RunConfig(
                name=args.name,
                storage_path=os.path.abspath(args.storage),
                failure_config=FailureConfig(max_failures=args.max_failures),
                checkpoint_config=CheckpointConfig(num_to_keep=2),
            ),
        )
        result = trainer.fit()
    finally:
        if started:
            ray.shutdown()
    print(f"Ray run finished: metrics {result.metrics}; newest checkpoint "
          f"{result.checkpoint.path if result.checkpoint else None}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
