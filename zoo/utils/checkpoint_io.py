"""The checkpoint file format and its safe reads and atomic writes, for every writer of zoo files.

A zoo checkpoint is a dict with ``model`` (a state dict without ``module.`` prefixes),
``optimizer``, ``scheduler``, ``scaler``, ``epoch`` (epochs completed), ``iteration``, ``cfg``
(YAML text), ``rng`` (one entry per rank, so every rank resumes its own random streams), in that
order, plus optional keys: ``best_top1``, ``best_value``, ``stale_validations``, ``ema`` and
``classes`` (training: the training data's class names, entry ``i`` naming class ``i``),
``converted_from`` (the converter).
:func:`make_checkpoint` builds it, :func:`atomic_save` writes it and :func:`load_checkpoint`
reads it with ``torch.load(weights_only=True)``.

This module sits below ``zoo.models``, ``zoo.train`` and ``zoo.infer`` (the trainer and the
converter both write through it; testing and prediction find and read checkpoints with it), and
owns the checkpoint file names (``epoch_N.pth``, mid-epoch ``preempt_epoch{E}_iter{N}.pth``);
training-specific parts (RNG gathering, resume) live in ``zoo.train.checkpoint``. torch is
imported inside the functions, so importing this is cheap.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
from typing import Any, Dict, List, Optional, Tuple

from .errors import UserError

# The keys every zoo checkpoint has, in the order they are written.
CHECKPOINT_KEYS = ("model", "optimizer", "scheduler", "scaler", "epoch", "iteration", "cfg", "rng")

# What a failed training checkpoint write tells the user to do (the default of atomic_save).
RESUME_HINT = ("free space or point CONFIG.LOG.BASE_PATH at a writable disk, then resume with "
               "CONFIG.TRAIN.AUTO_RESUME True")


class CheckpointError(UserError, RuntimeError):
    """A checkpoint cannot be used: unsafe, unreadable, or from a different model/config."""


class CheckpointWriteError(CheckpointError):
    """A checkpoint could not be written (disk full, read-only folder); the previous one is
    intact."""


def make_checkpoint(model_state: Dict[str, Any], cfg_yaml: str, *, optimizer=None, scheduler=None,
                    scaler=None, epoch: int = 0, iteration: int = 0, rng: Any = None,
                    **extra: Any) -> Dict[str, Any]:
    """The checkpoint dict (see the module docstring); empty parts are written as ``{}``.

    Args:
        model_state: The bare model's state dict.
        cfg_yaml: The config as YAML text.
        optimizer, scheduler, scaler: Their state dicts (None = not saved).
        epoch: Epochs completed.
        iteration: Optimizer steps taken.
        rng: Every rank's RNG states (None = not saved).
        **extra: Optional keys, appended after the standard ones.
    """
    state = {
        "model": model_state,
        "optimizer": optimizer if optimizer is not None else {},
        "scheduler": scheduler if scheduler is not None else {},
        "scaler": scaler if scaler is not None else {},
        "epoch": epoch,
        "iteration": iteration,
        "cfg": cfg_yaml,
        "rng": rng if rng is not None else {},
    }
    state.update(extra)
    return state


def recorded_config(state: Any) -> Dict[str, Any]:
    """The config a checkpoint records (its ``cfg`` YAML text) as a dict; ``{}`` when it has
    none or the text is not a YAML mapping."""
    import yaml

    text = state.get("cfg") if isinstance(state, dict) else None
    if not isinstance(text, str) or not text:
        return {}
    try:
        saved = yaml.safe_load(text)
    except yaml.YAMLError:
        return {}
    return saved if isinstance(saved, dict) else {}


def size_in_words(nbytes: float) -> str:
    """``nbytes`` as B, KiB, MiB or GiB with one decimal (whole bytes below 1 KiB)."""
    for unit in ("B", "KiB", "MiB"):
        if nbytes < 1024:
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.1f} GiB"


def _free_bytes(folder: str) -> Optional[int]:
    """Free bytes of the disk holding ``folder`` (or its nearest existing parent); None when
    unknown."""
    while folder and not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    try:
        return shutil.disk_usage(folder or ".").free
    except OSError:
        return None


def _free_space(folder: str) -> str:
    """:func:`_free_bytes` in words."""
    free = _free_bytes(folder)
    return "free space unknown" if free is None else f"{size_in_words(free)} free"


# Free space below this when a write fails means the disk was full.
_FULL_BELOW = 1 << 20


def write_failure(path: str, e: BaseException, hint: str = RESUME_HINT,
                  full: Optional[Tuple[int, int]] = None) -> CheckpointWriteError:
    """The one-line error for a failed write of ``path``: why, the free space there, what is
    left to resume from, the fix.

    Args:
        path: The file being written.
        e: What the write raised.
        hint: The fix to suggest.
        full: ``(bytes written, bytes free)`` measured when the write failed, before its partial
            file was removed: torch's zip writer reports a full disk as "unexpected pos".
    """
    if isinstance(e, OSError) and e.strerror:
        why = e.strerror
    elif full is not None and full[1] < _FULL_BELOW:
        why = f"No space left on device: the disk filled up after {size_in_words(full[0])} of it"
    else:  # torch's zip writer reports a failed write as a RuntimeError
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        why = re.sub(r"\[enforce fail at [^\]]*\] \.? ?", "", lines[0]) if lines else type(
            e).__name__
    folder = os.path.dirname(path)
    before = [p for p in _checkpoint_files(folder) if p != path] if os.path.isdir(folder) else []
    if os.path.isfile(path):
        kept = f"the previous {os.path.basename(path)} is intact"
    elif before:
        kept = (f"the earlier checkpoints are intact (newest: "
                f"{os.path.basename(max(before, key=os.path.getmtime))})")
    else:
        kept = "no earlier checkpoint is there"
    return CheckpointWriteError(
        f"could not write checkpoint {path} ({why}; {_free_space(folder)} there now): {kept}; "
        f"{hint}")


# A checkpoint being written is at a temporary name, renamed to its final name once complete:
# the final name, ".tmp.", the writer's process id. PARTIAL_RE matches those of training
# checkpoints (what remove_partial_writes deletes).
PARTIAL_RE = re.compile(r"(?:epoch_\d+|best|preempt_epoch\d+_iter\d+)\.pth\.tmp\.\d+")


def _temporary_name(path: str) -> str:
    return f"{path}.tmp.{os.getpid()}"


def _discard(tmp: str) -> None:
    """Remove the temporary file of a failed write, if there is one."""
    try:
        os.remove(tmp)
    except OSError:
        pass  # never created, or the folder is read-only


def atomic_save(obj: Any, path: str, hint: str = RESUME_HINT) -> None:
    """Write ``obj`` to ``path`` through a temporary file and a rename, so a crash mid-write
    leaves any previous file at ``path`` intact.

    Args:
        obj: What ``torch.save`` writes.
        path: The final file name.
        hint: What the error message tells the user to do when the write fails.

    Raises:
        CheckpointWriteError: the write failed (ENOSPC, a read-only folder...); the temporary
            file is removed and any previous file at ``path`` is untouched.
    """
    import torch

    tmp = _temporary_name(path)
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except (OSError, RuntimeError) as e:
        full = (_size(tmp), _free_bytes(os.path.dirname(tmp)))
        _discard(tmp)
        raise write_failure(path, e, hint, None if full[1] is None else full) from e


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def atomic_link(src: str, dst: str, hint: str = RESUME_HINT) -> None:
    """Give the complete file ``src`` the second name ``dst``, atomically (through a temporary
    name and a rename, as :func:`atomic_save`): a hard link, so nothing is serialised or
    written twice, or a copy where the filesystem has no hard links.

    The two names then stay one file until one is replaced or deleted; zoo never changes a
    checkpoint file in place (every write is a new file renamed over the old name), so a later
    write of ``src`` or the removal of ``src`` leaves ``dst`` as it was.

    Raises:
        CheckpointWriteError: neither a link nor a copy could be made; any previous file at
            ``dst`` is untouched.
    """
    tmp = _temporary_name(dst)
    try:
        if os.path.lexists(tmp):
            os.remove(tmp)
        try:
            os.link(src, tmp)
        except OSError:  # no hard links on this filesystem (some network and FUSE mounts)
            with open(src, "rb") as fin, open(tmp, "wb") as fout:
                shutil.copyfileobj(fin, fout, 16 << 20)
                fout.flush()
                os.fsync(fout.fileno())
        os.replace(tmp, dst)
    except OSError as e:
        _discard(tmp)
        raise write_failure(dst, e, hint) from e


def remove_partial_writes(folder: str) -> List[Tuple[str, int]]:
    """Delete the temporary files of training checkpoint writes cut short in ``folder`` (a
    process killed while writing leaves one, as large as the checkpoint it was writing), and
    return their ``(name, size in bytes)``. Call it only where no other process writes
    checkpoints to ``folder``: at the start of a run, before its first write."""
    removed = []
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return removed
    for name in names:
        if PARTIAL_RE.fullmatch(name):
            path = os.path.join(folder, name)
            try:
                size = os.path.getsize(path)
                os.remove(path)
            except FileNotFoundError:
                continue
            removed.append((name, size))
    return removed


def mappable(path: str) -> bool:
    """Whether ``torch.load(path, mmap=True)`` can map the file's tensors instead of reading
    them: a zip archive, as torch.save writes since torch 1.6 (not the legacy format)."""
    import zipfile

    return zipfile.is_zipfile(path)


def load_checkpoint(path: str, mmap: bool = False) -> Dict[str, Any]:
    """Read a checkpoint safely (no code runs while unpickling); errors name the file and say
    what it is instead: a folder (its newest checkpoint named), a file cut short, not a
    checkpoint at all, or one that would run code. ``mmap``: map its tensors rather than read
    them, where the file's format allows (:func:`mappable`), for a caller that looks at what a
    file holds before it loads it; not for weights that are used, as a mapped load skips the
    full read's check of each tensor's record size."""
    import torch

    if os.path.isdir(path):
        newest = max(_checkpoint_files(path), key=os.path.getmtime, default=None)
        raise FileNotFoundError(
            f"checkpoint {path!r} is a folder: give a checkpoint file"
            + (f", e.g. its newest, {newest!r}" if newest else " (none is in it)"))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint {path!r} does not exist")
    try:
        return torch.load(path, map_location="cpu", weights_only=True,
                          mmap=mmap and mappable(path))
    except Exception as e:
        what, refused = load_failure(path, e)
        if not refused:
            raise CheckpointError(f"{path}: {what}") from None
        raise CheckpointError(
            f"{path}: refused to load ({what}); zoo loads checkpoints with weights_only=True, so "
            "files that would run code while unpickling are rejected") from None


def _checkpoint_files(folder: str) -> List[str]:
    """Checkpoint files in ``folder`` and the ``checkpoints`` folder of a run folder."""
    return [p for pattern in ("*.pth", "*.pt", os.path.join("checkpoints", "*.pth"))
            for p in glob.glob(os.path.join(folder, pattern)) if os.path.isfile(p)]


# The lines of torch.load's weights_only error that are not its cause.
_TORCH_LOAD_BOILERPLATE = ("Weights only load failed", "Please file an issue",
                           "Check the documentation of torch.load")


def load_failure(path: str, error: BaseException) -> Tuple[str, bool]:
    """Why ``torch.load(path, weights_only=True)`` raised ``error``: ``(what, refused)``, with
    ``refused`` True when the file is a checkpoint whose unpickling would build or run something
    weights_only does not allow (``what`` is then torch's cause), False when it is cut short or
    not a checkpoint at all (told from its first bytes)."""
    import zipfile

    with open(path, "rb") as f:
        head = f.read(4)
    if head == b"PK\x03\x04" and not zipfile.is_zipfile(path):
        return ("cut short or damaged (torch.save's zip format without its end): copy or "
                "download it again"), False
    if head != b"PK\x03\x04" and not head.startswith(b"\x80"):
        return (f"not a PyTorch checkpoint (it starts with {head!r}, neither torch.save's zip "
                "format nor a pickle)"), False
    # torch's message wraps the cause (an unsupported global names what would be built or run)
    # in paragraphs about its weights_only default, worded differently from release to release.
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    found = re.search(r"WeightsUnpickler error:\s*(.+)", str(error))
    causes = [ln for ln in lines if not ln.startswith(_TORCH_LOAD_BOILERPLATE)
              and not ln.endswith("WeightsUnpickler error:")]
    return (found.group(1).strip() if found else causes[0] if causes
            else lines[0] if lines else type(error).__name__), True


# A mid-epoch checkpoint written on a preemption signal (zoo/launch/preemption.py): E is the epoch
# in progress (1-based), N the optimizer steps taken. Its name does not start with "epoch_", so
# RESUME_EPOCH, KEEP_LAST and scripts that glob epoch_*.pth never take it for an epoch's end.
PREEMPT_NAME = "preempt_epoch{epoch}_iter{iteration}.pth"
PREEMPT_RE = re.compile(r"preempt_epoch(\d+)_iter(\d+)\.pth")


def checkpoint_position(path: str) -> Optional[tuple]:
    """Where in training a checkpoint file name says it was written: ``(epochs completed,
    0)`` for ``epoch_N.pth``, ``(epochs completed, optimizer steps)`` for a mid-epoch one (after
    every epoch-end file of the same epoch count, before the next)."""
    name = os.path.basename(path)
    m = re.fullmatch(r"epoch_(\d+)\.pth", name)
    if m:
        return (int(m.group(1)), 0)
    m = PREEMPT_RE.fullmatch(name)
    if m:
        return (int(m.group(1)) - 1, int(m.group(2)))
    return None


def epoch_checkpoints(save_dir: str) -> List[str]:
    """The complete ``epoch_N.pth`` files of ``save_dir``, oldest epoch first (temporary files of
    an interrupted write are never listed)."""
    found = []
    for path in glob.glob(os.path.join(save_dir, "epoch_*.pth")):
        m = re.fullmatch(r"epoch_(\d+)\.pth", os.path.basename(path))
        if m:
            found.append((int(m.group(1)), path))
    return [p for _, p in sorted(found)]


def latest_checkpoint(save_dir: str, mid_epoch: bool = True) -> Optional[str]:
    """The newest checkpoint of ``save_dir``: the ``epoch_N.pth`` with the largest N or, with
    ``mid_epoch``, a mid-epoch ``preempt_epoch{E}_iter{N}.pth`` written after it (None when
    there is none)."""
    found = [(checkpoint_position(p), p) for p in epoch_checkpoints(save_dir)]
    if mid_epoch:
        found += [(checkpoint_position(p), p)
                  for p in glob.glob(os.path.join(save_dir, "preempt_epoch*_iter*.pth"))
                  if checkpoint_position(p) is not None]
    return max(found)[1] if found else None
