"""Video Swin Transformer (swin3d_t/s/b): torchvision's parameter counts and keys, torchvision's
logits on the same random weights (windows that fit, windows padded and shifted, windows larger
than the token grid), and the same logits from an MMAction2-named state dict converted with
``--from mmaction2`` (MMAction2 is not installable here: its names are made by renaming
torchvision's keys as MMAction2's ``SwinTransformer3D`` + ``I3DHead`` name them)."""

import pytest
import torch
import torchvision
from helpers import mmaction2_swin_key
from torchvision.models.video.swin_transformer import SwinTransformer3d as TorchvisionSwin

import zoo
from zoo.models import model_facts
from zoo.models.flops import count_params, measure
from zoo.models.weights.convert import ConversionError, convert_state_dict
from zoo.models.weights.table import entries

# torchvision's weight metadata ("num_params"; the 400-class nets).
TORCHVISION_PARAMS = {"swin3d_t": 28_158_070, "swin3d_s": 49_816_678, "swin3d_b": 88_048_984}
# A small Swin: 4 stages (3 patch mergings), odd heads, a window that the test inputs do not fill
# evenly, so padding, the cyclic shift and its mask all run.
TINY = dict(embed_dim=12, depths=[2, 2, 2, 2], num_heads=[1, 2, 3, 4], window_size=[4, 3, 3])
CLASSES = 7


@pytest.mark.parametrize("name", sorted(TORCHVISION_PARAMS))
def test_parameters_and_keys_are_torchvision_s(name):
    with torch.device("meta"):
        ours = zoo.create_model(name, num_classes=400)
        theirs = getattr(torchvision.models.video, name)()
    assert count_params(ours) == count_params(theirs) == TORCHVISION_PARAMS[name]
    a, b = ours.state_dict(), theirs.state_dict()
    assert list(a) == list(b) and all(a[k].shape == b[k].shape for k in a)


@pytest.mark.parametrize("name", sorted(TORCHVISION_PARAMS))
def test_facts_gflops_recount(name):
    facts = model_facts(name)
    assert (facts["input_frames"], facts["sampling_stride"], facts["crop_size"]) == (32, 2, 224)
    assert measure(name)["gflops"] == pytest.approx(facts["gflops"], abs=0.006)


def test_stochastic_depth_rates_are_torchvision_s():
    ours = zoo.create_model("swin3d_t", num_classes=CLASSES, **TINY, drop_path=0.3)
    theirs = TorchvisionSwin(patch_size=[2, 4, 4], stochastic_depth_prob=0.3, num_classes=CLASSES,
                             **TINY)
    rates = [m.stochastic_depth.p for m in ours.modules() if hasattr(m, "stochastic_depth")]
    assert rates == [m.stochastic_depth.p for m in theirs.modules()
                     if hasattr(m, "stochastic_depth")]
    assert rates[0] == 0.0 and rates[-1] == pytest.approx(0.3)
    alias = zoo.create_model("swin3d_t", num_classes=CLASSES, **TINY, stochastic_depth_prob=0.3)
    assert [m.stochastic_depth.p for m in alias.modules() if hasattr(m, "stochastic_depth")] \
        == rates


def _torchvision_tiny(window=None, seed=0):
    """torchvision's SwinTransformer3d at TINY sizes, every tensor randomised (LayerNorms and
    biases included, which its init leaves at 1 / 0), in float64, eval mode."""
    torch.manual_seed(seed)
    kwargs = dict(TINY, window_size=window or TINY["window_size"])
    model = TorchvisionSwin(patch_size=[2, 4, 4], num_classes=CLASSES, **kwargs)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return model.double().eval(), kwargs


def _close(ours, theirs):
    return (ours - theirs).abs().max() <= 1e-4 * theirs.abs().max()


# (frames, height, width): patches and windows fit; nothing is a multiple of the patch or the
# window (odd sizes: patch padding, window padding, odd patch merging); a grid smaller than the
# window in time (one window of the grid's size, no temporal shift).
SIZES = [(8, 32, 32), (7, 45, 38), (3, 20, 28)]


