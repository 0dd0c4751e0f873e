"""What every worker does first: output folder, logging, seeding, device, user modules."""

from __future__ import annotations

import logging
import os
import time
from contextlib import contextmanager
from typing import Iterator, Mapping, Optional, Sequence, Tuple

import torch

from ..config import cfg_to_yaml
from ..utils import comm
from ..utils.env import import_extra_modules, seed_all, set_num_threads
from ..utils.logger import setup_logger
from ..utils.node_process import talks_on_console
from .topology import LaunchError

# SageMaker's checkpoint folder inside the training container (the estimator's
# checkpoint_local_path default): SageMaker copies it from checkpoint_s3_uri when the job starts
# and syncs what is written there back to S3. A module constant, so that a test can point it
# elsewhere.
SAGEMAKER_CHECKPOINT_DIR = "/opt/ml/checkpoints"


def output_dir(cfg) -> str:
    """BASE_PATH/EXP_NAME: the run's folder (config.yaml, logs, metrics; checkpoints unless
    ``CONFIG.LOG.CHECKPOINT_DIR`` or the engine puts them elsewhere, see :func:`checkpoint_dir`)."""
    return os.path.join(cfg.CONFIG.LOG.BASE_PATH, cfg.CONFIG.LOG.EXP_NAME)


def set_aside_outputs(out_dir: str, names: Sequence[str], what: str) -> Optional[str]:
    """Moves those of the files ``names`` that ``out_dir`` holds (an earlier run's results that
    this run writes anew) into ``<out_dir>/earlier_<what>_<UTC time>/``, returned (None when
    there are none): a run that stops leaves no earlier results where its own belong, and
    nothing is deleted. One log line names them."""
    found = [n for n in names if os.path.isfile(os.path.join(out_dir, n))]
    if not found:
        return None
    stamp = time.strftime(f"earlier_{what}_%Y%m%d-%H%M%S", time.gmtime())
    aside, n = os.path.join(out_dir, stamp), 1
    while os.path.exists(aside):  # set aside twice within a second
        n += 1
        aside = os.path.join(out_dir, f"{stamp}-{n}")
    os.makedirs(aside)
    for name in found:
        os.replace(os.path.join(out_dir, name), os.path.join(aside, name))
    logging.getLogger("zoo").info("moved the earlier %s's %s to %s", what, ", ".join(found),
                                  aside)
    return aside


def checkpoint_dir(cfg, env: Optional[Mapping[str, str]] = None) -> Tuple[str, str]:
    """Where this run's checkpoints are written and looked for, and why there.

    ``CONFIG.LOG.CHECKPOINT_DIR`` when set; else the folder of the engine that started the job,
    where it defines one (SageMaker, recognised by ``SM_CURRENT_HOST``:
    :data:`SAGEMAKER_CHECKPOINT_DIR`); else ``BASE_PATH/EXP_NAME/<SAVE_DIR>``.

    Returns:
        ``(folder, source)``: source is ``"CONFIG.LOG.CHECKPOINT_DIR"``, ``"SageMaker
        (SM_CURRENT_HOST is set)"`` or ``""`` for the run's own folder.
    """
    env = os.environ if env is None else env
    log = cfg.CONFIG.LOG
    if log.CHECKPOINT_DIR:
        return str(log.CHECKPOINT_DIR), "CONFIG.LOG.CHECKPOINT_DIR"
    if env.get("SM_CURRENT_HOST"):
        return SAGEMAKER_CHECKPOINT_DIR, "SageMaker (SM_CURRENT_HOST is set)"
    return os.path.join(output_dir(cfg), log.SAVE_DIR), ""


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


