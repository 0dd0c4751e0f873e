"""PowerSGD gradient compression (Vogels et al., NeurIPS 2019) as a DDP communication hook.

Each gradient of a bucket with two or more dimensions is viewed as a matrix ``M`` (``n`` rows =
output channels) and sent as two thin factors of rank ``r`` (``DDP_CONFIG.POWERSGD_RANK``):

1. ``P = M Q`` (``n x r``) is all-reduced and orthonormalised;
2. ``Q = M^T P`` (``m x r``) is all-reduced;
3. every rank uses ``P Q^T`` as the averaged gradient.

What the approximation leaves out is kept on each rank and added to its next gradient (error
feedback), and each ``Q`` starts from the previous step's (warm start), so a low rank loses little
over many steps. Vectors (biases, batch-norm parameters) and matrices whose factors would not be
smaller than the matrix travel uncompressed in the first message. For the first
``DDP_CONFIG.POWERSGD_START_STEP`` steps (at least 2: DDP regroups its buckets after the first
step) buckets are all-reduced whole.

Why zoo's own hook rather than torch's ``powerSGD_hook``: torch's sends its second all-reduce from
a callback on the communication thread while the backward pass sends later buckets, so over gloo
two ranks issued their collectives in different orders and aborted (see ``ddp_comm.py``). Here a
bucket's collectives are issued and waited for by the thread that runs the hook, bucket after
bucket, so every rank issues the same sequence. The cost is that a bucket's two small
all-reduces (together ~1.6% of the gradient's bytes at rank 4 for SlowFast-R50) do not overlap
the backward pass.

The errors and ``Q`` factors are per rank and are not saved in checkpoints: a resumed run starts
them from zero (and repeats the warm-up), so with ``powersgd`` a resume is not bit-exact.
"""

from typing import Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

# No "from __future__ import annotations" here: DDP checks the hook's annotations as objects.

__all__ = ["PowerSGDState", "powersgd_hook"]

MIN_START_STEP = 2  # DDP rebuilds its buckets after the first step


class PowerSGDState:
    """What :func:`powersgd_hook` keeps between steps on one rank.

    Args:
        rank: Rank ``r`` of the factors.
        start_step: Steps all-reduced whole before compression starts (>= 2).
        group: The process group (None = the default one).
        seed: Seed of the first ``Q`` factors (the same on every rank).
    """

    def __init__(self, rank: int = 4, start_step: int = 10, group=None, seed: int = 0) -> None:
        if rank < 1:
            raise ValueError(f"DDP_CONFIG.POWERSGD_RANK must be >= 1, got {rank}")
        if start_step < MIN_START_STEP:
            raise ValueError(f"DDP_CONFIG.POWERSGD_START_STEP must be >= {MIN_START_STEP} (DDP "
                             f"regroups its buckets after the first step), got {start_step}")
        self.rank, self.start_step, self.group, self.seed = rank, start_step, group, seed
        self.step = 0
        self.errors: Dict[Tuple[int, int], torch.Tensor] = {}
        self.qs: Dict[Tuple[int, int], torch.Tensor] = {}

    def first_q(self, key: Tuple[int, int], cols: int, rank: int) -> torch.Tensor:
        """The starting ``Q`` of matrix ``key`` (bucket, position): seeded, equal on all ranks."""
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + key[0] * 10_007 + key[1])
        return torch.randn(cols, rank, generator=g)


def _done(tensor: torch.Tensor) -> torch.futures.Future:
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(tensor)
    return fut


def _all_reduce(flat: torch.Tensor, group) -> None:
    if flat.numel():
        dist.all_reduce(flat, group=group)


def _split(flat: torch.Tensor, sizes: List[int]) -> List[torch.Tensor]:
    return list(torch.split(flat, sizes)) if sizes else []


def powersgd_hook(state: "PowerSGDState",
                  bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: the bucket's averaged gradient, low-rank compressed (see above).

    Each matrix is worked on in place, in memory this rank keeps anyway: its error buffer becomes
    ``error + gradient / world``, both factors are taken from it, the approximation is subtracted
    from it with one ``addmm`` (the new error), and the approximation is written straight into
    the bucket. Five reads and three writes of the gradient's size, no temporary of that size.
    """
    buffer = bucket.buffer()
    group = state.group
    world = dist.get_world_size(group)
    if state.step < state.start_step:
        buffer.div_(world)
        dist.all_reduce(buffer, group=group)
        if bucket.is_last():
            state.step += 1
        return _done(buffer)

    scale = 1.0 / world
    index = bucket.index()
    vectors: List[torch.Tensor] = []
    # key, the bucket's gradient, the gradient as an n x m matrix, error + gradient / world
    matrices: List[Tuple[Tuple[int, int], torch.Tensor, torch.Tensor, torch.Tensor]] = []
    for i, grad in enumerate(bucket.gradients()):
        n = grad.shape[0] if grad.dim() > 1 else 0
        m = grad.numel() // n if n else 0
        r = min(state.rank, n, m)
        if grad.dim() < 2 or r * (n + m) >= n * m:
            vectors.append(grad.div_(world))
            continue
        key = (index, i)
        mat = grad.reshape(n, m)  # a view: the bucket's gradients are contiguous views
        acc = state.errors.get(key)
        if acc is None:
            acc = mat.float().mul(scale)  # a new tensor, this rank's from now on
        else:
            acc.add_(mat, alpha=scale)
        if key not in state.qs:
            state.qs[key] = state.first_q(key, m, r)
        matrices.append((key, grad, mat, acc))

    # Message 1: the vectors as they are, and P = M Q of every matrix.
    ps = [acc @ state.qs[key] for key, _, _, acc in matrices]
    first = torch.cat([v.reshape(-1).float() for v in vectors] + [p.reshape(-1) for p in ps]) \
        if vectors or ps else buffer.new_zeros(0)
    _all_reduce(first, group)
    parts = _split(first, [v.numel() for v in vectors] + [p.numel() for p in ps])
    for v, part in zip(vectors, parts):
        v.copy_(part.view(v.shape))
    ps = [torch.linalg.qr(part.view(p.shape)).Q for p, part in zip(ps, parts[len(vectors):])]

    # Message 2: Q = M^T P of every matrix; then each rank applies P Q^T and keeps what it missed.
    qs = [(p.t() @ acc).t() for (_, _, _, acc), p in zip(matrices, ps)]  # 2x M^T @ P's speed
    second = torch.cat([q.reshape(-1) for q in qs]) if qs else buffer.new_zeros(0)
    _all_reduce(second, group)
    for (key, grad, mat, acc), p, q, part in zip(matrices, ps, qs,
                                                 _split(second, [q.numel() for q in qs])):
        q = part.view(q.shape)
        # P Q^T is the approximated mean of every rank's share; this rank keeps its share of what
        # was left out (the errors of all ranks add up to mean - P Q^T, sent again next step).
        state.errors[key] = acc.addmm_(p, q.t(), alpha=-scale)
        state.qs[key] = q
        if mat.dtype == torch.float32 and mat.data_ptr() == grad.data_ptr() \
                and mat.is_contiguous():
            torch.mm(p, q.t(), out=mat)  # straight into the bucket
        else:
            grad.copy_((p @ q.t()).view(grad.shape))
    if bucket.is_last():
        state.step += 1
    return _done(buffer)


def make_state(cfg, group: Optional[object] = None) -> PowerSGDState:
    """The :class:`PowerSGDState` that ``DDP_CONFIG`` asks for."""
    ddp = cfg.DDP_CONFIG
    return PowerSGDState(int(ddp.POWERSGD_RANK), int(ddp.POWERSGD_START_STEP), group)