@pytest.mark.parametrize("size", SIZES)
def test_logits_equal_torchvision(size):
    tv, kwargs = _torchvision_tiny()
    ours = zoo.create_model("swin3d_t", num_classes=CLASSES, **kwargs).double().eval()
    ours.load_state_dict(tv.state_dict())
    x = torch.randn(2, 3, *size, dtype=torch.float64)
    with torch.no_grad():
        a, b = ours(x), tv(x)
    assert a.shape == (2, CLASSES) and _close(a, b)


def test_logits_equal_torchvision_at_the_published_window():
    """Window 8x7x7 on a 16x64x64 clip: 8x16x16 tokens, so H and W pad to 21 and shift by 3."""
    tv, kwargs = _torchvision_tiny(window=[8, 7, 7])
    ours = zoo.create_model("swin3d_t", num_classes=CLASSES, **kwargs).double().eval()
    ours.load_state_dict(tv.state_dict())
    x = torch.randn(1, 3, 16, 64, 64, dtype=torch.float64)
    with torch.no_grad():
        assert _close(ours(x), tv(x))


def test_the_shift_mask_matters():
    """The comparison can fail: a model that forgets to mask its shifted windows differs."""
    import zoo.models.swin3d as swin3d

    tv, kwargs = _torchvision_tiny()
    ours = zoo.create_model("swin3d_t", num_classes=CLASSES, **kwargs).double().eval()
    ours.load_state_dict(tv.state_dict())
    x = torch.randn(1, 3, 8, 48, 48, dtype=torch.float64)
    masked = swin3d._MASKED
    try:
        swin3d._MASKED = 0.0
        with torch.no_grad():
            assert not _close(ours(x), tv(x))
    finally:
        swin3d._MASKED = masked


@pytest.mark.parametrize("final_norm,with_index", [("norm3", True), ("norm", False)])
def test_mmaction2_keys_convert_to_the_same_logits(final_norm, with_index):
    tv, kwargs = _torchvision_tiny()
    source = {mmaction2_swin_key(k, final_norm): v for k, v in tv.state_dict().items()
              if with_index or not k.endswith("relative_position_index")}
    assert "backbone.layers.0.downsample.reduction.weight" in source
    assert "backbone.layers.2.blocks.1.mlp.fc2.bias" in source
    state, classes, report = convert_state_dict(source, "mmaction2", "swin3d_t", **kwargs)
    assert classes == CLASSES
    filled = {k.rsplit(".", 1)[0] for k in report.filled}
    assert len(filled) == (0 if with_index else sum(TINY["depths"]))
    assert all(torch.equal(state[k], v) for k, v in tv.state_dict().items())
    ours = zoo.create_model("swin3d_t", num_classes=classes, **kwargs).double().eval()
    ours.load_state_dict(state)
    x = torch.randn(2, 3, 7, 45, 38, dtype=torch.float64)
    with torch.no_grad():
        assert _close(ours(x), tv(x))


def test_mmaction2_conversion_refuses_unknown_and_missing_keys():
    tv, kwargs = _torchvision_tiny()
    source = {mmaction2_swin_key(k): v for k, v in tv.state_dict().items()}
    extra = dict(source, **{"backbone.layers.0.blocks.0.attn.gate.weight": torch.zeros(3)})
    with pytest.raises(ConversionError, match="attn.gate.weight"):
        convert_state_dict(extra, "mmaction2", "swin3d_t", **kwargs)
    del source["backbone.layers.1.downsample.norm.bias"]
    with pytest.raises(ConversionError, match=r"features\.3\.norm\.bias"):
        convert_state_dict(source, "mmaction2", "swin3d_t", **kwargs)


@pytest.mark.parametrize("fmt", ["torchvision", "mmaction2"])
def test_pretrained_file_loads_by_path(tmp_path, fmt):
    """A torchvision state-dict file loads as it is; an MMAction2 checkpoint is converted in
    memory; a different class count keeps a fresh head."""
    tv, kwargs = _torchvision_tiny()
    path = tmp_path / f"{fmt}.pth"
    if fmt == "torchvision":
        torch.save(tv.state_dict(), path)
    else:
        torch.save({"meta": {}, "state_dict": {mmaction2_swin_key(k): v
                                               for k, v in tv.state_dict().items()}}, path)
    ours = zoo.create_model("swin3d_t", num_classes=CLASSES, pretrained=str(path), **kwargs)
    x = torch.randn(1, 3, 8, 32, 32, dtype=torch.float64)
    with torch.no_grad():
        assert _close(ours.double().eval()(x), tv(x))
    other = zoo.create_model("swin3d_t", num_classes=3, pretrained=str(path), **kwargs)
    assert torch.equal(other.features[0][0].attn.qkv.weight, tv.features[0][0].attn.qkv.weight
                       .float())
    assert other.get_classifier().out_features == 3


