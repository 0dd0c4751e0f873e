"""The training loop run by every worker: build, resume, train, validate, checkpoint, log."""

from __future__ import annotations

import inspect
import logging
import os
import time
from typing import Optional

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

from ..config import cfg_to_yaml
from ..data import build_loader
from ..models import build_model
from ..solver import build_lr_scheduler, build_optimizer
from ..utils import comm
from .checkpoint import (
    CheckpointError,
    config_differences,
    gather_rng_states,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    set_rng_state,
    training_state,
    unwrap,
)
from .evaluator import evaluate
from .finetune import classifier_module, freeze_backbone, freeze_bn
from .metrics import MetricsWriter, show_progress
from .precise_bn import recompute_bn_stats
from .precision import execution_settings, memory_format, route_cpu_convs
from .setup import with_job_layout, worker_setup
from .step import TrainStep
from .sync_bn import convert_sync_bn


def prepare_model(cfg, device: torch.device, logger: logging.Logger) -> nn.Module:
    """Build the model, apply freezing / SyncBN / execution settings, move it, wrap it in DDP."""
    model = build_model(cfg)
    if cfg.CONFIG.MODEL.FREEZE_BACKBONE:
        logger.info("froze %d backbone tensors; training the head only",
                    len(freeze_backbone(model)))
    if cfg.CONFIG.MODEL.FREEZE_BN:
        logger.info("froze %d BatchNorm layers", freeze_bn(model))
    if cfg.CONFIG.TRAIN.SYNC_BN and comm.get_world_size() > 1:
        model = convert_sync_bn(model, device)
    model.to(device)
    _, channels_last = execution_settings(cfg.CONFIG.TRAIN, device)
    apply_execution(model, device, channels_last)
    if cfg.CONFIG.TRAIN.COMPILE:
        model.compile()  # in place: the module and its state-dict keys stay as they are
    if comm.get_world_size() == 1:
        return model
    ids = [device.index] if device.type == "cuda" else None
    # No buffer broadcast before every forward (see broadcast_buffers); gradients all-reduce
    # straight from the buckets they live in. torch >= 2.14 names the switch
    # forward_sync_buffers (it still syncs buffers once at construction, which is harmless here).
    no_sync = ({"forward_sync_buffers": False} if "forward_sync_buffers" in _DDP_ARGS
               else {"broadcast_buffers": False})
    return DistributedDataParallel(model, device_ids=ids, gradient_as_bucket_view=True,
                                   **no_sync)


_DDP_ARGS = inspect.signature(DistributedDataParallel.__init__).parameters


def broadcast_buffers(module: nn.Module) -> None:
    """Give every rank rank 0's buffers (the BatchNorm running statistics).

    DDP is built without its broadcast before every forward (``broadcast_buffers`` /
    ``forward_sync_buffers`` False): that broadcast is a second
    synchronisation per step (~5% of a small model's step on CPU), and training-mode BatchNorm
    never reads the running statistics. Rank 0's statistics - the ones DDP's broadcast kept and its
    checkpoints save - reach the other ranks here, before anything reads them (validation).
    """
    if comm.get_world_size() > 1:
        for buf in module.buffers():
            dist.broadcast(buf, src=0)


def apply_execution(model: nn.Module, device: torch.device, channels_last: bool,
                    route_convs: bool = True) -> int:
    """Put ``model`` (already on ``device``) in the layout zoo trains it in; on CPU, route the
    conv3d layers PyTorch would run with its slow kernel through oneDNN (see precision.py).

    Returns the number of conv3d layers that may be routed.
    """
    if channels_last:
        dim = 5 if any(isinstance(m, nn.Conv3d) for m in model.modules()) else 4
        model.to(memory_format=memory_format(dim))
    return route_cpu_convs(model) if route_convs and device.type == "cpu" else 0


def _seconds_since_launch() -> Optional[float]:
    """Age of the launching process (the parent of a spawned worker), from /proc; None elsewhere."""
    import multiprocessing

    pid = os.getppid() if multiprocessing.parent_process() is not None else os.getpid()
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _set_epoch(loader, epoch: int) -> None:
    if hasattr(loader.sampler, "set_epoch"):
        loader.sampler.set_epoch(epoch)


def _progress(enabled: bool, total: int, epoch: int, epochs: int):
    if not show_progress(enabled):
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=f"epoch {epoch + 1}/{epochs}", dynamic_ncols=True, leave=False)


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


