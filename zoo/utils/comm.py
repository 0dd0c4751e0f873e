"""Rank helpers that answer sensibly with or without a process group.

Everything in zoo asks these functions rather than ``torch.distributed`` directly, so the
``DISTRIBUTED False`` case (one process, no group) needs no special cases elsewhere. The runtime
layout of a job lives here, not in the config: the world size and global rank come from the
process group, the local rank from ``LOCAL_RANK``, and the device and the restart round from
:func:`set_device_index` and :func:`set_restart_round`, which the launcher calls in every process
it runs.
"""

from __future__ import annotations

import os
import time
from typing import Any, List, Optional

import torch
import torch.distributed as dist


def is_dist() -> bool:
    return dist.is_available() and dist.is_initialized()


# gloo's worker threads destroy a finished collective's work, and with it the last reference to
# its tensors, after the rank has read the result. Dropping a tensor a Python object still belongs
# to takes the GIL, and a thread that takes it once the interpreter is finalizing is ended there:
# the process aborts ("terminate called without an active exception", SIGABRT) after a job that
# finished. destroy_process_group does not join those threads while anything (a
# DistributedDataParallel model) still holds the group, so they get the GIL before the exit. A
# job on NCCL has its gloo group too (the preemption watch's), so every backend waits.
# On torch before 2.8 the same wait also keeps the destroy itself from deadlocking: it held the GIL
# while joining the threads (pytorch/pytorch#154976).
_RELEASE_S = 0.1


def leave_process_group() -> None:
    """Destroy this process's process groups, if any. Their worker threads first get
    ``_RELEASE_S`` without the GIL to let go of finished collectives."""
    if not is_dist():
        return
    time.sleep(_RELEASE_S)  # sleeping releases the GIL
    dist.destroy_process_group()


def get_world_size() -> int:
    return dist.get_world_size() if is_dist() else 1


def get_rank() -> int:
    return dist.get_rank() if is_dist() else 0


def get_local_rank() -> int:
    """Index of this process on its node (set by the launcher as LOCAL_RANK)."""
    return int(os.environ.get("LOCAL_RANK", 0))


# This process's device index (-1 = CPU); None until the launcher sets it.
_device_index: Optional[int] = None


def set_device_index(index: Optional[int]) -> None:
    """Record this process's device (the launcher does; -1 = CPU, None = forget it)."""
    global _device_index
    _device_index = index


def device_index_recorded() -> bool:
    """Whether a launcher recorded this process's device (:func:`set_device_index`)."""
    return _device_index is not None


def get_device_index() -> int:
    """This process's CUDA device index, or -1 for CPU.

    Outside a launcher: device 0 when CUDA is available, else -1.
    """
    if _device_index is not None:
        return _device_index
    return 0 if torch.cuda.is_available() else -1


# Restarts of the job before this attempt (0 = the first); set by the launcher.
_restart_round = 0


def set_restart_round(n: int) -> None:
    """Record how many times the job was restarted before this attempt (the launcher does)."""
    global _restart_round
    _restart_round = int(n)


def get_restart_round() -> int:
    """How many times the job was restarted before this attempt: > 0 means continue from the
    newest checkpoint (zoo's launcher with ``DDP_CONFIG.MAX_RESTARTS``, or torchrun's)."""
    return _restart_round


def get_device() -> torch.device:
    """The device this process computes on (``cuda:<index>`` or ``cpu``)."""
    index = get_device_index()
    return torch.device(f"cuda:{index}") if index >= 0 and torch.cuda.is_available() else (
        torch.device("cpu"))


def is_main_process() -> bool:
    return get_rank() == 0


def synchronize() -> None:
    """Barrier across all ranks; a no-op without a process group or with one rank."""
    if is_dist() and get_world_size() > 1:
        dist.barrier()


def all_gather_object(obj: Any) -> List[Any]:
    """Gather a picklable object from every rank; ``[obj]`` without a process group."""
    if not is_dist() or get_world_size() == 1:
        return [obj]
    out: List[Any] = [None] * get_world_size()
    dist.all_gather_object(out, obj)
    return out


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum a tensor over ranks in place (returned for chaining); identity without a group."""
    if is_dist() and get_world_size() > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor
