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


def with_job_layout(cfg):
    """``cfg`` with DDP_CONFIG.GPU_WORLD_SIZE / GPU_WORLD_RANK / GPU filled in from zoo.utils.comm.

    The code asks comm for ranks and devices; these keys only record the layout for the reader
    of config.yaml and of a checkpoint's config. DDP_CONFIG.JOB_TOKEN is blanked.
    """
    cfg = cfg.clone()
    cfg.defrost()
    cfg.DDP_CONFIG.GPU_WORLD_SIZE = comm.get_world_size()
    cfg.DDP_CONFIG.GPU_WORLD_RANK = comm.get_rank()
    cfg.DDP_CONFIG.GPU = comm.get_device_index()
    cfg.DDP_CONFIG.JOB_TOKEN = ""  # a secret: never written to config.yaml or a checkpoint
    cfg.freeze()
    return cfg


def worker_setup(cfg, write_config: bool = True) -> tuple:
    """Prepare this process; returns ``(logger, device, out_dir)``.

    Rank 0 writes the merged config, with the job's layout, to ``out_dir/config.yaml``.
    """
    out_dir = output_dir(cfg)
    rank = comm.get_rank()
    logger = setup_logger(out_dir, rank)
    import_extra_modules(cfg.CONFIG.EXTRA_MODULES)
    seed_all(cfg.CONFIG.SEED + rank)
    device = comm.get_device()
    if write_config and comm.is_main_process():
        with open(os.path.join(out_dir, "config.yaml"), "w", encoding="utf-8") as f:
            f.write(cfg_to_yaml(with_job_layout(cfg)))
    logger.info(
        "rank %d/%d on %s, %d torch threads, output %s",
        rank, comm.get_world_size(), device, torch.get_num_threads(), out_dir,
    )
    return logging.getLogger("zoo"), device, out_dir
