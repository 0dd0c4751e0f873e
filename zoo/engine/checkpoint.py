"""Checkpoints: written by rank 0 only, atomically; read with ``torch.load(weights_only=True)``.

A checkpoint is a dict with ``model`` (no ``module.`` prefix), ``optimizer``, ``scheduler``,
``scaler``, ``epoch`` (epochs completed), ``iteration``, ``cfg`` (YAML text), ``rng`` (one entry
per rank, so every rank resumes its own random streams), ``best_top1`` and, with EMA, ``ema``.
"""

from __future__ import annotations

import glob
import os
import random
import re
import shutil
from typing import Any, Dict, List, Optional

import numpy as np
import torch
import torch.nn as nn

from ..utils import comm


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used: unsafe, unreadable, or from a different model/config."""


class CheckpointWriteError(CheckpointError):
    """A checkpoint could not be written (disk full, read-only folder); the previous one is
    intact."""


def _free_space(folder: str) -> str:
    """Free space of the disk holding ``folder`` (or its nearest existing parent), in words."""
    while folder and not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    try:
        free = shutil.disk_usage(folder or ".").free
    except OSError:
        return "free space unknown"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if free < 1024 or unit == "GiB":
            return f"{free:.0f} {unit} free" if unit == "B" else f"{free:.1f} {unit} free"
        free /= 1024
    return ""


def _write_failure(path: str, e: BaseException) -> CheckpointWriteError:
    if isinstance(e, OSError) and e.strerror:
        why = e.strerror
    else:  # torch's zip writer reports a failed write as a RuntimeError
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        why = re.sub(r"\[enforce fail at [^\]]*\] ", "", lines[0]) if lines else type(e).__name__
    return CheckpointWriteError(
        f"could not write checkpoint {path} ({why}; {_free_space(os.path.dirname(path))} there): "
        "the previous checkpoint is intact; free space or point CONFIG.LOG.BASE_PATH at a "
        "writable disk, then resume with CONFIG.TRAIN.AUTO_RESUME True"
    )


def unwrap(model: nn.Module) -> nn.Module:
    """The bare model inside a DDP (or similar) wrapper."""
    return model.module if hasattr(model, "module") else model


def rng_state() -> Dict[str, Any]:
    """RNG states of this process as plain Python values (they pass through all_gather_object
    and ``weights_only`` loading unchanged)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state().tolist(),
    }


def set_rng_state(state: Dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))


def atomic_save(obj: Any, path: str) -> None:
    """Write ``obj`` to ``path`` through a temporary file and a rename, so a crash mid-write
    leaves any previous file at ``path`` intact.

    Raises:
        CheckpointWriteError: the write failed (ENOSPC, a read-only folder...); the temporary
            file is removed and any previous file at ``path`` is untouched.
    """
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except (OSError, RuntimeError) as e:
        try:
            os.remove(tmp)
        except OSError:
            pass  # never created, or the folder is read-only
        raise _write_failure(path, e) from e


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
    """Rank 0 writes ``save_dir/epoch_{epoch}.pth`` (and ``best.pth`` when ``is_best``).

    ``keep_last`` > 0 deletes older epoch files beyond the newest ``keep_last``; ``best.pth`` is
    never deleted by that. Other ranks return None without writing.
    """
    if not comm.is_main_process():
        return None
    path = os.path.join(save_dir, f"epoch_{epoch}.pth")
    try:
        os.makedirs(save_dir, exist_ok=True)
    except OSError as e:
        raise _write_failure(path, e) from e
    atomic_save(state, path)
    if is_best:
        atomic_save(state, os.path.join(save_dir, "best.pth"))
    if keep_last > 0:
        for old in epoch_checkpoints(save_dir)[:-keep_last]:
            os.remove(old)
    return path


def training_state(model, optimizer, scheduler, scaler, ema, epoch: int, iteration: int,
                   cfg_yaml: str, rng: List[Dict[str, Any]], best_top1: float) -> Dict[str, Any]:
    """The checkpoint dict (see the module docstring)."""
    state = {
        "model": unwrap(model).state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else {},
        "scheduler": scheduler.state_dict() if scheduler is not None else {},
        "scaler": scaler.state_dict() if scaler is not None else {},
        "epoch": epoch,
        "iteration": iteration,
        "cfg": cfg_yaml,
        "rng": rng,
        "best_top1": best_top1,
    }
    if ema is not None:
        state["ema"] = ema.state_dict()
    return state


def load_checkpoint(path: str) -> Dict[str, Any]:
    """Read a checkpoint safely (no code runs while unpickling); errors name the file."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint {path!r} does not exist")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(
            f"{path}: refused to load ({first}); zoo loads checkpoints with weights_only=True, "
            "so files that would run code while unpickling are rejected"
        ) from None


def epoch_checkpoints(save_dir: str) -> List[str]:
    """The complete ``epoch_N.pth`` files of ``save_dir``, oldest epoch first (temporary files of
    an interrupted write are never listed)."""
    found = []
    for path in glob.glob(os.path.join(save_dir, "epoch_*.pth")):
        m = re.fullmatch(r"epoch_(\d+)\.pth", os.path.basename(path))
        if m:
            found.append((int(m.group(1)), path))
    return [p for _, p in sorted(found)]


def latest_checkpoint(save_dir: str) -> Optional[str]:
    """The ``epoch_N.pth`` with the largest N in ``save_dir`` (None when there is none)."""
    found = epoch_checkpoints(save_dir)
    return found[-1] if found else None


# Keys that may change between a run and its resumption without changing what is trained.
_RESUME_FREE = ("DDP_CONFIG.", "CONFIG.LOG.", "CONFIG.VAL.", "CONFIG.TEST.", "CONFIG.EXTRA_MODULES",
                "CONFIG.TRAIN.EPOCH_NUM", "CONFIG.TRAIN.AUTO_RESUME", "CONFIG.TRAIN.RESUME_EPOCH",
                "CONFIG.TRAIN.KEEP_LAST", "CONFIG.TRAIN.NONFINITE", "CONFIG.DATA.NUM_WORKERS",
                "CONFIG.DATA.TRAIN_ANNO_PATH", "CONFIG.DATA.TRAIN_DATA_PATH",
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
    return [f"{key}: {a!r} -> {b!r}" for key, a, b in diff_cfg(saved, now, ignore=_RESUME_FREE)]
