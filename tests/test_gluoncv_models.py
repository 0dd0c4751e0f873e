"""gluoncv.torch's action-recognition names: every config's model exists, with gluoncv's sizes.

Where the reference numbers come from:

* ``CONFIG_NAMES``: ``CONFIG.MODEL.NAME`` of the 47 YAMLs in gluon-cv's
  ``scripts/action-recognition/configuration/`` (41 distinct names: the six ``*_feat`` files name a
  ``_kinetics400`` model, ``slowfast_4x16_resnet50_sthsthv2.yaml`` names
  ``slowfast_16x8_resnet50_sthsthv2``), with that config's ``NUM_CLASSES``, ``CLIP_LEN``,
  ``FRAME_RATE`` and ``CROP_SIZE`` (default 224), or ``NUM_SEGMENT`` for the TSN nets.
* ``GLUONCV_PARAMS``: parameter counts of the nets gluoncv's own code builds. gluoncv 0.10.5.post0
  (the PyPI wheel) was unpacked in a scratch directory and its
  ``gluoncv/torch/model_zoo/action_recognition/*.py`` imported alone (no mxnet, no gluoncv
  dependency of zoo); each builder was called with a yacs config (``PRETRAINED False``,
  ``PRETRAINED_BASE True`` with torchvision's 2D ResNets built without weights, ``USE_AFFINE
  False`` as gluoncv's defaults say) under ``torch.device("meta")``, and
  ``sum(p.numel() for p in net.parameters())`` recorded. gluoncv's docs publish no ``#Params``
  for the PyTorch models. Two numbers are also checked by hand below: the non-local blocks
  (``test_nonlocal_counts_by_hand``) and the class-count deltas (``test_class_deltas_by_hand``).
"""

from __future__ import annotations

import os

import pytest
import torch
from helpers import CONFIG_NAMES, fast_sample

import zoo
from zoo.models import model_facts
from zoo.models.gluoncv_names import gluoncv_aliases
from zoo.models.nonlocal_block import NonLocal3d

# gluoncv builder -> (NUM_CLASSES it was built with, parameters); see the module docstring.
GLUONCV_PARAMS = {
    "i3d_nl10_resnet101_v1_kinetics400": (400, 66_471_120),
    "i3d_nl10_resnet50_v1_kinetics400": (400, 42_760_400),
    "i3d_nl5_resnet101_v1_kinetics400": (400, 59_112_656),
    "i3d_nl5_resnet50_v1_kinetics400": (400, 35_401_936),
    "i3d_resnet101_v1_kinetics400": (400, 51_754_192),
    "i3d_resnet50_v1_custom": (10, 27_244_362),
    "i3d_resnet50_v1_kinetics400": (400, 28_043_472),
    "i3d_resnet50_v1_sthsthv2": (174, 27_580_398),
    "i3d_slow_resnet101_f16s4_kinetics400": (400, 60_359_120),
    "i3d_slow_resnet101_f16s4_kinetics700": (700, 60_973_820),
    "i3d_slow_resnet101_f32s2_kinetics400": (400, 60_359_120),
    "i3d_slow_resnet101_f8s8_kinetics400": (400, 60_359_120),
    "i3d_slow_resnet50_f16s4_kinetics400": (400, 32_454_096),
    "i3d_slow_resnet50_f32s2_custom": (10, 31_654_986),
    "i3d_slow_resnet50_f32s2_kinetics400": (400, 32_454_096),
    "i3d_slow_resnet50_f8s8_kinetics400": (400, 32_454_096),
    "ircsn_v2_resnet152_f32s2_kinetics400": (400, 29_703_568),
    "r2plus1d_v1_resnet101_kinetics400": (400, 99_913_475),
    "r2plus1d_v1_resnet152_kinetics400": (400, 137_770_491),
    "r2plus1d_v1_resnet18_kinetics400": (400, 31_505_325),
    "r2plus1d_v1_resnet34_kinetics400": (400, 61_831_661),
    "r2plus1d_v1_resnet50_custom": (10, 53_150_581),
    "r2plus1d_v1_resnet50_kinetics400": (400, 53_949_691),
    "r2plus1d_v2_resnet152_kinetics400": (400, 118_226_785),
    "resnet101_v1b_kinetics400": (400, 43_319_760),
    "resnet152_v1b_kinetics400": (400, 58_963_408),
    "resnet18_v1b_kinetics400": (400, 11_381_712),
    "resnet34_v1b_kinetics400": (400, 21_489_872),
    "resnet50_v1b_custom": (10, 23_528_522),
    "resnet50_v1b_kinetics400": (400, 24_327_632),
    "resnet50_v1b_sthsthv2": (174, 23_864_558),
    "slowfast_16x8_resnet101_50_50_kinetics400": (400, 53_774_808),
    "slowfast_16x8_resnet101_kinetics400": (400, 62_826_968),
    "slowfast_16x8_resnet50_sthsthv2": (174, 34_045_558),
    "slowfast_4x16_resnet101_kinetics400": (400, 62_826_968),
    "slowfast_4x16_resnet50_custom": (10, 33_581_266),
    "slowfast_4x16_resnet50_kinetics400": (400, 34_480_216),
    "slowfast_8x8_resnet101_kinetics400": (400, 62_826_968),
    "slowfast_8x8_resnet50_kinetics400": (400, 34_566_488),
    "tpn_resnet101_f16s4_kinetics400": (400, 119_403_360),
    "tpn_resnet101_f32s2_kinetics400": (400, 119_403_360),
    "tpn_resnet101_f8s8_kinetics400": (400, 119_403_360),
    "tpn_resnet50_f16s4_kinetics400": (400, 91_498_336),
    "tpn_resnet50_f32s2_custom": (10, 89_900_116),
    "tpn_resnet50_f32s2_kinetics400": (400, 91_498_336),
    "tpn_resnet50_f8s8_kinetics400": (400, 91_498_336),
}


