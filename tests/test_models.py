"""Registry-driven model tests: every model builds, trains a step on a tiny input, has its facts.

Full-size nets are built on the ``meta`` device (shapes only, no memory, no init cost) to check
parameter counts, layer structure and FLOPs; forward passes run only on small variants.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torchvision
from helpers import fast_sample
from torch.utils.flop_counter import FlopCounterMode

import zoo
from zoo.models import model_facts
from zoo.models.flops import facts_input_shape, measure
from zoo.models.slowfast import Bottleneck as SlowFastBlock

# Small variants per family (name prefix -> builder kwargs) so forward + backward stays cheap.
# torchvision's r3d_18 / mc3_18 / r2plus1d_18 have no width argument but are cheap at the tiny
# input; s3d needs 14 frames of 224x224 (fixed final pooling window), see SMALL_INPUT.
SMALL_KWARGS = {
    "resnet": dict(base_width=8),
    "slowfast": dict(width=8, depth=18),
    "slow_": dict(width=8, depth=18),
    "i3d_nl": dict(width=8),  # keeps its depth: the non-local blocks sit at R50/R101 indices
    "i3d": dict(width=8, depth=18),
    "tpn": dict(width=8, depth=18),
    "ircsn": dict(width=8, layers=(1, 1, 1, 1)),
    "r2plus1d_v2": dict(width=8, layers=(1, 1, 1, 1)),
    "r2plus1d_resnet": dict(width=8),
    "tsn": dict(base_width=8),
    "mvit_": dict(frames=8, crop_size=32, embed_dim=16),
    "swin3d": dict(embed_dim=16, num_heads=(1, 2, 4, 8)),
    "videomae": dict(embed_dim=24, depth=2, num_heads=3, frames=8, crop_size=32),
}
IMAGE_INPUT = (2, 3, 32, 32)
VIDEO_INPUT = (2, 3, 8, 32, 32)
SMALL_INPUT = {"s3d": (1, 3, 14, 224, 224)}
NUM_CLASSES = 5

R50_SLOWFAST = {
    # name: (alpha, fusion kernel, params at 400 classes, GFLOPs per view at 224x224)
    "slowfast_4x16_resnet50": (8, 5, 34_480_216, 27.6),
    "slowfast_8x8_resnet50": (4, 7, 34_566_488, 50.3),
}
# Published parameter counts at 400 classes (PySlowFast / PyTorchVideo model zoos, torchvision).
PUBLISHED_PARAMS = {
    "slowfast_8x8_resnet101": 62_826_968,
    "slowfast_16x8_resnet101": 53_774_808,
    "slow_8x8_resnet50": 32_454_096,
    "i3d_resnet50": 28_043_472,
    "r2plus1d_resnet18": 31_505_325,
}


def _small_kwargs(name: str) -> dict:
    for prefix, kwargs in SMALL_KWARGS.items():
        if name.startswith(prefix):
            return dict(kwargs)
    return {}


def _num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _meta_model(name: str, **kwargs) -> nn.Module:
    with torch.device("meta"):
        return zoo.create_model(name, **kwargs)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# Architectures only: the gluoncv aliases build these (tests/test_gluoncv_models.py covers them).
ARCHS = zoo.list_models(aliases=False)


def _outputs(layer: nn.Module) -> int:
    """Outputs of a classifier layer, read from the layer type's own attribute."""
    return layer.out_features if isinstance(layer, nn.Linear) else layer.out_channels


def _tiny_kwargs(arch: str) -> dict:
    """Small widths and one block per stage where a family takes ``layers``: the head does not
    depend on depth, and building every registered name must stay quick."""
    kwargs = _small_kwargs(arch)
    if arch.startswith(("resnet", "tsn", "r2plus1d_resnet")):
        kwargs["layers"] = (1, 1, 1, 1)
    if arch.startswith("i3d_nl"):
        kwargs.update(depth=18, nonlocal_blocks=((), (1,), (1,), ()))
    return kwargs


