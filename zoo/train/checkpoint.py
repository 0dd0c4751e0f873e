"""Training checkpoints: written by rank 0 only, atomically; resumed by every rank.

The file format, safe loading and atomic writes live in :mod:`zoo.utils.checkpoint_io` (shared
with the checkpoint converter) and are re-exported here. A training checkpoint adds
``best_top1``, after a validation ``best_value`` (the best CONFIG.TRAIN.BEST_METRIC), and, with
EMA, ``ema`` to the standard keys; ``rng`` holds one entry per rank.
:func:`load_training_state` is the resume: it restores everything a checkpoint holds.

Files: ``epoch_N.pth`` after N epochs (and ``best.pth``, a hard link to the best epoch's file);
``preempt_epoch{E}_iter{N}.pth`` when a preemption signal stopped epoch E after N optimizer steps
(it also holds ``epoch_iter``, the batches of epoch E trained). :func:`latest_checkpoint` orders
them by where training was. A write cut short leaves ``NAME.tmp.PID``, never taken for a
checkpoint and removed by the next run (:func:`remove_partial_writes`).
"""

from __future__ import annotations

import glob
import logging
import os
import random
import time
from typing import Any, Dict, List, NamedTuple, Optional, Sequence

import numpy as np
import torch
import torch.nn as nn

from ..utils import comm
from ..utils.checkpoint_io import (  # noqa: F401  (re-exported: the training checkpoint API)
    PREEMPT_NAME,
    PREEMPT_RE,
    CheckpointError,
    CheckpointWriteError,
    atomic_link,
    atomic_save,
    checkpoint_position,
    epoch_checkpoints,
    latest_checkpoint,
    load_checkpoint,
    make_checkpoint,
    remove_partial_writes,
    write_failure,
)
from . import sharding
from .sharding import is_sharded  # noqa: F401  (re-exported for the trainer and hooks)


def unwrap(model: nn.Module) -> nn.Module:
    """The bare model inside a DDP (or similar) wrapper."""
    return model.module if hasattr(model, "module") else model


def rng_state() -> Dict[str, Any]:
    """RNG states of this process as plain Python values (they pass through all_gather_object
    and ``weights_only`` loading unchanged): Python, NumPy, torch's CPU generator and, once this
    process has used CUDA, its current device's generator (dropout on the GPU draws from it)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state().tolist(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state().tolist()
    return state


def set_rng_state(state: Dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(torch.tensor(state["cuda"], dtype=torch.uint8))


def gather_rng_states() -> List[Dict[str, Any]]:
    """Every rank's RNG states, indexed by rank (a collective: call it on all ranks)."""
    return comm.all_gather_object(rng_state())


def save_checkpoint(
    save_dir: str,
    state: Dict[str, Any],
    epoch: int,
    keep_last: int = 0,
    is_best: bool = False,
) -> Optional[str]:
    """Rank 0 writes ``save_dir/epoch_{epoch}.pth``; when ``is_best``, ``best.pth`` becomes a
    second name of that file (see :func:`~zoo.utils.checkpoint_io.atomic_link`: written once).

    ``keep_last`` > 0 deletes older epoch files beyond the newest ``keep_last``; ``best.pth`` is
    never deleted by that. Other ranks return None without writing.
    """
    if not comm.is_main_process():
        return None
    path = os.path.join(save_dir, f"epoch_{epoch}.pth")
    try:
        os.makedirs(save_dir, exist_ok=True)
    except OSError as e:
        raise write_failure(path, e) from e
    atomic_save(state, path)
    if is_best:
        atomic_link(path, os.path.join(save_dir, "best.pth"))
    if keep_last > 0:
        for old in epoch_checkpoints(save_dir)[:-keep_last]:
            os.remove(old)
    _remove_preempt_checkpoints(save_dir, before=(epoch, 0))
    return path


def save_preempt_checkpoint(save_dir: str, state: Dict[str, Any]) -> Optional[str]:
    """Rank 0 writes the mid-epoch checkpoint ``state`` (with ``epoch`` epochs completed and
    ``epoch_iter`` batches of the next one trained) and removes older mid-epoch ones.

    Returns:
        The path written (None on other ranks).
    """
    if not comm.is_main_process():
        return None
    path = os.path.join(save_dir, PREEMPT_NAME.format(epoch=int(state["epoch"]) + 1,
                                                      iteration=int(state["iteration"])))
    try:
        os.makedirs(save_dir, exist_ok=True)
    except OSError as e:
        raise write_failure(path, e) from e
    atomic_save(state, path)
    _remove_preempt_checkpoints(save_dir, before=checkpoint_position(path), keep=path)
    return path