def test_convert_checkpoint_writes_a_zoo_checkpoint(tmp_path):
    """An MMAction2 checkpoint file ({meta, state_dict}) converted to a file, which then loads by
    path with the class count and kwargs it records."""
    from zoo.models.weights.convert import convert_checkpoint

    tv, kwargs = _torchvision_tiny()
    src, out = tmp_path / "swin_mma.pth", tmp_path / "swin_zoo.pth"
    torch.save({"meta": {"epoch": 30}, "state_dict": {mmaction2_swin_key(k): v.float() for k, v
                                                      in tv.state_dict().items()}}, src)
    report = convert_checkpoint(str(src), str(out), "mmaction2", "swin3d_t", kwargs)
    assert report.num_source == report.num_target == len(tv.state_dict())
    ckpt = torch.load(out, weights_only=True)
    assert "swin3d_t" in ckpt["cfg"] and "NUM_CLASSES: 7" in ckpt["cfg"]
    ours = zoo.create_model("swin3d_t", num_classes=CLASSES, pretrained=str(out), **kwargs)
    x = torch.randn(1, 3, 8, 32, 32, dtype=torch.float64)
    with torch.no_grad():
        assert _close(ours.double().eval()(x), tv(x))


def test_weights_table_has_both_publishers():
    for name, size, tv_hash in (("swin3d_t", "tiny", "7615ae03"), ("swin3d_s", "small",
                                                                   "da41c237"),
                                ("swin3d_b", "base", "24f7c7c6")):
        tags = entries(name)
        assert tags["kinetics400"].format == "torchvision"
        assert tags["kinetics400"].url.endswith(f"-{tv_hash}.pth")
        mma = tags["kinetics400-mmaction2"]
        assert mma.format == "mmaction2" and f"/swin-{size}-p244-w877_in1k-pre" in mma.url
        assert mma.url.endswith(f"-{mma.hash}.pth") and len(mma.hash) == 8


def test_classifier_and_input_checks():
    model = zoo.create_model("swin3d_t", num_classes=5, **TINY)
    assert model.get_classifier() is model.head
    model.reset_classifier(3)
    with torch.no_grad():
        assert model.eval()(torch.randn(1, 3, 4, 32, 32)).shape == (1, 3)
    with pytest.raises(ValueError, match="num_heads"):
        zoo.create_model("swin3d_t", embed_dim=10, num_heads=[3, 6, 12, 24])
    with pytest.raises(TypeError, match="unknown arguments"):
        zoo.create_model("swin3d_t", window=[8, 7, 7])


@pytest.mark.slow
def test_full_swin3d_t_matches_torchvision():
    """The published architecture, random weights, one 32x224x224 clip (float32)."""
    torch.manual_seed(0)
    tv = torchvision.models.video.swin3d_t().eval()
    ours = zoo.create_model("swin3d_t").eval()
    ours.load_state_dict(tv.state_dict())
    x = torch.randn(1, 3, 32, 224, 224)
    with torch.no_grad():
        assert _close(ours(x), tv(x))


def test_relative_position_bias_tables_train_without_weight_decay():
    """zoo's rule: norms, biases (1-D) and the bias tables (no_weight_decay()) are not decayed,
    the rest is."""
    from zoo.solver.optimizer import param_groups

    model = zoo.create_model("swin3d_t", num_classes=3, embed_dim=16, depths=(1, 1, 1, 1),
                             num_heads=(1, 1, 1, 1))
    decayed = {id(p) for g in param_groups(model, 0.05) if g["weight_decay"] > 0
               for p in g["params"]}
    for name, p in model.named_parameters():
        exempt = (name.endswith(("bias", "relative_position_bias_table"))
                  or ".norm" in name or name.startswith("norm"))
        assert (id(p) not in decayed) == exempt, name
