"""Precise BN: recompute BatchNorm running statistics as true averages over training batches.

During training the running statistics are an exponential average over weights that kept
changing; re-estimating them with the final weights gives validation numbers that match the
model actually evaluated (PySlowFast and detectron2 do the same).
"""

from __future__ import annotations

import itertools
from typing import Callable, Optional

import torch
import torch.nn as nn

from ..data.device_crops import batch_geometry, resize_cuts
from ..utils import comm


@torch.no_grad()
def recompute_bn_stats(model: nn.Module, loader, num_iters: int, device: torch.device,
                       prepare: Optional[Callable[..., torch.Tensor]] = None) -> int:
    """Average the batch statistics of ``num_iters`` batches into every BN's running stats.

    ``prepare`` makes a loader batch's clips the model's input (the training step's
    :meth:`~zoo.train.step.TrainStep.prepare`: to ``device``, resized when the batch holds cuts
    and their geometry, normalised); default: moved to ``device`` (cuts resized there).
    Statistics are averaged over ranks as well. Returns the number of batches used.
    """
    was_training = model.training
    model.train()
    # Frozen BNs stay in eval mode under model.train(); their statistics are left alone.
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)
           and m.track_running_stats and m.training]
    if not bns or num_iters <= 0:
        model.train(was_training)
        return 0
    momenta = [bn.momentum for bn in bns]
    means = [torch.zeros_like(bn.running_mean) for bn in bns]
    variances = [torch.zeros_like(bn.running_var) for bn in bns]
    for bn in bns:
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
        model(inputs)
        for i, bn in enumerate(bns):
            means[i] += bn.running_mean
            variances[i] += bn.running_var
        n += 1
    for i, bn in enumerate(bns):
        count = torch.tensor(float(n * comm.get_world_size()), device=means[i].device)
        bn.running_mean.copy_(comm.all_reduce_sum(means[i]) / count)
        bn.running_var.copy_(comm.all_reduce_sum(variances[i]) / count)
        bn.momentum = momenta[i]
    model.train(was_training)
    return n