def _params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _meta(name: str, **kwargs) -> torch.nn.Module:
    with torch.device("meta"):
        return zoo.create_model(name, **kwargs)


def _out_features(model: torch.nn.Module) -> int:
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1].out_features


def test_config_names_are_registered():
    assert len(CONFIG_NAMES) == 41
    assert set(CONFIG_NAMES) <= set(zoo.list_models())
    assert set(GLUONCV_PARAMS) <= set(zoo.list_models())


@pytest.mark.parametrize("name", fast_sample(sorted(CONFIG_NAMES)))
def test_config_name_facts_and_classes(name):
    classes, frames, stride, crop = CONFIG_NAMES[name]
    facts = model_facts(name)
    assert (facts["input_frames"], facts["sampling_stride"], facts["crop_size"]) == (
        frames, stride, crop)
    assert facts["num_classes"] == (None if name.endswith("_custom") else classes)
    assert facts["alias_of"] in zoo.list_models(aliases=False)
    # build_model passes the config's NUM_CLASSES; the head has that many outputs.
    model = _meta(name, num_classes=classes)
    assert _out_features(model) == classes
    if not name.endswith("_custom"):
        assert _out_features(_meta(name)) == classes  # the suffix's count is the default


@pytest.mark.parametrize("name", fast_sample(sorted(GLUONCV_PARAMS)))
def test_params_equal_gluoncv_code(name):
    classes, params = GLUONCV_PARAMS[name]
    assert _params(_meta(name, num_classes=classes)) == params


@pytest.mark.parametrize("name", [
    "i3d_nl5_resnet50_v1_kinetics400", "i3d_slow_resnet50_f16s4_kinetics400",
    "ircsn_v2_resnet152_f32s2_kinetics400", "r2plus1d_v1_resnet50_kinetics400",
    "resnet50_v1b_sthsthv2", "slowfast_4x16_resnet101_kinetics400",
    "slowfast_16x8_resnet50_sthsthv2", "tpn_resnet101_f16s4_kinetics400",
])
def test_alias_is_its_architecture(name):
    # Same state-dict keys and shapes as the architecture it names (one alias per family; every
    # alias's parameter count is checked against gluoncv's above).
    facts = model_facts(name)
    kwargs = {"alpha": 8} if name.startswith("slowfast_4x16_resnet101") else {}
    got = {k: v.shape for k, v in _meta(name).state_dict().items()}
    want = {k: v.shape for k, v in _meta(facts["alias_of"], num_classes=facts["num_classes"],
                                         **kwargs).state_dict().items()}
    assert got == want
    if kwargs:
        assert _meta(name).alpha == 8


