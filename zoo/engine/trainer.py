"""The training loop run by every worker: build, train, validate, checkpoint, log."""

from __future__ import annotations

import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from ..config import cfg_to_yaml
from ..data import build_loader
from ..models import build_model
from ..solver import build_lr_scheduler, build_optimizer
from ..utils import comm
from .checkpoint import load_checkpoint, save_checkpoint, set_rng_state, unwrap
from .evaluator import evaluate
from .metrics import MetricsWriter, show_progress
from .setup import worker_setup


def _wrap(model: nn.Module, device: torch.device) -> nn.Module:
    model.to(device)
    if comm.get_world_size() == 1:
        return model
    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids, gradient_as_bucket_view=True)


def _set_epoch(loader, epoch: int) -> None:
    if hasattr(loader.sampler, "set_epoch"):
        loader.sampler.set_epoch(epoch)


def _progress(enabled: bool, total: int, epoch: int, epochs: int):
    if not show_progress(enabled):
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=f"epoch {epoch + 1}/{epochs}", dynamic_ncols=True, leave=False)


def train_worker(cfg) -> None:
    """Train the model the config describes (called by ``launch`` in every process)."""
    logger, device, out_dir = worker_setup(cfg)
    train_cfg, log_cfg = cfg.CONFIG.TRAIN, cfg.CONFIG.LOG
    model = build_model(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    logger.info("model %s: %.2fM parameters", cfg.CONFIG.MODEL.NAME, n_params / 1e6)
    model = _wrap(model, device)
    train_loader = build_loader(cfg, "train")
    val_loader = build_loader(cfg, "val") if cfg.CONFIG.DATA.VAL_ANNO_PATH else None
    iters_per_epoch = len(train_loader)
    if iters_per_epoch == 0:
        raise RuntimeError(
            f"the training list {cfg.CONFIG.DATA.TRAIN_ANNO_PATH} has fewer videos than one global "
            f"batch ({train_cfg.BATCH_SIZE} x {comm.get_world_size()} processes); lower "
            "CONFIG.TRAIN.BATCH_SIZE"
        )
    optimizer = build_optimizer(cfg, unwrap(model))
    scheduler = build_lr_scheduler(cfg, optimizer, iters_per_epoch)
    save_dir = os.path.join(out_dir, log_cfg.SAVE_DIR)
    writer = MetricsWriter(out_dir, os.path.join(out_dir, log_cfg.LOG_DIR))
    cfg_yaml = cfg_to_yaml(cfg)

    start_epoch = 0
    if train_cfg.RESUME_EPOCH >= 0:
        path = os.path.join(save_dir, f"epoch_{train_cfg.RESUME_EPOCH}.pth")
        ckpt = load_checkpoint(path)
        unwrap(model).load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        set_rng_state(ckpt["rng"])
        start_epoch = int(ckpt["epoch"])
        logger.info("resumed from %s: continuing at epoch %d", path, start_epoch + 1)

    global_batch = train_cfg.BATCH_SIZE * comm.get_world_size()
    logger.info(
        "training %d epochs x %d iterations, global batch %d (%d per process x %d)",
        train_cfg.EPOCH_NUM, iters_per_epoch, global_batch, train_cfg.BATCH_SIZE,
        comm.get_world_size(),
    )
    iteration = start_epoch * iters_per_epoch
    for epoch in range(start_epoch, train_cfg.EPOCH_NUM):
        model.train()
        _set_epoch(train_loader, epoch)
        bar = _progress(log_cfg.PROGRESS_BAR, iters_per_epoch, epoch, train_cfg.EPOCH_NUM)
        epoch_start = tick = time.perf_counter()
        loss_sum = torch.zeros((), device=device)
        bad = 0
        for i, (clips, labels, _, n_bad) in enumerate(train_loader):
            clips = clips.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            loss = F.cross_entropy(model(clips), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            iteration += 1
            loss_sum += loss.detach()
            bad += int(n_bad.sum())
            if bar is not None:
                bar.update(1)
            if (i + 1) % log_cfg.DISPLAY_FREQ == 0 or i + 1 == iters_per_epoch:
                # .item() only here: it waits for the device, so not on every step.
                now = time.perf_counter()
                steps = (i % log_cfg.DISPLAY_FREQ) + 1
                speed = steps * global_batch / max(now - tick, 1e-9)
                tick = now
                record = {
                    "split": "train", "epoch": epoch + 1, "iter": iteration,
                    "loss": loss.item(), "lr": scheduler.get_last_lr(), "clips_per_s": speed,
                }
                writer.write(record, iteration)
                if bar is not None:
                    bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{record['lr']:.4f}",
                                    clips_s=f"{speed:.1f}")
                else:
                    logger.info(
                        "epoch %d iter %d/%d loss %.4f lr %.5f %.1f clips/s",
                        epoch + 1, i + 1, iters_per_epoch, record["loss"], record["lr"], speed,
                    )
        if bar is not None:
            bar.close()
        comm.all_reduce_sum(loss_sum)
        bad_total = int(comm.all_reduce_sum(torch.tensor([bad], device=device)).item())
        mean_loss = loss_sum.item() / (iters_per_epoch * comm.get_world_size())
        epoch_time = time.perf_counter() - epoch_start
        logger.info(
            "epoch %d done: mean loss %.4f, %.1fs, %d bad videos skipped",
            epoch + 1, mean_loss, epoch_time, bad_total,
        )
        writer.write({"split": "train_epoch", "epoch": epoch + 1, "loss": mean_loss,
                      "time_s": epoch_time, "skipped_videos": bad_total}, iteration)

        last = epoch + 1 == train_cfg.EPOCH_NUM
        freq = cfg.CONFIG.VAL.FREQ
        if val_loader is not None and (last or (freq > 0 and (epoch + 1) % freq == 0)):
            m = evaluate(model, val_loader, device)
            logger.info(
                "epoch %d val: top1 %.2f top5 %.2f mean-class %.2f loss %.4f (%d videos)",
                epoch + 1, m["top1"], m["top5"], m["mean_class_acc"], m["loss"], m["num_videos"],
            )
            writer.write({"split": "val", "epoch": epoch + 1, "top1": m["top1"],
                          "top5": m["top5"], "mean_class_acc": m["mean_class_acc"],
                          "loss": m["loss"], "num_videos": m["num_videos"],
                          "skipped_videos": m["skipped_videos"]}, iteration)
        if last or (epoch + 1) % log_cfg.SAVE_FREQ == 0:
            path = save_checkpoint(save_dir, model, optimizer, scheduler, epoch + 1, iteration,
                                   cfg_yaml)
            if path:
                logger.info("saved %s", path)
        comm.synchronize()
    writer.close()
    logger.info("training finished; outputs in %s", out_dir)