@pytest.mark.slow
@pytest.mark.parametrize("name", zoo.list_models())
def test_every_model_has_get_and_reset_classifier(name):
    from zoo.models.classifier import head_keys
    from zoo.train.finetune import classifier_module

    facts = model_facts(name)
    classes = facts["num_classes"] or NUM_CLASSES  # a gluoncv name may fix its class count
    # zoo's nets are built small on the CPU (cheaper than on the meta device, whose random init
    # runs in Python); torchvision's have no small variants and are built on the meta device.
    with torch.device("meta" if facts["source"] == "torchvision" else "cpu"):
        model = zoo.create_model(name, num_classes=classes,
                                 **_tiny_kwargs(facts["alias_of"] or name))
    head = model.get_classifier()
    assert isinstance(head, nn.Module) and _outputs(head) == classes
    # The pretrained loader and fine-tuning see the same layer.
    assert classifier_module(model) is head
    head_name = next(n for n, m in model.named_modules() if m is head)
    assert head_keys(model)[:2] == (f"{head_name}.weight", f"{head_name}.bias")
    keys = {k: v.shape for k, v in model.state_dict().items()}

    model.reset_classifier(7)
    new = model.get_classifier()
    assert new is not head and _outputs(new) == 7
    after = {k: v.shape for k, v in model.state_dict().items()}
    assert after.keys() == keys.keys()  # same names: a checkpoint still loads by key
    changed = {k for k in keys if after[k] != keys[k]}
    assert changed == set(head_keys(model)) and all(after[k][0] == 7 for k in changed)


@pytest.mark.parametrize("name", fast_sample(ARCHS))
def test_forward_backward(name):
    model = zoo.create_model(name, num_classes=NUM_CLASSES, **_small_kwargs(name)).train()
    task = model_facts(name).get("task", "video")
    x = torch.randn(SMALL_INPUT.get(name, IMAGE_INPUT if task == "image" else VIDEO_INPUT))
    out = model(x)
    assert out.shape == (x.shape[0], NUM_CLASSES)
    assert torch.isfinite(out).all()
    out.logsumexp(dim=1).sum().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)

    # reset_classifier(7): the forward now ends in a fresh 7-output layer. With its weight zeroed
    # and its bias 0..6, every clip's logits are exactly 0..6 (any pooling or averaging after the
    # layer, as in TSN or S3D, keeps a constant), which only holds if the forward uses that layer.
    model.reset_classifier(7)
    head = model.get_classifier()
    assert _outputs(head) == 7
    with torch.no_grad():
        head.weight.zero_()
        head.bias.copy_(torch.arange(7.0))
        out = model.eval()(x)
    assert torch.equal(out, torch.arange(7.0).expand(x.shape[0], 7))


@pytest.mark.parametrize("name", fast_sample(ARCHS))
def test_facts_params(name):
    facts = model_facts(name)
    for key in ("task", "input_frames", "sampling_stride", "crop_size", "mean", "std", "params"):
        assert key in facts, f"{name} facts lack {key!r}"
    num_classes = 1000 if facts["task"] == "image" else 400
    assert _num_params(_meta_model(name, num_classes=num_classes)) == facts["params"]


@pytest.mark.parametrize("name", fast_sample(ARCHS))
def test_facts_gflops_recount(name):
    facts = model_facts(name)
    assert measure(name)["gflops"] == pytest.approx(facts["gflops"], abs=0.051)
    assert facts_input_shape(facts)[-1] == facts["crop_size"]


def test_published_param_counts():
    assert _num_params(_meta_model("resnet50", num_classes=1000)) == 25_557_032
    for name, (_, _, params, _) in R50_SLOWFAST.items():
        assert _num_params(_meta_model(name, num_classes=400)) == params
    for name, params in PUBLISHED_PARAMS.items():
        assert _num_params(_meta_model(name, num_classes=400)) == params, name


@pytest.mark.parametrize("depth", [18, 34, 50, 101, 152])
def test_resnet_keys_equal_torchvision(depth):
    with torch.device("meta"):
        ours = zoo.create_model(f"resnet{depth}", num_classes=1000).state_dict()
        theirs = getattr(torchvision.models, f"resnet{depth}")().state_dict()
    assert list(ours) == list(theirs)
    assert all(ours[k].shape == theirs[k].shape for k in ours)