def test_gluoncv_slowfast_takes_every_alpha_th_frame():
    # gluoncv's SlowFast feeds x[:, :, ::alpha] to the slow pathway; PySlowFast's (zoo's
    # default) spreads T // alpha frames from the first to the last.
    clip = torch.arange(32.0).view(1, 1, 32, 1, 1)
    slow, _ = _meta("slowfast_4x16_resnet50_kinetics400").pack_pathways(clip)
    assert slow.flatten().tolist() == [0.0, 8.0, 16.0, 24.0]
    slow, _ = _meta("slowfast_4x16_resnet50").pack_pathways(clip)
    assert slow.flatten().tolist() == [0.0, 10.0, 20.0, 31.0]


def test_custom_takes_num_classes_and_fixed_names_refuse_others():
    assert _out_features(_meta("tpn_resnet50_f32s2_custom", num_classes=7)) == 7
    assert _out_features(_meta("i3d_slow_resnet101_f16s4_kinetics700")) == 700
    with pytest.raises(ValueError, match="i3d_resnet50_v1_custom") as err:
        _meta("i3d_resnet50_v1_kinetics400", num_classes=10)
    assert "\n" not in str(err.value)


def test_list_models_without_aliases():
    archs = zoo.list_models(aliases=False)
    assert not set(archs) & set(gluoncv_aliases())
    assert set(gluoncv_aliases().values()) <= set(archs)


