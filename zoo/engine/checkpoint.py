"""Checkpoints: written by rank 0 only, atomically; read with ``torch.load(weights_only=True)``.

A checkpoint is a dict with ``model`` (no ``module.`` prefix), ``optimizer``, ``scheduler``,
``scaler``, ``epoch`` (epochs completed), ``iteration``, ``cfg`` (YAML text) and ``rng``.
"""

from __future__ import annotations

import glob
import os
import random
import re
from typing import Any, Dict, Optional

import numpy as np
import torch
import torch.nn as nn

from ..utils import comm


def unwrap(model: nn.Module) -> nn.Module:
    """The bare model inside a DDP (or similar) wrapper."""
    return model.module if hasattr(model, "module") else model


def rng_state() -> Dict[str, Any]:
    """RNG states of this process in types that ``weights_only`` loading accepts."""
    np_state = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [np_state[0], torch.from_numpy(np_state[1].copy()), *map(float, np_state[2:])],
        "torch": torch.get_rng_state(),
    }


def set_rng_state(state: Dict[str, Any]) -> None:
    random.setstate(tuple(state["python"][:1]) + (tuple(state["python"][1]),)
                    + tuple(state["python"][2:]))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), int(pos), int(has_gauss), cached))
    torch.set_rng_state(state["torch"])


def atomic_save(obj: Any, path: str) -> None:
    """Write ``obj`` to ``path`` through a temporary file and a rename, so a crash mid-write
    leaves any previous file at ``path`` intact."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_checkpoint(
    save_dir: str,
    model: nn.Module,
    optimizer: Optional[torch.optim.Optimizer],
    scheduler: Any,
    epoch: int,
    iteration: int,
    cfg_yaml: str,
) -> Optional[str]:
    """Rank 0 writes ``save_dir/epoch_{epoch}.pth``; other ranks return None."""
    if not comm.is_main_process():
        return None
    os.makedirs(save_dir, exist_ok=True)
    state = {
        "model": unwrap(model).state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else {},
        "scheduler": scheduler.state_dict() if scheduler is not None else {},
        "scaler": {},
        "epoch": epoch,
        "iteration": iteration,
        "cfg": cfg_yaml,
        "rng": rng_state(),
    }
    path = os.path.join(save_dir, f"epoch_{epoch}.pth")
    atomic_save(state, path)
    return path


def load_checkpoint(path: str) -> Dict[str, Any]:
    """Read a checkpoint safely (no code runs while unpickling); errors name the file."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint {path!r} does not exist")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RuntimeError(
            f"{path}: refused to load ({first}); zoo loads checkpoints with weights_only=True, "
            "so files that would run code while unpickling are rejected"
        ) from None


def latest_checkpoint(save_dir: str) -> Optional[str]:
    """The ``epoch_N.pth`` with the largest N in ``save_dir`` (None when there is none)."""
    best, best_epoch = None, -1
    for path in glob.glob(os.path.join(save_dir, "epoch_*.pth")):
        m = re.fullmatch(r"epoch_(\d+)\.pth", os.path.basename(path))
        if m and int(m.group(1)) > best_epoch:
            best, best_epoch = path, int(m.group(1))
    return best
