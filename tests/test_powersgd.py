"""DDP_CONFIG.GRAD_COMPRESSION powersgd (zoo/accel/powersgd.py) on two gloo ranks: the mean is
rebuilt exactly where it has rank <= POWERSGD_RANK, every rank applies the same gradient, what a
low rank leaves out is kept as each rank's error, the warm-up steps are the exact mean, and a
channels-last conv net trains with it (several buckets, so several hooks per step)."""

import pytest
import torch
from helpers import cross_entropy_grads, on_two_gloo_ranks

from zoo.accel.ddp_comm import register_compression
from zoo.accel.powersgd import PowerSGDState, make_state, powersgd_hook
from zoo.config import get_cfg
from zoo.train.model_setup import ddp_options

N = 64
STEPS = 6  # 2 warm-up steps, 4 compressed


def _linear():
    torch.manual_seed(0)
    # (64, 64) and (4, 64) weights: compressed at rank 1 or 2; the (4,) bias travels whole
    return torch.nn.Sequential(torch.nn.Linear(N, N, bias=False), torch.nn.ReLU(),
                               torch.nn.Linear(N, 4))


def _sample(rank):
    g = torch.Generator().manual_seed(100 + rank)
    # one sample per rank: each weight's gradient is an outer product (rank 1), the mean rank 2
    return torch.randn(1, N, generator=g), torch.randint(0, 4, (1,), generator=g)


def _grads(model, rank):
    return cross_entropy_grads(model, *_sample(rank))


def _cfg(rank, start=2):
    cfg = get_cfg()
    cfg.DDP_CONFIG.GRAD_COMPRESSION = "powersgd"
    cfg.DDP_CONFIG.POWERSGD_RANK = rank
    cfg.DDP_CONFIG.POWERSGD_START_STEP = start
    cfg.DDP_CONFIG.BUCKET_CAP_MB = 0.001  # every layer its own bucket
    return cfg


def _conv_net():
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Conv3d(3, 8, (1, 3, 3), padding=(0, 1, 1), bias=False),
                              torch.nn.BatchNorm3d(8), torch.nn.ReLU(),
                              torch.nn.Conv3d(8, 16, (3, 1, 1), padding=(1, 0, 0)),
                              torch.nn.AdaptiveAvgPool3d(1), torch.nn.Flatten(),
                              torch.nn.Linear(16, 3))
    return net.to(memory_format=torch.channels_last_3d)


def _watching_hook(state, bucket):
    compressed = state.step >= state.start_step
    fut = powersgd_hook(state, bucket)
    if compressed:
        state.watched.append((bucket.index(), bucket.is_last(), fut.done()))
    return fut


def _rank(rank):
    results = {"local": _grads(_linear(), rank)}
    for r in (1, 2):
        ddp = torch.nn.parallel.DistributedDataParallel(_linear(), **ddp_options(_cfg(r)))
        state = register_compression(ddp, _cfg(r))
        assert isinstance(state, PowerSGDState)
        # steps 0 and 1 whole (the warm-up), then compressed; the weights do not move
        results[r], results[f"error_ptrs{r}"] = [], []
        for _ in range(STEPS):
            results[r].append(_grads(ddp, rank))
            results[f"error_ptrs{r}"].append([state.errors[k].data_ptr()
                                              for k in sorted(state.errors)])
        results[f"errors{r}"] = [state.errors[k] for k in sorted(state.errors)]
    # Each compressed bucket's hook call is watched: is its result already there when the call
    # returns? Four 1 MB layers: DDP's first bucket holds 1 MB, then each layer has its own.
    torch.manual_seed(2)
    mlp = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)])
    g = torch.Generator().manual_seed(200 + rank)
    x, y = torch.randn(2, 512, generator=g), torch.randint(0, 512, (2,), generator=g)
    results["mlp_local"] = cross_entropy_grads(mlp, x, y)  # rank <= 2 each: the mean rank <= 4
    ddp = torch.nn.parallel.DistributedDataParallel(mlp, **ddp_options(_cfg(4)))
    state = make_state(_cfg(4))
    state.watched = []
    ddp.register_comm_hook(state, _watching_hook)
    for _ in range(STEPS):
        results["mlp_applied"] = cross_entropy_grads(ddp, x, y)
    results["watched"] = state.watched
    # A channels-last conv net trains: 12 SGD steps on one fixed batch per rank.
    ddp = torch.nn.parallel.DistributedDataParallel(_conv_net(), **ddp_options(_cfg(2, start=3)))
    register_compression(ddp, _cfg(2, start=3))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(7 + rank)
    x = torch.randn(4, 3, 4, 8, 8, generator=g).contiguous(memory_format=torch.channels_last_3d)
    y = torch.randint(0, 3, (4,), generator=g)
    losses = []
    for _ in range(12):
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    results["conv_losses"] = losses
    results["conv_params"] = [p.detach().clone() for p in ddp.parameters()]
    return results


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("powersgd")
    return on_two_gloo_ranks(_rank, tmp)