def test_nonlocal_counts_by_hand():
    # gluoncv's NonLocal(C): theta, phi, g: Conv3d(C, C/2, 1) with bias; W: Conv3d(C/2, C, 1)
    # with bias; BatchNorm3d(C). nl5 puts 2 blocks in res3 (C=512) and 3 in res4 (C=1024), nl10
    # 4 and 6; the I3D nets without them have the counts of gluoncv's I3D_ResNetV1.
    def nl(c):
        return 3 * (c * c // 2 + c // 2) + (c // 2 * c + c) + 2 * c

    assert _params(NonLocal3d(512)) == nl(512)
    for depth, base in ((50, 28_043_472), (101, 51_754_192)):
        assert _params(_meta(f"i3d_nl5_resnet{depth}_v1")) == base + 2 * nl(512) + 3 * nl(1024)
        assert _params(_meta(f"i3d_nl10_resnet{depth}_v1")) == base + 4 * nl(512) + 6 * nl(1024)


def test_class_deltas_by_hand():
    # A head Linear(F, K) has F*K + K parameters; TPN has two (the head and the aux head).
    for name, feat, heads in (("resnet50_v1b_sthsthv2", 2048, 1),
                              ("slowfast_16x8_resnet50_sthsthv2", 2304, 1),
                              ("tpn_resnet50_f32s2_custom", 2048, 2)):
        classes, params = GLUONCV_PARAMS[name]
        arch = model_facts(name)["alias_of"]
        delta = _params(_meta(arch, num_classes=400)) - params
        assert delta == heads * (feat + 1) * (400 - classes)


def test_nonlocal_block_matches_reference():
    torch.manual_seed(0)
    block = NonLocal3d(8).eval()
    assert torch.equal(block(torch.ones(1, 8, 2, 3, 3)), torch.ones(1, 8, 2, 3, 3))  # identity
    torch.nn.init.normal_(block.bn.weight)
    x = torch.randn(2, 8, 2, 3, 3)
    # Reference: embedded Gaussian attention over all T*H*W positions, scaled by 1/sqrt(C/2).
    flat = x.flatten(2)
    theta = torch.einsum("oc,bcn->bon", block.theta.weight[:, :, 0, 0, 0], flat) \
        + block.theta.bias[None, :, None]
    phi = torch.einsum("oc,bcn->bon", block.phi.weight[:, :, 0, 0, 0], flat) \
        + block.phi.bias[None, :, None]
    g = torch.einsum("oc,bcn->bon", block.g.weight[:, :, 0, 0, 0], flat) \
        + block.g.bias[None, :, None]
    attn = torch.softmax(torch.einsum("bei,bej->bij", theta, phi) / 2.0, dim=-1)  # sqrt(4)
    y = torch.einsum("bij,bej->bei", attn, g).view(2, 4, 2, 3, 3)
    want = x + block.bn(block.W(y))
    assert torch.allclose(block(x), want, atol=1e-5)


def test_i3d_v1_strides_time_in_the_stem():
    # gluoncv's I3D: conv1 stride (2, 2, 2) and pool1 stride (2, 2, 2): 32 frames reach res2 as 8.
    shapes = {}
    model = _meta("i3d_resnet50_v1")
    for part in ("stem", "res5"):
        getattr(model, part).register_forward_hook(
            lambda m, i, o, part=part: shapes.update({part: o.shape}))
    model(torch.zeros(1, 3, 32, 224, 224, device="meta"))
    assert shapes["stem"] == (1, 64, 8, 56, 56) and shapes["res5"] == (1, 2048, 4, 7, 7)


@pytest.mark.parametrize("name", ["tpn_resnet50_f8s8", "tpn_resnet101_f8s8",
                                  "tpn_resnet101_f16s4"])
def test_tpn_small_forward_backward(name):
    # R101's levels pool time by 4 and 8 (8 frames -> 2 and 1 steps): the top-down sum
    # broadcasts over time as in gluoncv; the aux head is frozen and unused.
    torch.manual_seed(0)
    frames = model_facts(name)["input_frames"]
    model = zoo.create_model(name, num_classes=5, width=8, depth=18).train()
    out = model(torch.randn(2, 3, frames, 32, 32))
    assert out.shape == (2, 5)
    out.sum().backward()
    assert all(p.grad is None for p in model.aux_head.parameters())
    assert all(p.grad is not None for p in model.neck.parameters())


def test_vmz_nets_layout():
    csn = _meta("ircsn_resnet152")
    block = csn.layer2[0]
    assert block.conv3.groups == block.conv3.in_channels == 128  # depthwise 3x3x3
    assert block.conv3.stride == (2, 2, 2) and block.bn1.eps == 1e-3
    r21 = _meta("r2plus1d_v2_resnet152")
    assert [r21.layer1[0].conv2_middle.out_channels, r21.layer4[0].conv2_middle.out_channels] \
        == [144, 1152]
    assert len(csn.state_dict()) == 932 and len(r21.state_dict()) == 1238  # as gluoncv's


@pytest.mark.slow
def test_alias_table_in_docs_is_fresh():
    from helpers import ROOT, run_tool

    r = run_tool("list_models.py", ["--aliases", "--markdown"], timeout=120)
    assert r.returncode == 0, r.stderr
    table = r.stdout.strip()
    assert all(f"`{name}`" in table for name in CONFIG_NAMES)
    docs = open(os.path.join(ROOT, "docs", "models.md"), encoding="utf-8").read()
    assert table in docs, ("docs/models.md is stale: paste "
                           "`python tools/list_models.py --aliases --markdown`")


def test_tpn_classifier_is_the_head():
    from zoo.models.classifier import head_keys

    # The classifier first; TPN's auxiliary classifier (one output per class too) after it.
    assert head_keys(_meta("tpn_resnet50_f8s8")) == ("head.proj.weight", "head.proj.bias",
                                                     "aux_head.1.weight", "aux_head.1.bias")


@pytest.mark.slow
def test_nonlocal_net_inflates_like_the_plain_net(tmp_path):
    # gluoncv inflates its I3D-NL nets from ImageNet ResNets; the non-local blocks start as
    # identity, so the inflated NL net scores a clip exactly as the inflated plain net does.
    import torchvision

    torch.manual_seed(0)
    path = tmp_path / "r50.pth"
    torch.save(torchvision.models.resnet50(num_classes=5).state_dict(), path)
    plain = zoo.create_model("i3d_resnet50_v1", num_classes=5, inflate_from=str(path)).eval()
    nl = zoo.create_model("i3d_nl5_resnet50_v1", num_classes=5, inflate_from=str(path)).eval()
    nl.head.load_state_dict(plain.head.state_dict())
    x = torch.randn(1, 3, 8, 32, 32)
    with torch.no_grad():
        assert torch.allclose(nl(x), plain(x), atol=1e-5)
