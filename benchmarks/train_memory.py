"""Peak memory of one training step with and without activation checkpointing
(``CONFIG.TRAIN.ACT_CHECKPOINT``, the model's ``set_grad_checkpointing``).

Each setting runs in a fresh process (peak RSS only grows within a process): it builds the model,
the batch and the SGD optimizer, notes the resident set size, runs one forward + backward +
optimizer step (fp32) and reports the process's peak RSS (``ru_maxrss``) and its rise over the
resident size before the step: the activations, the gradients and SGD's momentum buffers. On a
CUDA device the model and the batch live on the GPU, and the rows also give the GPU's peak
(``torch.cuda.max_memory_allocated``) and its rise over what was allocated before the step.
The two settings differ only in the activations kept for the backward pass.
"""

from __future__ import annotations

import multiprocessing
import resource
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Dict, List, Optional, Sequence

import torch


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _one_setting(model_name: str, frames: int, size: int, batch: int, act_checkpoint: bool,
                 num_classes: int, model_kwargs: Dict[str, Any], threads: int,
                 seed: int, device: str) -> Dict[str, Any]:
    from zoo.models import create_model
    from zoo.solver.optimizer import make_optimizer

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    model = create_model(model_name, num_classes=num_classes, **model_kwargs).train()
    if act_checkpoint:
        model.set_grad_checkpointing(True)
    g = torch.Generator().manual_seed(seed)
    clips = torch.randn((batch, 3, frames, size, size), generator=g)
    labels = torch.randint(0, num_classes, (batch,), generator=g)
    cuda = torch.device(device).type == "cuda"
    model, clips, labels = model.to(device), clips.to(device), labels.to(device)
    optimizer = make_optimizer("SGD", list(model.parameters()), 0.01, momentum=0.9)
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        cuda_before = torch.cuda.memory_allocated(device) / 2**20
    before = _rss_mb()
    start = time.perf_counter()
    loss = torch.nn.functional.cross_entropy(model(clips), labels)
    loss.backward()
    optimizer.step()
    loss_value = loss.item()  # waits for the device
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    row = {"model": model_name, "batch": batch, "frames": frames, "size": size,
           "act_checkpoint": act_checkpoint, "device": device,
           "threads": torch.get_num_threads(), "rss_before_mb": round(before, 1),
           "peak_rss_mb": round(peak, 1), "step_rise_mb": round(peak - before, 1),
           "step_s": round(seconds, 3), "loss": round(loss_value, 6)}
    if cuda:
        cuda_peak = torch.cuda.max_memory_allocated(device) / 2**20
        row.update(cuda_before_mb=round(cuda_before, 1), peak_cuda_mb=round(cuda_peak, 1),
                   step_rise_cuda_mb=round(cuda_peak - cuda_before, 1))
    return row


def train_step_memory(model_name: str, frames: int, size: int, batch: int,
                      settings: Sequence[bool] = (False, True), num_classes: int = 400,
                      model_kwargs: Optional[Dict[str, Any]] = None, threads: int = 0,
                      seed: int = 0, device: str = "cpu") -> List[Dict[str, Any]]:
    """One row per activation-checkpointing setting (see the module docstring); the same seed,
    weights and batch in each, so the rows' ``loss`` agree (within the device's rounding)."""
    rows = []
    ctx = multiprocessing.get_context("spawn")
    for act_checkpoint in settings:
        with ProcessPoolExecutor(1, mp_context=ctx) as pool:
            rows.append(pool.submit(_one_setting, model_name, frames, size, batch,
                                    act_checkpoint, num_classes, dict(model_kwargs or {}),
                                    threads, seed, str(device)).result())
    return rows
