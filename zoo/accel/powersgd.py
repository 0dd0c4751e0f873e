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
two ranks issued their collectives in different orders and aborted (see ``ddp_comm.py``). Here the
thread that runs the hook issues every collective, in bucket order, so every rank issues the same
sequence; none is waited for where it is issued. A bucket's three stages (``P`` sent, ``Q`` sent,
result) run in the hook's calls for it and for the next two buckets, and the last bucket's call
finishes them all: a bucket's two small all-reduces travel while the backward pass computes the
next buckets' gradients, and a rank waits for the other only where a message is needed.

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
        self.in_flight: List["_InFlight"] = []  # buckets of this backward pass not yet finished

    def first_q(self, key: Tuple[int, int], cols: int, rank: int) -> torch.Tensor:
        """The starting ``Q`` of matrix ``key`` (bucket, position): seeded, equal on all ranks."""
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + key[0] * 10_007 + key[1])
        return torch.randn(cols, rank, generator=g)


class _InFlight:
    """A compressed bucket between its hook and its result: what its later stages need."""

    def __init__(self, buffer: torch.Tensor) -> None:
        self.buffer = buffer
        self.future: torch.futures.Future = torch.futures.Future()
        self.vectors: List[torch.Tensor] = []
        # key, the bucket's gradient, the gradient as an n x m matrix, error + gradient / world
        self.matrices: List[Tuple[Tuple[int, int], torch.Tensor, torch.Tensor, torch.Tensor]] = []
        self.ps: List[torch.Tensor] = []
        self.qs: List[torch.Tensor] = []
        self.flat = buffer.new_zeros(0)
        self.work: Optional[dist.Work] = None
        self.stage = 1  # 1: P sent, 2: Q sent


def _send(b: _InFlight, parts: List[torch.Tensor], group) -> None:
    """All-reduce ``parts`` as one flat message without waiting; :func:`_receive` waits for it."""
    b.flat = torch.cat(parts) if parts else b.buffer.new_zeros(0)
    b.work = dist.all_reduce(b.flat, group=group, async_op=True) if b.flat.numel() else None


def _receive(b: _InFlight) -> torch.Tensor:
    if b.work is not None:
        b.work.wait()
    return b.flat


def _split(flat: torch.Tensor, sizes: List[int]) -> List[torch.Tensor]:
    return list(torch.split(flat, sizes)) if sizes else []


def _send_ps(state: "PowerSGDState", bucket: dist.GradBucket, world: int) -> _InFlight:
    """Stage 1: the error feedback, then message 1 (the vectors as they are, ``P = M Q`` of every
    matrix), sent without waiting."""
    b = _InFlight(bucket.buffer())
    scale = 1.0 / world
    for i, grad in enumerate(bucket.gradients()):
        n = grad.shape[0] if grad.dim() > 1 else 0
        m = grad.numel() // n if n else 0
        r = min(state.rank, n, m)
        if grad.dim() < 2 or r * (n + m) >= n * m:
            b.vectors.append(grad.div_(world))
            continue
        key = (bucket.index(), i)
        mat = grad.reshape(n, m)  # a view: the bucket's gradients are contiguous views
        acc = state.errors.get(key)
        if acc is None:
            acc = mat.float().mul(scale)  # a new tensor, this rank's from now on
            state.errors[key] = acc
        else:
            acc.add_(mat, alpha=scale)
        if key not in state.qs:
            state.qs[key] = state.first_q(key, m, r)
        b.matrices.append((key, grad, mat, acc))
    b.ps = [acc @ state.qs[key] for key, _, _, acc in b.matrices]
    _send(b, [v.reshape(-1).float() for v in b.vectors] + [p.reshape(-1) for p in b.ps],
          state.group)
    return b


def _send_qs(state: "PowerSGDState", b: _InFlight) -> None:
    """Stage 2: message 1 arrived; orthonormalise the ``P``s and send ``Q = M^T P``."""
    parts = _split(_receive(b), [v.numel() for v in b.vectors] + [p.numel() for p in b.ps])
    for v, part in zip(b.vectors, parts):
        v.copy_(part.view(v.shape))
    b.ps = [torch.linalg.qr(part.view(p.shape)).Q for p, part in zip(b.ps, parts[len(b.vectors):])]
    b.qs = [(p.t() @ acc).t() for (_, _, _, acc), p in zip(b.matrices, b.ps)]  # 2x M^T @ P's speed
    _send(b, [q.reshape(-1) for q in b.qs], state.group)
    b.stage = 2


def _apply(state: "PowerSGDState", b: _InFlight, world: int) -> None:
    """Stage 3: message 2 arrived; the bucket gets ``P Q^T``, each error what it left out."""
    for (key, grad, mat, acc), p, q, part in zip(b.matrices, b.ps, b.qs,
                                                 _split(_receive(b), [q.numel() for q in b.qs])):
        q = part.view(q.shape)
        # P Q^T is the approximated mean of every rank's share; this rank keeps its share of what
        # was left out (the errors of all ranks add up to mean - P Q^T, sent again next step).
        acc.addmm_(p, q.t(), alpha=-1.0 / world)
        state.qs[key] = q
        if mat.dtype == torch.float32 and mat.data_ptr() == grad.data_ptr() \
                and mat.is_contiguous():
            torch.mm(p, q.t(), out=mat)  # straight into the bucket
        else:
            grad.copy_((p @ q.t()).view(grad.shape))
    b.future.set_result(b.buffer)


def _advance(state: "PowerSGDState", world: int) -> None:
    """Move every bucket in flight one stage on: the one whose ``P`` was sent sends its ``Q``,
    then the one whose ``Q`` was sent gets its result."""
    sent_q = [b for b in state.in_flight if b.stage == 2]
    for b in state.in_flight:
        if b.stage == 1:
            _send_qs(state, b)
    for b in sent_q:
        _apply(state, b, world)
        state.in_flight.remove(b)


def powersgd_hook(state: "PowerSGDState",
                  bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: the bucket's averaged gradient, low-rank compressed (see above).

    Each matrix is worked on in place, in memory this rank keeps anyway: its error buffer becomes
    ``error + gradient / world``, both factors are taken from it, the approximation is subtracted
    from it with one ``addmm`` (the new error), and the approximation is written straight into
    the bucket. Five reads and three writes of the gradient's size, no temporary of that size.

    The three stages of a bucket run in this hook's calls for it and the next two buckets (the
    last bucket's call finishes them all), so a bucket's messages travel while the backward pass
    computes the next buckets' gradients, and every rank issues the same collectives in the same
    order (this thread issues all of them, in bucket order).
    """
    group = state.group
    world = dist.get_world_size(group)
    if state.step < state.start_step:
        buffer = bucket.buffer().div_(world)
        fut = dist.all_reduce(buffer, group=group, async_op=True).get_future()
        if bucket.is_last():
            state.step += 1
        return fut.then(lambda f: f.value()[0])
    if bucket.index() == 0:
        state.in_flight.clear()  # a new backward pass: nothing of an aborted one is finished
    fresh = _send_ps(state, bucket, world)
    _advance(state, world)
    state.in_flight.append(fresh)
    if bucket.is_last():
        while state.in_flight:
            _advance(state, world)
        state.step += 1
    return fresh.future


def make_state(cfg, group: Optional[object] = None) -> PowerSGDState:
    """The :class:`PowerSGDState` that ``DDP_CONFIG`` asks for."""
    ddp = cfg.DDP_CONFIG
    return PowerSGDState(int(ddp.POWERSGD_RANK), int(ddp.POWERSGD_START_STEP), group)
