"""DDP_CONFIG.GRAD_COMPRESSION and BUCKET_CAP_MB: two gloo ranks compute one step's gradients with
each setting; the reference is computed here, from each rank's own (uncompressed) gradients."""

import pytest
import torch
from helpers import cross_entropy_grads, on_two_gloo_ranks

from zoo.accel.ddp_comm import COMPRESSIONS, register_compression
from zoo.config import get_cfg
from zoo.train.model_setup import ddp_options

IN, OUT = 16, 32


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(IN, OUT), torch.nn.ReLU(), torch.nn.Linear(OUT, 4))


def _batch(rank):
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(8, IN, generator=g), torch.randint(0, 4, (8,), generator=g)


def _grads(model, rank):
    return cross_entropy_grads(model, *_batch(rank))


def _rank(rank):
    results = {}
    for kind in COMPRESSIONS:
        cfg = get_cfg()
        cfg.DDP_CONFIG.GRAD_COMPRESSION = kind
        cfg.DDP_CONFIG.BUCKET_CAP_MB = 0.001  # several buckets: every layer is its own
        ddp = torch.nn.parallel.DistributedDataParallel(_model(), **ddp_options(cfg))
        register_compression(ddp, cfg)
        # Three steps (DDP rebuilds its buckets after the first); the weights do not move.
        results[kind] = [_grads(ddp, rank) for _ in range(3)]
    results["local"] = _grads(_model(), rank)
    return results


@pytest.fixture(scope="module")
def grads(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compression")
    return on_two_gloo_ranks(_rank, tmp)


def test_every_rank_gets_the_same_gradient(grads):
    for kind in COMPRESSIONS:
        for a, b in zip(grads[0][kind][-1], grads[1][kind][-1]):
            assert torch.equal(a, b), kind


def test_none_is_the_exact_mean(grads):
    mean = [(a + b) / 2 for a, b in zip(grads[0]["local"], grads[1]["local"])]
    for got, want in zip(grads[0]["none"][-1], mean):
        assert torch.equal(got, want)


@pytest.mark.parametrize("kind,dtype", [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_16_bit_compression_is_the_mean_of_rounded_halves(grads, kind, dtype):
    # Each rank's gradient is rounded to 16 bits and halved there (torch's hook divides after the
    # cast), the sum rounded again.
    for got, a, b in zip(grads[0][kind][-1], grads[0]["local"], grads[1]["local"]):
        want = ((a.to(dtype) / 2).float() + (b.to(dtype) / 2).float()).to(dtype).float()
        assert torch.equal(got, want)
        if a.numel() > 4:  # and it is not the full-precision mean
            assert not torch.equal(got, (a + b) / 2)