def _remove_preempt_checkpoints(save_dir: str, before: tuple, keep: str = "") -> None:
    """Delete the mid-epoch checkpoints older than ``before``: they only exist to resume from,
    and a newer checkpoint now does that."""
    for path in glob.glob(os.path.join(save_dir, "preempt_epoch*_iter*.pth")):
        pos = checkpoint_position(path)
        if pos is not None and path != keep and pos < before:
            os.remove(path)


def training_state(model, optimizer, scheduler, scaler, ema, epoch: int, iteration: int,
                   cfg_yaml: str, rng: List[Dict[str, Any]], best_top1: float,
                   epoch_iter: int = 0, classes: Sequence[str] = (),
                   stale_validations: int = 0,
                   best_value: Optional[float] = None) -> Dict[str, Any]:
    """The training checkpoint dict (see :func:`zoo.utils.checkpoint_io.make_checkpoint`).

    ``epoch_iter`` > 0 marks a mid-epoch checkpoint: that many batches of epoch ``epoch + 1`` were
    trained (saved as the ``epoch_iter`` key; epoch-end checkpoints do not have it). For a model
    sharded with FSDP2 every rank must call it (the full state is gathered to rank 0, whose
    result is the one to write). ``classes``: the training data's class names, kept as the
    ``classes`` key when given. ``stale_validations``: the validations in a row since the last new
    best (what CONFIG.TRAIN.EARLY_STOP_PATIENCE counts), kept when > 0. ``best_value``: the best
    validation CONFIG.TRAIN.BEST_METRIC so far (which the checkpoint's config names), kept when
    there is one.
    """
    extra: Dict[str, Any] = {"best_top1": best_top1}
    if best_value is not None:
        extra["best_value"] = float(best_value)
    if stale_validations > 0:
        extra["stale_validations"] = int(stale_validations)
    if classes:
        extra["classes"] = [str(c) for c in classes]
    if epoch_iter > 0:
        extra["epoch_iter"] = epoch_iter
    if ema is not None:
        extra["ema"] = ema.state_dict()
    if is_sharded(model):  # gathered to rank 0 (a collective): the same layout as unsharded
        model_sd = sharding.model_state(model)
        optim_sd = sharding.optimizer_state(model, optimizer) if optimizer is not None else None
    else:
        model_sd = unwrap(model).state_dict()
        optim_sd = optimizer.state_dict() if optimizer is not None else None
    return make_checkpoint(
        model_sd, cfg_yaml,
        optimizer=optim_sd,
        scheduler=scheduler.state_dict() if scheduler is not None else None,
        scaler=scaler.state_dict() if scaler is not None else None,
        epoch=epoch, iteration=iteration, rng=rng, **extra)


def find_resume_checkpoint(cfg, save_dir: str, logger: logging.Logger) -> Optional[str]:
    """RESUME_EPOCH's checkpoint, else (with AUTO_RESUME) the newest one, else None."""
    train = cfg.CONFIG.TRAIN
    if train.RESUME_EPOCH >= 0:
        return os.path.join(save_dir, f"epoch_{train.RESUME_EPOCH}.pth")
    if train.AUTO_RESUME:
        path = latest_checkpoint(save_dir)
        if path is None:
            logger.info("AUTO_RESUME: no checkpoint in %s yet; starting fresh", save_dir)
        return path
    return None


def agree_on_resume(path: Optional[str], save_dir: str) -> None:
    """Stop every rank unless all resume from the same checkpoint file name, or all start fresh.

    Only rank 0 writes checkpoints, so a node whose ``LOG.BASE_PATH`` is not the folder rank 0
    wrote to finds none (or an older one) there; training on would all-reduce the gradients of
    two different models into one wrong one. Every rank calls this (a collective).

    Raises:
        CheckpointError: One line naming rank 0's choice and the first rank that differs.
    """
    if comm.get_world_size() == 1:
        return
    import socket

    name = None if path is None else os.path.basename(path)
    if path is not None and not os.path.isfile(path):
        name = f"{name} (missing)"
    choices = comm.all_gather_object((name, save_dir, socket.gethostname()))
    first, where, _ = choices[0]
    for rank, (other, folder, host) in enumerate(choices):
        if other != first:
            raise CheckpointError(
                f"rank 0 {_choice(first, where)} but rank {rank} (on {host}) "
                f"{_choice(other, folder)}: "
                "only rank 0 writes checkpoints, so resuming a multi-node job needs "
                "CONFIG.LOG.BASE_PATH on a file system every node shares (or a copy of rank 0's "
                "checkpoint folder on each node)")


