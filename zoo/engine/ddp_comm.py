"""How DDP moves gradients between ranks: bucket size and compression (``DDP_CONFIG.BUCKET_CAP_MB``,
``DDP_CONFIG.GRAD_COMPRESSION``).

Compression is one of torch's DDP communication hooks, registered on the wrapped model:

* ``bf16`` / ``fp16``: each bucket is divided by the world size, cast to 16 bits, all-reduced and
  cast back (half the bytes on the wire; each rank's share is rounded once, the sum once more).
* ``powersgd``: every gradient matrix goes as rank-``POWERSGD_RANK`` factors (Vogels et al., 2019;
  torch's ``powerSGD_hook``) with error feedback; vectors (biases, norms) go in full. SlowFast-R50
  at rank 4 sends ~1% of its 138 MB of float32 gradients. The first ``POWERSGD_START_STEP`` steps
  all-reduce in full. Biased, lossy and stateful: its error-feedback memory is not in checkpoints,
  so a resumed run restarts it (resume is then not bitwise).

PowerSGD runs with all gradients in **one bucket**. torch's hook sends a bucket's second factor
from a callback of its first all-reduce, which runs on the communication thread while the backward
pass sends the next buckets; with several buckets the ranks can issue their collectives in
different orders, and gloo then aborts both ("Received data size doesn't match expected size",
seen on SlowFast-R50 with torch 2.14). With one bucket there is one order. The cost: nothing is sent
before the backward pass ends, which the ~100x fewer bytes more than pay for on a slow link.

Over a fast link (NVLink, one node's shared memory) ``none`` is right: compression costs compute
and precision to save bandwidth that is not short. It pays on a slow link between nodes.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from torch.nn.parallel import DistributedDataParallel

COMPRESSIONS = ("none", "bf16", "fp16", "powersgd")

# DDP's bucket cap (MB) that holds every gradient of any model in one bucket.
_ONE_BUCKET_MB = 1 << 20


def ddp_options(cfg) -> Dict[str, Any]:
    """Keyword arguments for :class:`DistributedDataParallel` from ``DDP_CONFIG``."""
    if cfg.DDP_CONFIG.GRAD_COMPRESSION == "powersgd":
        return {"bucket_cap_mb": float(_ONE_BUCKET_MB)}
    return {"bucket_cap_mb": float(cfg.DDP_CONFIG.BUCKET_CAP_MB)}


def register_compression(model: DistributedDataParallel, cfg) -> Optional[Any]:
    """Register ``DDP_CONFIG.GRAD_COMPRESSION``'s communication hook on ``model`` (built with
    :func:`ddp_options`).

    Returns:
        The hook's state: PowerSGD's, or None (the 16-bit hooks keep none).
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

    ddp = cfg.DDP_CONFIG
    kind = ddp.GRAD_COMPRESSION
    if kind == "none":
        return None
    if kind in ("bf16", "fp16"):
        hook = (default_hooks.bf16_compress_hook if kind == "bf16"
                else default_hooks.fp16_compress_hook)
        model.register_comm_hook(None, hook)
        return None
    # DDP settles its bucket after the first step: PowerSGD starts from the third at the earliest.
    state = powersgd.PowerSGDState(
        process_group=None, matrix_approximation_rank=int(ddp.POWERSGD_RANK),
        start_powerSGD_iter=max(2, int(ddp.POWERSGD_START_STEP)), use_error_feedback=True,
        warm_start=True, random_seed=int(cfg.CONFIG.SEED))
    model.register_comm_hook(state, powersgd.powerSGD_hook)
    return state
