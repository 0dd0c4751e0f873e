"""Evaluation through collectives only: every rank scores its share, predictions are all-gathered,
the samples DistributedSampler repeats to even out ranks are dropped, and metrics are computed once
over every video exactly once; an unreadable video is counted once too, whichever ranks were
handed it. No shared file system is needed."""

from __future__ import annotations

import logging
import math
from typing import Any, Dict, Iterator, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import BatchSampler, DistributedSampler, SequentialSampler

from ..data.device_staging import DeviceStaging
from ..utils import comm
from .metrics import classification_metrics, show_progress

logger = logging.getLogger(__name__)


@torch.no_grad()
def run_inference(model: nn.Module, loader, device: torch.device, progress: bool = False,
                  num_classes: int = 0, model_name: str = "") -> Dict[str, Any]:
    """Score every item of ``loader`` on every rank and gather the results.

    Items are ``(clip, label, index, n_bad)``, and any fields after those (a dataset's own) are
    left aside, as training leaves them; a 6-D clip batch ``(B, V, C, T, H, W)`` holds V views
    per video, whose softmax scores are averaged. With ``num_classes`` > 0, logits without that
    many columns stop with one line naming ``model_name`` (``CONFIG.MODEL.NAME``).

    Returns:
        On every rank: ``{"index", "probs", "labels", "nll"}`` tensors sorted by dataset index
        with each video once (``nll``: each video's :func:`video_nll`), and ``n_bad`` (bad videos
        skipped while loading, counted once per dataset index asked for: a video the sampler
        repeats to even out ranks counts once, as its scores do).
    """
    # Imported here: zoo.models registers every family, which importing this module need not
    # pay for.
    from ..models.classifier import check_logits

    was_training = model.training
    model.eval()
    indices, probs, labels, nll = [], [], [], []
    asked = _asked_indices(loader)
    # Unreadable videos skipped, by the dataset index the sampler asked for (an item's own
    # ``index`` is its stand-in's); (rank, position) where the loader does not say.
    skipped: Dict[Any, int] = {}
    position = 0
    iterator = loader
    if show_progress(progress):
        from tqdm import tqdm

        iterator = tqdm(loader, desc="eval", leave=False, dynamic_ncols=True)
    if device.type == "cuda":  # each batch's copy beside the forward of the one before
        iterator = DeviceStaging(device)(iterator)
    for batch in iterator:
        clips, target, index, bad = batch[0], batch[1], batch[2], batch[3]
        clips = clips.to(device, non_blocking=True)
        views = clips.dim() == 6  # (B, V, C, T, H, W)
        logits = model(clips.flatten(0, 1) if views else clips)
        if num_classes:
            check_logits(logits, num_classes, model_name or type(model).__name__)
        logits = logits.float()
        logits = logits.view(*clips.shape[:2], -1) if views else logits.unsqueeze(1)
        p = F.softmax(logits, dim=2).mean(dim=1)
        indices.append(index.cpu())
        # Kept on the device: one copy to the host after the last batch instead of a wait for
        # the device after every batch.
        probs.append(p)
        nll.append(video_nll(logits, target.to(p.device, non_blocking=True)))
        labels.append(target.cpu())
        for n in bad.reshape(-1).tolist():
            key = next(asked, None) if asked is not None else None
            if n:
                skipped[key if key is not None else (comm.get_rank(), position)] = int(n)
            position += 1
    model.train(was_training)
    local = (
        torch.cat(indices) if indices else torch.zeros(0, dtype=torch.long),
        torch.cat(probs).cpu() if probs else torch.zeros(0),
        torch.cat(labels) if labels else torch.zeros(0, dtype=torch.long),
        skipped,
        torch.cat(nll).cpu() if nll else torch.zeros(0),
    )
    gathered = comm.all_gather_object(local)
    all_idx = torch.cat([g[0] for g in gathered])
    all_probs = torch.cat([g[1] for g in gathered if g[1].numel()])
    all_labels = torch.cat([g[2] for g in gathered])
    all_nll = torch.cat([g[4] for g in gathered])
    order = torch.argsort(all_idx, stable=True)
    all_idx, all_probs, all_labels = all_idx[order], all_probs[order], all_labels[order]
    keep = torch.ones_like(all_idx, dtype=torch.bool)
    keep[1:] = all_idx[1:] != all_idx[:-1]  # DistributedSampler pads by repeating samples
    return {
        "index": all_idx[keep],
        "probs": all_probs[keep],
        "labels": all_labels[keep],
        "nll": all_nll[order][keep],
        "n_bad": sum({k: n for g in gathered for k, n in g[3].items()}.values()),
    }


def _asked_indices(loader) -> Optional[Iterator[int]]:
    """The dataset indices ``loader``'s items were asked for, in order, where its sampler gives
    the same order on every pass (the evaluation loaders' DistributedSampler, or the
    SequentialSampler of one rank); None for any other loader."""
    batches = getattr(loader, "batch_sampler", None)
    sampler = getattr(batches, "sampler", None)
    if isinstance(batches, BatchSampler) and isinstance(
            sampler, (DistributedSampler, SequentialSampler)):
        return iter(sampler)
    return None


def video_nll(view_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Each video's cross-entropy: ``-log`` of its label's softmax probability averaged over its
    views (the probabilities the metrics rank), from the logits and without a floor.

    ``log mean_v softmax(z_v) = logsumexp_v(log_softmax(z_v)) - log V``: exact where the
    probabilities underflow float32 (a diverged run's wrong videos score thousands, not the
    ``-log 1e-12`` = 27.63 a clamped probability gives). One view is plain cross-entropy.

    Args:
        view_logits: ``(B, V, num_classes)`` float logits, V views per video.
        labels: ``(B,)`` class ids.

    Returns:
        ``(B,)`` losses.
    """
    log_probs = F.log_softmax(view_logits, dim=2)
    picked = log_probs.gather(2, labels.view(-1, 1, 1).expand(-1, view_logits.shape[1], 1))
    views = view_logits.shape[1]
    return math.log(views) - torch.logsumexp(picked.squeeze(2), dim=1)


def evaluate(model: nn.Module, loader, device: torch.device, progress: bool = False,
             num_classes: int = 0, model_name: str = "") -> Dict[str, Any]:
    """top1/top5/mean class accuracy (percent) and loss over the whole split, same on every rank.

    ``loss`` is the mean over videos of each video's cross-entropy (:func:`video_nll`: of the
    view-averaged probabilities), computed from the logits without a cap. ``num_classes`` and
    ``model_name``: see :func:`run_inference`."""
    out = run_inference(model, loader, device, progress=progress, num_classes=num_classes,
                        model_name=model_name)
    probs, labels = out["probs"], out["labels"]
    metrics = classification_metrics(probs, labels)
    metrics["loss"] = float(out["nll"].double().mean()) if labels.numel() else 0.0
    metrics["num_videos"] = int(labels.numel())
    metrics["skipped_videos"] = out["n_bad"]
    metrics["_raw"] = out
    return metrics