def _choice(name: Optional[str], folder: str) -> str:
    return (f"found no checkpoint in {folder}" if name is None else
            f"resumes from {name} in {folder}")


def set_aside_earlier_run(save_dir: str, logger: logging.Logger) -> Optional[str]:
    """A run that starts fresh in a folder holding checkpoints of an earlier run moves them into
    ``earlier_run_<UTC time>/`` beside them (returned), so that the newest checkpoint there,
    which ``tools/test_ddp.py`` tests and AUTO_RESUME continues, is this run's and never the
    earlier run's later epoch; nothing is deleted. One warning line names them."""
    names = [os.path.basename(p) for p in epoch_checkpoints(save_dir)]
    names += sorted(os.path.basename(p) for p in glob.glob(os.path.join(save_dir, "*.pth"))
                    if PREEMPT_RE.fullmatch(os.path.basename(p)) or
                    os.path.basename(p) == "best.pth")
    if not names:
        return None
    aside = os.path.join(save_dir, time.strftime("earlier_run_%Y%m%d-%H%M%S", time.gmtime()))
    os.makedirs(aside, exist_ok=True)
    for name in names:
        os.replace(os.path.join(save_dir, name), os.path.join(aside, name))
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    logger.warning("%s held %d checkpoint(s) of an earlier run (%s); this run starts fresh "
                   "(CONFIG.TRAIN.AUTO_RESUME False), so they were moved to %s (set "
                   "AUTO_RESUME True to continue that run instead)", save_dir, len(names), shown,
                   aside)
    return aside


class ResumedState(NamedTuple):
    """Where a resumed run continues: epochs completed, optimizer steps taken, best val top-1,
    batches of the next epoch already trained (0 unless the checkpoint is mid-epoch), the LR its
    schedule had set for the next step (None when unknown), the EPOCH_NUM of its config
    (0 when unknown), the number of processes its run had (0 when unknown) and the validations
    in a row since its last new best, and the best validation CONFIG.TRAIN.BEST_METRIC (None
    before any)."""

    epoch: int
    iteration: int
    best_top1: float
    epoch_iter: int = 0
    lr: Optional[float] = None
    epochs: int = 0
    processes: int = 0
    stale_validations: int = 0
    best_value: Optional[float] = None