def with_model_normalization(cfg, announce: bool = False):
    """``cfg`` with empty ``DATA.MEAN`` / ``STD`` filled from the pretrained weights' Hugging Face
    preprocessor file, else the model's facts (:func:`zoo.models.input_normalization`; with
    ``announce`` it logs what it took from the file), after importing the user's modules
    (``CONFIG.EXTRA_MODULES``) that may register the model. A config that has them already is
    returned as it is.

    Raises:
        RegistryError: no model of that name (one line).
        WeightsError: the preprocessor file cannot be read (one line).
    """
    from ..data import fill_normalization
    from ..models import MODEL_REGISTRY, input_normalization

    import_extra_modules(cfg.CONFIG.EXTRA_MODULES)
    MODEL_REGISTRY.get(cfg.CONFIG.MODEL.NAME)  # an unknown name: one line, before anything else
    return fill_normalization(cfg, input_normalization(cfg, announce))


def job_config(cfg, overrides: Sequence[str] = (), announce: bool = True):
    """The config ``zoo.train`` / ``zoo.test`` run with, from what their caller passed.

    Args:
        cfg: A config (a yacs ``CfgNode``, e.g. from :func:`zoo.config.load_config`) or the path
            of a YAML file (loaded over the defaults, with its ``_BASE_`` files).
        overrides: ``KEY VALUE`` pairs applied on top, as on the command line.
        announce: Log where ``DATA.MEAN`` / ``STD`` came from when a preprocessor file set them,
            from the first process of each node only (``LOCAL_RANK`` or ``SLURM_LOCALID`` 0).
            The command line's workers pass False: it said so before it started them.

    The user's modules (``CONFIG.EXTRA_MODULES``) are imported, empty ``DATA.MEAN`` / ``STD``
    filled from the model, and the generated dataset prepared when ``DATA.SYNTHETIC.ENABLE`` is
    on, as the command line does before it starts workers; each step leaves a config that had it
    already unchanged. Returns a frozen config.

    Raises:
        ConfigError: a bad key or value (one line naming it).
        TypeError: ``cfg`` is neither a config nor a path.
    """
    from yacs.config import CfgNode

    from ..config import load_config, merge_overrides, validate_config
    from ..data import prepare_synthetic

    if isinstance(cfg, (str, os.PathLike)):
        cfg = load_config(os.fspath(cfg), list(overrides))
    elif isinstance(cfg, CfgNode):
        if overrides:
            cfg = cfg.clone()
            cfg.defrost()
            merge_overrides(cfg, list(overrides))
            validate_config(cfg)
            cfg.freeze()
    else:
        raise TypeError(f"expected a config (CfgNode) or the path of a YAML file, got "
                        f"{type(cfg).__name__}")
    return prepare_synthetic(with_model_normalization(cfg, announce and talks_on_console()))


@contextmanager
def this_process(cfg) -> Iterator[None]:
    """Run the block as one process of a job that zoo's launcher may not have started.

    Under zoo's launcher (DDP_CONFIG, torchrun, Slurm: it recorded the device in
    ``zoo.utils.comm``) nothing changes. Otherwise the caller set the job up, or there is none:
    the rank and world size come from the process group the caller initialised
    (``torch.distributed``; none = one process), the device from ``LOCAL_RANK`` (CUDA device
    ``LOCAL_RANK`` modulo the visible GPUs when CUDA is available, else the CPU), and
    ``DDP_CONFIG.THREADS_PER_PROC`` > 0 sets torch's threads (0 leaves the caller's setting).

    Raises:
        LaunchError: ``WORLD_SIZE`` > 1 in the environment but no process group: the caller
            meant a job of several processes and did not join one.
    """
    if comm.device_index_recorded():
        yield
        return
    world = os.environ.get("WORLD_SIZE", "1")
    if not comm.is_dist() and world.isdigit() and int(world) > 1:
        raise LaunchError(
            f"WORLD_SIZE={world} in the environment but no process group: call "
            "torch.distributed.init_process_group() before zoo.train / zoo.test, or start the "
            "job with tools/train_ddp.py")
    index = -1
    if torch.cuda.is_available():
        index = comm.get_local_rank() % torch.cuda.device_count()
        torch.cuda.set_device(index)
    if cfg.DDP_CONFIG.THREADS_PER_PROC > 0:
        set_num_threads(int(cfg.DDP_CONFIG.THREADS_PER_PROC))
    comm.set_device_index(index)
    try:
        yield
    finally:
        comm.set_device_index(None)
