"""Evaluation through collectives only: every rank scores its share, predictions are all-gathered,
the samples DistributedSampler repeats to even out ranks are dropped, and metrics are computed once
over every video exactly once. No shared file system is needed."""

from __future__ import annotations

import logging
from typing import Any, Dict

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..data.device_staging import DeviceStaging
from ..utils import comm
from .metrics import classification_metrics, show_progress

logger = logging.getLogger(__name__)


@torch.no_grad()
def run_inference(model: nn.Module, loader, device: torch.device,
                  progress: bool = False) -> Dict[str, Any]:
    """Score every item of ``loader`` on every rank and gather the results.

    Items are ``(clip, label, index, n_bad)``; a 6-D clip batch ``(B, V, C, T, H, W)`` holds V views
    per video, whose softmax scores are averaged.

    Returns:
        On every rank: ``{"index", "probs", "labels"}`` tensors sorted by dataset index with each
        video once, and ``n_bad`` (bad videos skipped while loading, summed over ranks).
    """
    was_training = model.training
    model.eval()
    indices, probs, labels = [], [], []
    n_bad = 0
    iterator = loader
    if show_progress(progress):
        from tqdm import tqdm

        iterator = tqdm(loader, desc="eval", leave=False, dynamic_ncols=True)
    if device.type == "cuda":  # each batch's copy beside the forward of the one before
        iterator = DeviceStaging(device)(iterator)
    for clips, target, index, bad in iterator:
        clips = clips.to(device, non_blocking=True)
        if clips.dim() == 6:
            b, v = clips.shape[:2]
            logits = model(clips.flatten(0, 1))
            p = F.softmax(logits.float(), dim=1).view(b, v, -1).mean(dim=1)
        else:
            p = F.softmax(model(clips).float(), dim=1)
        indices.append(index.cpu())
        # Kept on the device: one copy to the host after the last batch instead of a wait for
        # the device after every batch.
        probs.append(p)
        labels.append(target.cpu())
        n_bad += int(bad.sum())
    model.train(was_training)
    local = (
        torch.cat(indices) if indices else torch.zeros(0, dtype=torch.long),
        torch.cat(probs).cpu() if probs else torch.zeros(0),
        torch.cat(labels) if labels else torch.zeros(0, dtype=torch.long),
        n_bad,
    )
    gathered = comm.all_gather_object(local)
    all_idx = torch.cat([g[0] for g in gathered])
    all_probs = torch.cat([g[1] for g in gathered if g[1].numel()])
    all_labels = torch.cat([g[2] for g in gathered])
    order = torch.argsort(all_idx, stable=True)
    all_idx, all_probs, all_labels = all_idx[order], all_probs[order], all_labels[order]
    keep = torch.ones_like(all_idx, dtype=torch.bool)
    keep[1:] = all_idx[1:] != all_idx[:-1]  # DistributedSampler pads by repeating samples
    return {
        "index": all_idx[keep],
        "probs": all_probs[keep],
        "labels": all_labels[keep],
        "n_bad": sum(g[3] for g in gathered),
    }


def evaluate(model: nn.Module, loader, device: torch.device,
             progress: bool = False) -> Dict[str, Any]:
    """top1/top5/mean class accuracy (percent) and loss over the whole split, same on every rank."""
    out = run_inference(model, loader, device, progress=progress)
    probs, labels = out["probs"], out["labels"]
    metrics = classification_metrics(probs, labels)
    picked = probs.gather(1, labels.view(-1, 1)).clamp_min(1e-12)
    metrics["loss"] = float(-picked.log().mean()) if labels.numel() else 0.0
    metrics["num_videos"] = int(labels.numel())
    metrics["skipped_videos"] = out["n_bad"]
    metrics["_raw"] = out
    return metrics
