"""How DDP moves gradients between ranks: bucket size and compression (``DDP_CONFIG.BUCKET_CAP_MB``,
``DDP_CONFIG.GRAD_COMPRESSION``).

Compression is one of torch's DDP communication hooks, registered on the wrapped model:

* ``bf16`` / ``fp16``: each bucket is divided by the world size, cast to 16 bits, all-reduced and
  cast back (half the bytes on the wire; each rank's share is rounded once, the sum once more).

PowerSGD (torch's low-rank hook) is not offered. With a bucket per layer, the ranks issue its
collectives in different orders (its second all-reduce is sent from a callback on gloo's thread
while the backward pass sends the next buckets) and gloo aborts both ranks ("Received data size
doesn't match expected size"). With every gradient in one bucket that order is fixed and steps run,
but a 6-step two-rank run of the tiny SlowFast still died by SIGABRT in 2 of 6 tries (std::terminate
in gloo's threads), with torch 2.14: not safe to ship.

Over a fast link (NVLink, one node's shared memory) ``none`` is right: compression costs compute
and precision to save bandwidth that is not short. It pays on a slow link between nodes.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from torch.nn.parallel import DistributedDataParallel

COMPRESSIONS = ("none", "bf16", "fp16")


def ddp_options(cfg) -> Dict[str, Any]:
    """Keyword arguments for :class:`DistributedDataParallel` from ``DDP_CONFIG``."""
    return {"bucket_cap_mb": float(cfg.DDP_CONFIG.BUCKET_CAP_MB)}


def register_compression(model: DistributedDataParallel, cfg) -> Optional[Any]:
    """Register ``DDP_CONFIG.GRAD_COMPRESSION``'s communication hook on ``model``.

    Returns:
        The hook's state: None (the 16-bit hooks keep none).
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    ddp = cfg.DDP_CONFIG
    kind = ddp.GRAD_COMPRESSION
    if kind == "none":
        return None
    hook = default_hooks.bf16_compress_hook if kind == "bf16" else default_hooks.fp16_compress_hook
    model.register_comm_hook(None, hook)
    return None
