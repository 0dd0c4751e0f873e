"""Gradient compression between ranks (``DDP_CONFIG.GRAD_COMPRESSION``).

Compression is a DDP communication hook, registered on the wrapped model:

* ``bf16`` / ``fp16`` (torch's hooks): each bucket is divided by the world size, cast to 16 bits,
  all-reduced and cast back (half the bytes on the wire; each rank's share is rounded once, the
  sum once more).
* ``powersgd``: zoo's PowerSGD hook (``powersgd.py``): each weight's gradient travels as two
  rank-``POWERSGD_RANK`` factors with error feedback, after ``POWERSGD_START_STEP`` uncompressed
  steps. zoo does not use torch's ``powerSGD_hook``: it sends its second all-reduce from a callback
  on gloo's thread while the backward pass sends the next buckets, so the ranks issued collectives
  in different orders and gloo aborted both ("Received data size doesn't match expected size");
  with one bucket a two-rank run still died by SIGABRT in 2 of 6 tries (torch 2.14).

Over a fast link (NVLink, one node's shared memory) ``none`` is right: compression costs compute
and precision to save bandwidth that is not short. It pays on a slow link between nodes.
"""

from __future__ import annotations

from typing import Any, Optional

from torch.nn.parallel import DistributedDataParallel

from .powersgd import make_state, powersgd_hook

COMPRESSIONS = ("none", "bf16", "fp16", "powersgd")


def register_compression(model: DistributedDataParallel, cfg) -> Optional[Any]:
    """Register ``DDP_CONFIG.GRAD_COMPRESSION``'s communication hook on ``model``.

    Returns:
        The hook's state: None for the 16-bit hooks (they keep none), the
        :class:`~zoo.accel.powersgd.PowerSGDState` for ``powersgd``.
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    ddp = cfg.DDP_CONFIG
    kind = ddp.GRAD_COMPRESSION
    if kind == "none":
        return None
    if kind == "powersgd":
        state = make_state(cfg)
        model.register_comm_hook(state, powersgd_hook)
        return state
    hook = default_hooks.bf16_compress_hook if kind == "bf16" else default_hooks.fp16_compress_hook
    model.register_comm_hook(None, hook)
    return None