@pytest.mark.parametrize("depth", [18, 50])
def test_resnet_loads_torchvision_weights(depth):
    theirs = getattr(torchvision.models, f"resnet{depth}")().eval()
    ours = zoo.create_model(f"resnet{depth}", num_classes=1000).eval()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert (ours(x) - theirs(x)).abs().max() < 1e-5


def test_resnet_dropout_keeps_keys():
    plain = _meta_model("resnet50", num_classes=10).state_dict()
    dropped = _meta_model("resnet50", num_classes=10, dropout=0.5)
    assert list(dropped.state_dict()) == list(plain)
    assert any(isinstance(m, nn.Dropout) for m in dropped.modules())


def test_resnet_video_is_frame_average():
    model = zoo.create_model("resnet18", num_classes=NUM_CLASSES, base_width=8).eval()
    clip = torch.randn(2, 3, 3, 32, 32)
    with torch.no_grad():
        per_frame = torch.stack([model(clip[:, :, t]) for t in range(clip.shape[2])], dim=1)
        assert torch.allclose(model(clip), per_frame.mean(dim=1), atol=1e-6)
        assert torch.allclose(model(clip[:, :, :1]), model(clip[:, :, 0]), atol=1e-6)


def test_resnet_zero_init_residual():
    model = zoo.create_model("resnet18", base_width=8, zero_init_residual=True)
    assert all((b.bn2.weight == 0).all() for b in [model.layer1[0], model.layer4[1]])


def test_slowfast_tensor_and_pair_agree():
    model = zoo.create_model("slowfast_tiny_resnet18", num_classes=NUM_CLASSES, width=8,
                             zero_init_final_bn=False).eval()
    fast = torch.randn(2, 3, 16, 32, 32)
    # alpha 4 -> slow sees 4 of 16 frames, spread evenly as PySlowFast's PackPathway picks them.
    slow = fast[:, :, [0, 5, 10, 15]]
    with torch.no_grad():
        from_tensor = model(fast)
        assert torch.equal(from_tensor, model([slow, fast]))
        assert torch.equal(from_tensor, model((slow, fast)))
        # Logits, not probabilities, even in eval mode.
        assert not torch.allclose(from_tensor.softmax(1), from_tensor)


def test_slowfast_rejects_bad_input():
    model = zoo.create_model("slowfast_tiny_resnet18", num_classes=NUM_CLASSES, width=8)
    with pytest.raises(ValueError, match="alpha"):
        model(torch.randn(1, 3, 2, 32, 32))
    with pytest.raises(ValueError):
        zoo.create_model("slowfast_tiny_resnet18", width=6)
    with pytest.raises(ValueError, match="depth"):
        zoo.create_model("slowfast_tiny_resnet18", depth=34)


@pytest.mark.parametrize("name", sorted(R50_SLOWFAST))
def test_slowfast_r50_structure(name):
    alpha, k, _, _ = R50_SLOWFAST[name]
    model = _meta_model(name, num_classes=400)
    assert len(model.state_dict()) == 662  # same tensor count as a PySlowFast checkpoint
    assert model.slow_stem.conv.kernel_size == (1, 7, 7)
    assert model.fast_stem.conv.kernel_size == (5, 7, 7)
    assert model.fast_stem.conv.out_channels == 8
    assert model.slow_stem.pool.kernel_size == (1, 3, 3)
    stages = ["res2", "res3", "res4", "res5"]
    slow_in = [80, 320, 640, 1280]
    fast_in = [8, 32, 64, 128]
    slow_kt, fast_kt = [1, 1, 3, 3], [3, 3, 3, 3]
    blocks = [3, 4, 6, 3]
    for i, stage in enumerate(stages):
        for path, c_in, kt in (("slow", slow_in[i], slow_kt[i]), ("fast", fast_in[i], fast_kt[i])):
            seq = getattr(model, f"{path}_{stage}")
            assert len(seq) == blocks[i]
            assert seq[0].conv_a.in_channels == c_in
            stride = 1 if i == 0 else 2
            assert seq[0].conv_b.stride == (1, stride, stride)
            for j, block in enumerate(seq):
                assert isinstance(block, SlowFastBlock)
                assert block.conv_a.kernel_size == (kt, 1, 1)
                assert block.conv_b.kernel_size == (1, 3, 3)
                assert block.conv_c.kernel_size == (1, 1, 1)
                assert (block.shortcut is not None) == (j == 0)
    assert model.fast_res5[-1].conv_c.out_channels == 256
    for stage, c_fast in zip(["stem", "res2", "res3", "res4"], [8, 32, 64, 128]):
        conv = getattr(model, f"fuse_{stage}").conv
        assert (conv.in_channels, conv.out_channels) == (c_fast, 2 * c_fast)
        assert conv.kernel_size == (k, 1, 1)
        assert conv.stride == (alpha, 1, 1)
        assert conv.padding == (k // 2, 0, 0)
    assert model.head.proj.in_features == 2048 + 256
    assert model.head.dropout.p == 0.5
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm3d)]
    assert all(bn.eps == 1e-5 and bn.momentum == 0.1 for bn in bns)