def load_training_state(path: str, cfg, model: nn.Module, optimizer, scheduler, scaler=None,
                        ema=None, logger: Optional[logging.Logger] = None) -> ResumedState:
    """Resume from the checkpoint ``path``: restore the model, optimizer, LR schedule, grad scaler,
    EMA and this rank's RNG states (every rank calls it).

    Args:
        path: The checkpoint file.
        cfg: This run's config, compared with the checkpoint's (see :func:`config_differences`).
        model: The model (plain, DDP-wrapped or sharded with FSDP2); its bare module is loaded.
        optimizer, scheduler: Loaded from the checkpoint.
        scaler: The fp16 grad scaler, or None.
        ema: The :class:`~zoo.train.ema.ModelEMA`, or None.
        logger: Where the RNG warning goes (default ``zoo``).

    Raises:
        CheckpointError: The checkpoint was trained with a different config (the message names
            up to six keys), or cannot be read.
    """
    logger = logger or logging.getLogger("zoo")
    try:
        ckpt = load_checkpoint(path)
    except CheckpointError as e:
        if "cut short or damaged" not in str(e):
            raise
        # The run's own file: nothing to download again; the one before it is there.
        raise CheckpointError(
            f"{path}: cut short or damaged (zoo writes checkpoints whole, so a disk or a copy "
            f"damaged it): move it out of {os.path.dirname(path) or '.'} to resume from the one "
            "before it, or name an earlier epoch with CONFIG.TRAIN.RESUME_EPOCH") from None
    diffs = config_differences(ckpt.get("cfg", ""), cfg)
    if diffs:
        raise CheckpointError(
            f"{path} was trained with a different config ({'; '.join(diffs[:6])}); use "
            "another CONFIG.LOG.EXP_NAME or set CONFIG.TRAIN.AUTO_RESUME False"
        )
    if is_sharded(model):  # each rank keeps its shard of the full state
        sharding.load_model_state(model, ckpt["model"])
        sharding.load_optimizer_state(model, optimizer, ckpt["optimizer"])
    else:
        unwrap(model).load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
    scheduler.load_state_dict(ckpt["scheduler"])
    if scaler is not None and ckpt.get("scaler"):
        scaler.load_state_dict(ckpt["scaler"])
    if ema is not None and "ema" in ckpt:
        ema.load_state_dict(ckpt["ema"])
    rng, world = ckpt["rng"], comm.get_world_size()
    epoch_iter = int(ckpt.get("epoch_iter", 0))
    ranks = len(rng) if isinstance(rng, list) else 1
    if epoch_iter and ranks != world:
        # Mid-epoch, each rank's place in its shard of the epoch is only meaningful for the
        # same number of shards.
        raise CheckpointError(
            f"{path} stopped mid-epoch in a job of {ranks} processes; resume it with {ranks} "
            f"processes, or set CONFIG.TRAIN.RESUME_EPOCH to an epoch checkpoint")
    if isinstance(rng, list) and ranks == world:
        set_rng_state(rng[comm.get_rank()])
    else:
        logger.warning("%s holds RNG states for %s ranks, not %d: random streams restart",
                       path, ranks, world)
    return ResumedState(int(ckpt["epoch"]), int(ckpt.get("iteration", 0)),
                        float(ckpt.get("best_top1", -1.0)), epoch_iter,
                        _scheduled_lr(ckpt.get("optimizer")), _saved_epochs(ckpt.get("cfg")),
                        ranks if isinstance(rng, list) else 0,
                        int(ckpt.get("stale_validations", 0)), _best_value(ckpt))


def _best_value(ckpt: Dict[str, Any]) -> Optional[float]:
    """The best validation CONFIG.TRAIN.BEST_METRIC a checkpoint holds: its ``best_value``, or,
    from a zoo that only kept ``best_top1`` (and picked the best by top-1, the key's default),
    that; None before any validation."""
    if "best_value" in ckpt:
        return float(ckpt["best_value"])
    top1 = float(ckpt.get("best_top1", -1.0))
    return top1 if top1 >= 0 else None


def _scheduled_lr(optimizer_state: Any) -> Optional[float]:
    """The schedule's LR that a saved optimizer state holds for the next step: a group's LR over
    its ``lr_mult`` (None when no group tells)."""
    groups = optimizer_state.get("param_groups", []) if isinstance(optimizer_state, dict) else []
    for group in groups:
        mult = group.get("lr_mult", 1.0)
        if mult and "lr" in group:
            return float(group["lr"]) / mult
    return None


def _saved_epochs(saved_yaml: Any) -> int:
    """CONFIG.TRAIN.EPOCH_NUM of a checkpoint's config (0 when it has none)."""
    import yaml

    try:
        return int(yaml.safe_load(saved_yaml or "")["CONFIG"]["TRAIN"]["EPOCH_NUM"])
    except (KeyError, TypeError, ValueError, yaml.YAMLError):
        return 0


def continue_schedule(scheduler, state: ResumedState, iteration: int, epoch: float, epochs: int,
                      logger: logging.Logger) -> None:
    """Put a resumed LR schedule where the checkpoint's run stopped, counted in this run's epochs.

    The schedule's warmup and length are epochs times this run's optimizer steps per epoch,
    which change with the number of processes (or the training list): the checkpoint's own step
    count would then put it at another epoch. It continues at ``iteration`` instead, this run's
    steps up to fractional ``epoch`` (one log line says so when that moves it); on the same
    steps per epoch the two agree and nothing changes. Only the schedule moves: the optimizer
    steps the run counts (logs, metrics.jsonl, checkpoints) go on from ``state.iteration``, the
    steps actually taken. A longer or shorter ``epochs`` than the checkpoint's run had stretches
    the schedule from the same epoch on (one log line says how the LR at the resume point
    changes).
    """
    before = state.lr
    if scheduler.iteration != iteration:
        logger.info(
            "the checkpoint stopped at epoch %.4g after %d optimizer steps; this run's epochs "
            "(another number of processes or another training list) reach it after %d: the LR "
            "schedule continues from step %d, at the epoch the checkpoint reached (the count of "
            "optimizer steps in the logs and checkpoints goes on from %d)", epoch,
            state.iteration, iteration, iteration, state.iteration)
        scheduler.load_state_dict({"iteration": iteration})
    if state.epochs and state.epochs != epochs:
        logger.info(
            "CONFIG.TRAIN.EPOCH_NUM is %d, the checkpoint's run had %d: the LR schedule now spans "
            "%d epochs and continues from epoch %.4g; the LR at the resume point goes from %s to "
            "%.5g", epochs, state.epochs, epochs, epoch,
            "unknown" if before is None else f"{before:.5g}", scheduler.get_last_lr())


