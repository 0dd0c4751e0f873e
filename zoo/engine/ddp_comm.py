"""How DDP moves gradients between ranks: bucket size and compression (``DDP_CONFIG.BUCKET_CAP_MB``,
``DDP_CONFIG.GRAD_COMPRESSION``).

Compression is one of torch's DDP communication hooks, registered on the wrapped model:

* ``bf16`` / ``fp16``: each bucket is divided by the world size, cast to 16 bits, all-reduced and
  cast back (half the bytes on the wire; each rank's share is rounded once, the sum once more).
* ``powersgd``: each bucket's large matrices go as rank-``POWERSGD_RANK`` factors (Vogels et al.,
  2019), with error feedback; the first ``POWERSGD_START_STEP`` steps all-reduce in full. Biased,
  lossy and stateful: its error-feedback memory is not in checkpoints, so a resumed run restarts it
  (resume is then not bitwise), and the loss should be watched against ``none``
  (``zoo-benchmark scaling --nodes 2`` prints both).

Over a fast link (NVLink, one node's shared memory) ``none`` is right: compression costs compute
and precision to save bandwidth that is not short. It pays on a slow link between nodes.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from torch.nn.parallel import DistributedDataParallel

COMPRESSIONS = ("none", "bf16", "fp16", "powersgd")


def ddp_options(cfg) -> Dict[str, Any]:
    """Keyword arguments for :class:`DistributedDataParallel` from ``DDP_CONFIG``."""
    return {"bucket_cap_mb": float(cfg.DDP_CONFIG.BUCKET_CAP_MB)}


def register_compression(model: DistributedDataParallel, cfg) -> Optional[Any]:
    """Register ``DDP_CONFIG.GRAD_COMPRESSION``'s communication hook on ``model``.

    Returns:
        The hook's state (PowerSGD's), or None.
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
    # PowerSGD needs two full all-reduces first (DDP settles its buckets after step one).
    state = powersgd.PowerSGDState(
        process_group=None, matrix_approximation_rank=int(ddp.POWERSGD_RANK),
        start_powerSGD_iter=max(2, int(ddp.POWERSGD_START_STEP)), use_error_feedback=True,
        warm_start=True, random_seed=int(cfg.CONFIG.SEED))
    model.register_comm_hook(state, powersgd.powerSGD_hook)
    return state