@pytest.mark.parametrize("name", sorted(R50_SLOWFAST))
def test_slowfast_r50_flops(name):
    # Meta tensors: FLOPs are counted from shapes alone, nothing is computed.
    model = _meta_model(name, num_classes=400).eval()
    with FlopCounterMode(display=False) as counter:
        model(torch.empty(1, 3, 32, 224, 224, device="meta"))
    gflops = counter.get_total_flops() / 2e9  # multiply-adds, as PySlowFast reports
    assert gflops == pytest.approx(R50_SLOWFAST[name][3], abs=0.05)
    assert model_facts(name)["gflops"] == R50_SLOWFAST[name][3]


def test_slowfast_init():
    model = zoo.create_model("slowfast_tiny_resnet18")
    assert model.head.proj.bias.abs().sum() == 0
    assert model.head.proj.weight.std().item() == pytest.approx(0.01, rel=0.2)
    assert (model.slow_res2[0].bn_c.weight == 0).all()  # zero_init_final_bn default
    assert (model.slow_res2[0].bn_a.weight == 1).all()


def _kts(stage: nn.Sequential) -> list:
    return [block.conv_a.kernel_size[0] for block in stage]


def test_slowfast_r101_structure():
    sf8 = _meta_model("slowfast_8x8_resnet101", num_classes=400)
    sf16 = _meta_model("slowfast_16x8_resnet101", num_classes=400)
    for model in (sf8, sf16):
        assert len(model.state_dict()) == 1274  # PyTorchVideo's slowfast_r101 has as many
        assert len(model.slow_res4) == 23 and model.alpha == 4
        assert model.fuse_res2.conv.kernel_size == (5, 1, 1)
        assert _kts(model.slow_res5) == [3, 3, 3] and _kts(model.fast_res2) == [3, 3, 3]
    # R101_101_101: every res4 block is temporal; R101_50_50: only the first 6, as in R50.
    assert _kts(sf8.slow_res4) == [3] * 23 and _kts(sf8.fast_res4) == [3] * 23
    assert _kts(sf16.slow_res4) == [3] * 6 + [1] * 17 == _kts(sf16.fast_res4)
    assert model_facts("slowfast_16x8_resnet101")["input_frames"] == 64


def test_slowfast_bare_laterals():
    model = zoo.create_model("slowfast_tiny_resnet18", num_classes=NUM_CLASSES, width=8,
                             fuse_norm_act=False)
    keys = list(model.state_dict())
    assert not [k for k in keys if k.startswith("fuse_") and ".bn." in k]
    assert "fuse_stem.conv.weight" in keys
    assert model(torch.randn(1, 3, 8, 32, 32)).shape == (1, NUM_CLASSES)


def test_slow_and_i3d_structure():
    slow = _meta_model("slow_8x8_resnet50", num_classes=400)
    i3d = _meta_model("i3d_resnet50", num_classes=400)
    for model in (slow, i3d):
        assert len(model.state_dict()) == 320  # as PySlowFast / PyTorchVideo R50 checkpoints
        assert model.head.proj.in_features == 2048 and model.head.dropout.p == 0.5
    assert slow.stem.conv.kernel_size == (1, 7, 7) and isinstance(slow.pool1, nn.Identity)
    assert [_kts(getattr(slow, f"res{n}")) for n in (2, 3, 4, 5)] == [
        [1] * 3, [1] * 4, [3] * 6, [3] * 3]
    assert i3d.stem.conv.kernel_size == (5, 7, 7) and i3d.stem.conv.padding == (2, 3, 3)
    assert i3d.pool1.kernel_size == (2, 1, 1) and i3d.pool1.stride == (2, 1, 1)
    assert [_kts(getattr(i3d, f"res{n}")) for n in (2, 3, 4, 5)] == [
        [3] * 3, [3, 1, 3, 1], [3, 1, 3, 1, 3, 1], [1, 3, 1]]


