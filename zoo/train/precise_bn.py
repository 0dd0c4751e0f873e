"""Precise BN: recompute BatchNorm running statistics as true averages over training batches.

During training the running statistics are an exponential average over weights that kept
changing; re-estimating them with the final weights gives validation numbers that match the
model actually evaluated (PySlowFast and detectron2 do the same). With an EMA of the weights the
EMA is what validation evaluates and the checkpoint keeps, so its statistics are recomputed too,
with its own weights, over the same batches.
"""

from __future__ import annotations

import itertools
from typing import Callable, Optional, Sequence

import torch
import torch.nn as nn

from ..data.device_crops import batch_geometry, resize_cuts
from ..utils import comm


@torch.no_grad()
def recompute_bn_stats(model: nn.Module | Sequence[nn.Module], loader, num_iters: int,
                       device: torch.device,
                       prepare: Optional[Callable[..., torch.Tensor]] = None) -> int:
    """Average the batch statistics of ``num_iters`` batches into every BN's running stats.

    ``model`` may be several models (the trained one and its EMA): each batch is read once and
    each model runs its own forward on it, so each gets the statistics of its own weights.
    ``prepare`` makes a loader batch's clips the model's input (the training step's
    :meth:`~zoo.train.step.TrainStep.prepare`: to ``device``, resized when the batch holds cuts
    and their geometry, normalised); default: moved to ``device`` (cuts resized there).
    Statistics are averaged over ranks as well. Returns the number of batches used.
    """
    models = [model] if isinstance(model, nn.Module) else list(model)
    was_training = [m.training for m in models]
    for m in models:
        m.train()
    # Frozen BNs stay in eval mode under model.train(); their statistics are left alone.
    bns = [[b for b in m.modules() if isinstance(b, nn.modules.batchnorm._BatchNorm)
            and b.track_running_stats and b.training] for m in models]
    if num_iters > 0 and any(bns):
        n = _average_batch_stats(models, bns, loader, num_iters, device, prepare)
    else:
        n = 0
    for m, mode in zip(models, was_training):
        m.train(mode)
    return n


def _average_batch_stats(models, bns, loader, num_iters, device, prepare) -> int:
    flat = [bn for per_model in bns for bn in per_model]
    momenta = [bn.momentum for bn in flat]
    means = [torch.zeros_like(bn.running_mean) for bn in flat]
    variances = [torch.zeros_like(bn.running_var) for bn in flat]
    for bn in flat:
        bn.momentum = 1.0  # running stats = this batch's stats, collected after each forward
    n = 0
    for batch in itertools.islice(loader, num_iters):
        clips, geometry = batch[0], batch_geometry(batch)
        if prepare is not None:
            inputs = prepare(clips) if geometry is None else prepare(clips, geometry)
        else:
            inputs = clips.to(device)
            if geometry is not None:
                inputs = resize_cuts(inputs, geometry)
        for m, per_model in zip(models, bns):
            if per_model:
                m(inputs)
        for i, bn in enumerate(flat):
            means[i] += bn.running_mean
            variances[i] += bn.running_var
        n += 1
    for i, bn in enumerate(flat):
        count = torch.tensor(float(n * comm.get_world_size()), device=means[i].device)
        bn.running_mean.copy_(comm.all_reduce_sum(means[i]) / count)
        bn.running_var.copy_(comm.all_reduce_sum(variances[i]) / count)
        bn.momentum = momenta[i]
    return n