def _mean(runs):
    return [(a + b) / 2 for a, b in zip(runs[0]["local"], runs[1]["local"])]


def test_warm_up_steps_are_the_exact_mean(runs):
    for r in (1, 2):
        for step in (0, 1):
            for got, want in zip(runs[0][r][step], _mean(runs)):
                assert torch.equal(got, want)


def test_every_rank_applies_the_same_gradient(runs):
    for r in (1, 2):
        for a, b in zip(runs[0][r][2], runs[1][r][2]):
            assert torch.equal(a, b)
    for a, b in zip(runs[0]["conv_params"], runs[1]["conv_params"]):
        assert torch.equal(a, b)


def test_rank_2_rebuilds_a_rank_2_mean(runs):
    for got, want in zip(runs[0][2][2], _mean(runs)):
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-6 * want.abs().max())


def test_rank_1_is_not_the_mean(runs):
    got, mean = runs[0][1][2], _mean(runs)
    assert torch.equal(got[2], mean[2])  # the bias travels whole
    for i in (0, 1):  # the two weight matrices are rank-2 means, sent at rank 1
        assert not torch.allclose(got[i], mean[i], rtol=1e-2, atol=1e-3 * mean[i].abs().max())


def test_error_feedback_sends_what_was_left_out_later(runs):
    """The same gradients every step: what was applied over the compressed steps plus what the
    ranks still hold is exactly that many means, so the applied average tends to the mean."""
    mean = _mean(runs)
    compressed = runs[0][1][2:]
    for i in (0, 1):
        applied = sum(step[i] for step in compressed)
        held = [sum(run["errors1"][j] for run in runs) for j in range(2)
                if runs[0]["errors1"][j].numel() == mean[i].numel()][0].view(mean[i].shape)
        assert torch.allclose(applied + held, len(compressed) * mean[i],
                              atol=1e-5 * mean[i].abs().max())
        first_miss = (compressed[0][i] - mean[i]).norm()
        assert (applied / len(compressed) - mean[i]).norm() < 0.6 * first_miss


def test_errors_are_kept_in_place(runs):
    """Each matrix's error buffer is allocated once and then updated in place every step (no
    gradient-sized temporaries per step)."""
    for r in (1, 2):
        ptrs = runs[0][f"error_ptrs{r}"]
        assert ptrs[0] == ptrs[1] == []  # the warm-up keeps nothing
        assert len(ptrs[2]) == 2 and ptrs[2] == ptrs[3] == ptrs[-1]


def test_buckets_travel_while_the_backward_pass_goes_on(runs):
    """A compressed bucket's hook returns before its messages are back (its result is finished in
    the next buckets' calls), except the last bucket's, which finishes every bucket of the pass."""
    watched = runs[0]["watched"]
    buckets = 1 + max(index for index, _, _ in watched)
    assert buckets >= 3 and len(watched) == (STEPS - 2) * buckets  # 2 warm-up steps
    for index, last, done in watched:
        assert last == (index == buckets - 1)
        assert done == last, (index, done)


def test_buckets_in_flight_get_the_mean(runs):
    """With several buckets in flight at once, each still gets its own mean (rank 4 rebuilds
    these rank-4 means), the same on both ranks."""
    for i, (a, b) in enumerate(zip(runs[0]["mlp_applied"], runs[1]["mlp_applied"])):
        assert torch.equal(a, b), i
        want = (runs[0]["mlp_local"][i] + runs[1]["mlp_local"][i]) / 2
        assert torch.allclose(a, want, rtol=1e-4, atol=1e-5 * want.abs().max()), i


def test_conv_net_trains_with_it(runs):
    losses = runs[0]["conv_losses"]
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < 0.7 * losses[0], losses


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="POWERSGD_START_STEP"):
        PowerSGDState(rank=4, start_step=1)
    with pytest.raises(ValueError, match="POWERSGD_RANK"):
        PowerSGDState(rank=0)