def test_r2plus1d_equals_torchvision():
    with torch.device("meta"):
        ours = zoo.create_model("r2plus1d_resnet18").state_dict()
        theirs = torchvision.models.video.r2plus1d_18().state_dict()
    assert list(ours) == list(theirs)
    assert all(ours[k].shape == theirs[k].shape for k in ours)
    # Same function: torchvision's weights give the same logits (full width, small clip).
    tv = torchvision.models.video.r2plus1d_18(num_classes=NUM_CLASSES).eval()
    model = zoo.create_model("r2plus1d_resnet18", num_classes=NUM_CLASSES).eval()
    model.load_state_dict(tv.state_dict(), strict=True)
    x = torch.randn(1, 3, 8, 32, 32)
    with torch.no_grad():
        assert (model(x) - tv(x)).abs().max() < 1e-5
    assert _num_params(_meta_model("r2plus1d_resnet34", num_classes=400)) == 61_831_661


def test_torchvision_adapters_take_no_download():
    with pytest.raises(ValueError, match="does not download"):
        zoo.create_model("r3d_18", weights="KINETICS400_V1")
    for name in ("r3d_18", "mc3_18", "r2plus1d_18", "s3d"):
        assert model_facts(name)["source"] == "torchvision"


def test_tsn_segment_consensus():
    model = zoo.create_model("tsn_resnet50", num_classes=NUM_CLASSES, base_width=8).eval()
    clip = torch.randn(2, 3, 4, 32, 32)
    with torch.no_grad():
        per_frame = torch.stack([model(clip[:, :, t:t + 1]) for t in range(4)], dim=1)
        assert torch.allclose(model(clip), per_frame.mean(dim=1), atol=1e-6)
        model.consensus = "max"
        assert torch.allclose(model(clip), per_frame.amax(dim=1), atol=1e-6)
    with torch.device("meta"):
        keys = zoo.create_model("tsn_resnet50", num_classes=1000).state_dict()
        assert list(keys) == list(torchvision.models.resnet50().state_dict())
    with pytest.raises(ValueError, match="consensus"):
        zoo.create_model("tsn_resnet50", consensus="median")


def test_reset_classifier_initialises_like_the_family():
    # 3D nets: normal(std head_init_std) weights and a zero bias, as their build does.
    model = zoo.create_model("slowfast_tiny_resnet18", num_classes=NUM_CLASSES, width=8,
                             head_init_std=0.05)
    model.reset_classifier(300)
    proj = model.head.proj
    assert proj.weight.shape == (300, model.head.proj.in_features)
    assert proj.weight.std().item() == pytest.approx(0.05, rel=0.1)
    assert proj.bias.abs().sum() == 0 and proj.weight.requires_grad
    # TPN's frozen auxiliary classifier is reset too, and stays frozen.
    tpn = zoo.create_model("tpn_resnet50_f8s8", num_classes=NUM_CLASSES, **_small_kwargs("tpn"))
    tpn.reset_classifier(7)
    assert tpn.aux_head[1].out_features == 7 and not tpn.aux_head[1].weight.requires_grad
    assert tpn.head.proj.out_features == 7 and tpn.head.proj.weight.requires_grad


@pytest.mark.slow
def test_list_models_tool_matches_docs_table():
    import os

    from helpers import ROOT, run_tool

    r = run_tool("list_models.py", ["--markdown"], timeout=120)
    assert r.returncode == 0, r.stderr
    table = r.stdout.strip()
    assert all(f"`{name}`" in table for name in zoo.list_models() if name in PUBLISHED_PARAMS)
    docs = open(os.path.join(ROOT, "docs", "models.md"), encoding="utf-8").read()
    assert table in docs, "docs/models.md is stale: paste `python tools/list_models.py --markdown`"