def train_worker(cfg) -> None:
    """Train the model the config describes (called by ``launch`` in every process)."""
    logger, device, out_dir = worker_setup(cfg)
    train_cfg, log_cfg = cfg.CONFIG.TRAIN, cfg.CONFIG.LOG
    world = comm.get_world_size()
    model = prepare_model(cfg, device, logger)
    bare = unwrap(model)
    logger.info("model %s: %.2fM parameters (%.2fM trainable)", cfg.CONFIG.MODEL.NAME,
                sum(p.numel() for p in bare.parameters()) / 1e6,
                sum(p.numel() for p in bare.parameters() if p.requires_grad) / 1e6)
    train_loader = build_loader(cfg, "train")
    val_loader = build_loader(cfg, "val") if cfg.CONFIG.DATA.VAL_ANNO_PATH else None
    iters_per_epoch = len(train_loader)
    steps_per_epoch = iters_per_epoch // train_cfg.ACCUM_STEPS
    if steps_per_epoch == 0:
        raise RuntimeError(
            f"one epoch has {iters_per_epoch} iterations, fewer than CONFIG.TRAIN.ACCUM_STEPS = "
            f"{train_cfg.ACCUM_STEPS}: lower ACCUM_STEPS or BATCH_SIZE"
        )
    optimizer = build_optimizer(cfg, bare, classifier_module(bare).parameters())
    scheduler = build_lr_scheduler(cfg, optimizer, steps_per_epoch, world)
    precision, channels_last = execution_settings(train_cfg, device)
    logger.info("execution: %s%s, %s%s", precision,
                " (PRECISION auto)" if train_cfg.PRECISION == "auto" else "",
                "channels-last" if channels_last else "contiguous",
                ", torch.compile" if train_cfg.COMPILE else "")
    step = TrainStep(
        model, optimizer, scheduler, device, cfg.CONFIG.DATA.NUM_CLASSES,
        precision=precision, channels_last=channels_last,
        accum_steps=train_cfg.ACCUM_STEPS, clip_grad_norm=train_cfg.CLIP_GRAD_NORM,
        label_smoothing=train_cfg.LABEL_SMOOTHING, mixup_alpha=train_cfg.MIXUP_ALPHA,
        cutmix_alpha=train_cfg.CUTMIX_ALPHA, ema_decay=train_cfg.EMA_DECAY,
        nonfinite=train_cfg.NONFINITE,
    )
    save_dir = os.path.join(out_dir, log_cfg.SAVE_DIR)
    writer = MetricsWriter(out_dir, os.path.join(out_dir, log_cfg.LOG_DIR))
    cfg_yaml = cfg_to_yaml(with_job_layout(cfg))

    start_epoch, best_top1 = 0, -1.0
    resume = find_resume_checkpoint(cfg, save_dir, logger)
    if resume:
        ckpt = load_checkpoint(resume)
        diffs = config_differences(ckpt.get("cfg", ""), cfg)
        if diffs:
            raise CheckpointError(
                f"{resume} was trained with a different config ({'; '.join(diffs[:6])}); use "
                "another CONFIG.LOG.EXP_NAME or set CONFIG.TRAIN.AUTO_RESUME False"
            )
        bare.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        if step.scaler is not None and ckpt.get("scaler"):
            step.scaler.load_state_dict(ckpt["scaler"])
        if step.ema is not None and "ema" in ckpt:
            step.ema.load_state_dict(ckpt["ema"])
        rng = ckpt["rng"]
        if isinstance(rng, list) and len(rng) == world:
            set_rng_state(rng[comm.get_rank()])
        else:
            logger.warning("%s holds RNG states for %s ranks, not %d: random streams restart",
                           resume, len(rng) if isinstance(rng, list) else 1, world)
        start_epoch, best_top1 = int(ckpt["epoch"]), float(ckpt.get("best_top1", -1.0))
        logger.info("resumed from %s: continuing at epoch %d", resume, start_epoch + 1)
        del ckpt

    writer.start(start_epoch)
    global_batch = train_cfg.BATCH_SIZE * world * train_cfg.ACCUM_STEPS
    logger.info(
        "training epochs %d..%d, %d iterations each, global batch %d (%d per process x %d "
        "processes x %d accumulation), peak LR %.5g",
        start_epoch + 1, train_cfg.EPOCH_NUM, iters_per_epoch, global_batch,
        train_cfg.BATCH_SIZE, world, train_cfg.ACCUM_STEPS, scheduler.base_lr,
    )
    iteration = step.steps = start_epoch * steps_per_epoch
    for epoch in range(start_epoch, train_cfg.EPOCH_NUM):
        model.train()
        _set_epoch(train_loader, epoch)
        bar = _progress(log_cfg.PROGRESS_BAR, iters_per_epoch, epoch, train_cfg.EPOCH_NUM)
        epoch_start = tick = time.perf_counter()
        loss_sum = torch.zeros((), device=device)
        bad, seen, skipped_before = 0, 0, step.skipped
        for i, (clips, labels, _, n_bad) in enumerate(train_loader):
            if i >= steps_per_epoch * train_cfg.ACCUM_STEPS:
                break  # a partial accumulation at the epoch's end is dropped
            loss = step(clips, labels)
            if epoch == start_epoch and i == 0:
                since = _seconds_since_launch()
                logger.info("first iteration done%s", f", {since:.1f}s after launch" if since
                            else "")
            loss_sum += loss
            bad += int(n_bad.sum())
            seen += 1
            if step.micro == 0:
                iteration += 1
            if bar is not None:
                bar.update(1)
            if (i + 1) % log_cfg.DISPLAY_FREQ == 0 or i + 1 == iters_per_epoch:
                # .item() only here: it waits for the device, so not on every step.
                now = time.perf_counter()
                steps = (i % log_cfg.DISPLAY_FREQ) + 1
                speed = steps * train_cfg.BATCH_SIZE * world / max(now - tick, 1e-9)
                tick = now
                record = {"split": "train", "epoch": epoch + 1, "iter": iteration,
                          "loss": loss.item(), "lr": scheduler.get_last_lr(),
                          "clips_per_s": speed}
                writer.write(record, iteration)
                if bar is not None:
                    bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{record['lr']:.4g}",
                                    clips_s=f"{speed:.1f}")
                else:
                    logger.info("epoch %d iter %d/%d loss %.4f lr %.5g %.1f clips/s", epoch + 1,
                                i + 1, iters_per_epoch, record["loss"], record["lr"], speed)
        if bar is not None:
            bar.close()
        comm.all_reduce_sum(loss_sum)
        bad_total = int(comm.all_reduce_sum(torch.tensor([bad], device=device)).item())
        mean_loss = loss_sum.item() / max(1, seen * world)
        epoch_time = time.perf_counter() - epoch_start
        # The same on every rank (the skip decision is all-reduced); a skipped step's NaN loss
        # is in mean_loss, which is then NaN too.
        skipped_steps = step.skipped - skipped_before
        logger.info("epoch %d done: mean loss %.4f, %.1fs, %d bad videos skipped, %d non-finite "
                    "steps skipped", epoch + 1, mean_loss, epoch_time, bad_total, skipped_steps)
        writer.write({"split": "train_epoch", "epoch": epoch + 1, "loss": mean_loss,
                      "time_s": epoch_time, "skipped_videos": bad_total,
                      "skipped_steps": skipped_steps}, iteration)

        last = epoch + 1 == train_cfg.EPOCH_NUM
        freq = cfg.CONFIG.VAL.FREQ
        is_best = False
        if val_loader is not None and (last or (freq > 0 and (epoch + 1) % freq == 0)):
            if train_cfg.PRECISE_BN_ITERS > 0:
                recompute_bn_stats(bare, train_loader, train_cfg.PRECISE_BN_ITERS, device)
            evaluated = step.ema.module if step.ema is not None else model
            broadcast_buffers(unwrap(evaluated))
            m = evaluate(evaluated, val_loader, device)
            is_best = m["top1"] > best_top1
            best_top1 = max(best_top1, m["top1"])
            logger.info(
                "epoch %d val%s: top1 %.2f top5 %.2f mean-class %.2f loss %.4f (%d videos)",
                epoch + 1, " (EMA)" if step.ema is not None else "", m["top1"], m["top5"],
                m["mean_class_acc"], m["loss"], m["num_videos"],
            )
            writer.write({"split": "val", "epoch": epoch + 1, "top1": m["top1"],
                          "top5": m["top5"], "mean_class_acc": m["mean_class_acc"],
                          "loss": m["loss"], "num_videos": m["num_videos"],
                          "skipped_videos": m["skipped_videos"]}, iteration)
        if last or (epoch + 1) % log_cfg.SAVE_FREQ == 0:
            rng = gather_rng_states()  # every rank takes part; rank 0 writes
            if comm.is_main_process():
                state = training_state(model, optimizer, scheduler, step.scaler, step.ema,
                                       epoch + 1, iteration, cfg_yaml, rng, best_top1)
                path = save_checkpoint(save_dir, state, epoch + 1, train_cfg.KEEP_LAST, is_best)
                logger.info("saved %s%s", path, " (best so far)" if is_best else "")
        comm.synchronize()
    writer.close()
    logger.info("training finished; outputs in %s%s", out_dir,
                f"; {step.skipped} non-finite steps skipped" if step.skipped else "")
