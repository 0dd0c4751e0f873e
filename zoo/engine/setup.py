"""What every worker does first: output folder, logging, seeding, device, user modules."""

from __future__ import annotations

import logging
import os

import torch

from ..config import cfg_to_yaml
from ..utils import comm
from ..utils.env import import_extra_modules, seed_all
from ..utils.logger import setup_logger


def output_dir(cfg) -> str:
    """BASE_PATH/EXP_NAME: the run's folder (config.yaml, logs, metrics, checkpoints)."""
    return os.path.join(cfg.CONFIG.LOG.BASE_PATH, cfg.CONFIG.LOG.EXP_NAME)


def worker_setup(cfg, write_config: bool = True) -> tuple:
    """Prepare this process; returns ``(logger, device, out_dir)``.

    Rank 0 writes the merged config to ``out_dir/config.yaml``.
    """
    out_dir = output_dir(cfg)
    rank = comm.get_rank()
    logger = setup_logger(out_dir, rank)
    import_extra_modules(cfg.CONFIG.EXTRA_MODULES)
    seed_all(cfg.CONFIG.SEED + rank)
    gpu = cfg.DDP_CONFIG.GPU
    use_gpu = gpu >= 0 and torch.cuda.is_available()
    device = torch.device(f"cuda:{gpu}") if use_gpu else torch.device("cpu")
    if write_config and comm.is_main_process():
        with open(os.path.join(out_dir, "config.yaml"), "w", encoding="utf-8") as f:
            f.write(cfg_to_yaml(cfg))
    logger.info(
        "rank %d/%d on %s, %d torch threads, output %s",
        rank, comm.get_world_size(), device, torch.get_num_threads(), out_dir,
    )
    return logging.getLogger("zoo"), device, out_dir