# Keys that may change between a run and its resumption without changing what is trained.
_RESUME_FREE = ("DDP_CONFIG.", "CONFIG.LOG.", "CONFIG.VAL.", "CONFIG.TEST.", "CONFIG.EXTRA_MODULES",
                "CONFIG.TRAIN.EPOCH_NUM", "CONFIG.TRAIN.AUTO_RESUME", "CONFIG.TRAIN.RESUME_EPOCH",
                "CONFIG.TRAIN.KEEP_LAST", "CONFIG.TRAIN.NONFINITE", "CONFIG.TRAIN.HOOKS",
                "CONFIG.TRAIN.PREEMPT_GRACE", "CONFIG.TRAIN.EARLY_STOP_PATIENCE",
                "CONFIG.DATA.NUM_WORKERS", "CONFIG.DATA.TRAIN_ANNO_PATH",
                "CONFIG.DATA.TRAIN_DATA_PATH",
                "CONFIG.DATA.VAL_ANNO_PATH", "CONFIG.DATA.VAL_DATA_PATH", "CONFIG.DATA.TEST_",
                "CONFIG.DATA.SYNTHETIC.ROOT")


def config_differences(saved_yaml: str, cfg) -> List[str]:
    """Keys whose values differ between a checkpoint's config and ``cfg`` (resume-free keys and
    per-node keys are ignored), as ``KEY: saved -> now`` strings. A config saved at an older
    VERSION is read with today's key names."""
    import yaml

    from ..config import cfg_to_yaml, diff_cfg, upgrade_config

    saved = upgrade_config(yaml.safe_load(saved_yaml) or {}, "the checkpoint's config", log=False)
    now = yaml.safe_load(cfg_to_yaml(cfg))
    now.pop("VERSION", None)
    _keys_added_later_as_default(saved)
    for tree in (saved, now):
        _warmup_end_as_zero(tree)
    return [f"{key}: {a!r} -> {b!r}" for key, a, b in diff_cfg(saved, now, ignore=_RESUME_FREE)]


def _keys_added_later_as_default(tree: Dict[str, Any]) -> None:
    """Give a checkpoint's config without ``CONFIG.TRAIN.COSINE_AFTER_WARMUP``, ``NESTEROV`` or
    ``BEST_METRIC`` the key's default (True, False, top1): a zoo that did not know the key
    trained the cosine that starts where the warmup ends and plain momentum, and picked its best
    by top-1, so its checkpoints resume under a config that leaves the keys at those defaults."""
    train = (tree.get("CONFIG") or {}).get("TRAIN")
    if isinstance(train, dict) and "LR_POLICY" in train:
        train.setdefault("COSINE_AFTER_WARMUP", True)
        train.setdefault("NESTEROV", False)
        train.setdefault("BEST_METRIC", "top1")


def _warmup_end_as_zero(tree: Dict[str, Any]) -> None:
    """Write ``CONFIG.TRAIN.WARMUP_END_LR`` as 0 where the warmup ends on the schedule's LR
    anyway (or there is no warmup to end): a config that spells that LR out and one that leaves
    it 0 train the same schedule, so a checkpoint of either resumes under the other."""
    from yacs.config import CfgNode

    from ..config.validation import warmup_ends_on_schedule

    train = (tree.get("CONFIG") or {}).get("TRAIN")
    if not isinstance(train, dict) or "WARMUP_END_LR" not in train:
        return
    try:
        on_schedule = warmup_ends_on_schedule(CfgNode(train))
    except (AttributeError, KeyError, TypeError, IndexError):
        return  # a config without the schedule's keys: compared as written
    if on_schedule:
        train["WARMUP_END_LR"] = 0.0
