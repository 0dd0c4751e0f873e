"""gluoncv.torch's published weights: key conversion, format detection, the table, the download.

Two references, neither of them zoo's converter:

* ``gluoncv_layout`` (tests/helpers.py) writes a zoo state dict in gluoncv's key layout, written
  from gluoncv's model code (the module names of
  ``gluoncv/torch/model_zoo/action_recognition/*.py``), including the tensors gluoncv's state
  dicts hold twice. It needs nothing installed.
* With ``ZOO_GLUONCV_WHEEL`` naming gluoncv's wheel (``pip download gluoncv==0.10.5.post0
  --no-deps``), ``test_gluoncv_code_gives_the_same_logits`` imports gluoncv's own model files
  from it (only those; no mxnet, and gluoncv is no dependency of zoo), builds gluoncv's nets with
  random weights and checks that zoo, loading gluoncv's state dict, gives gluoncv's logits.

Downloads come from the loopback server of tests/conftest.py (``server``).
"""

from __future__ import annotations

import hashlib
import os
import sys
import zipfile

import pytest
import torch
from helpers import file_bytes, gluoncv_family, gluoncv_layout

import zoo
from zoo.config import load_config
from zoo.models import build_model, model_facts
from zoo.models.weights import WeightsError, cache_path, table
from zoo.models.weights.load import detect_format, to_model_keys

# Every test gets a private ZOO_HOME (conftest.py).
pytestmark = pytest.mark.usefixtures("zoo_home")


def _randomised(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` in eval mode with random BN statistics and affines, so a misplaced BN shows."""
    torch.manual_seed(3)
    with torch.no_grad():
        for key, value in list(model.named_parameters()) + list(model.named_buffers()):
            if not value.dtype.is_floating_point:
                continue
            if key.endswith("running_var"):
                value.copy_(torch.rand_like(value) + 0.5)
            elif key.endswith("running_mean"):
                value.copy_(torch.randn_like(value) * 0.1)
            elif value.dim() == 1:
                value.copy_(torch.randn_like(value) * 0.2 + (0.0 if key.endswith("bias") else 1))
            else:
                value.copy_(torch.randn_like(value) * (1.0 / value[0].numel()) ** 0.5)
    return model.eval()


# name, input (B, C, T, H, W): one net per key family (narrower than published, for speed).
FAMILIES = [
    ("i3d_nl5_resnet50_v1_kinetics400", (1, 3, 8, 64, 64)),
    ("i3d_slow_resnet50_f8s8_kinetics400", (1, 3, 8, 64, 64)),
    ("tpn_resnet50_f8s8_kinetics400", (1, 3, 8, 64, 64)),
    ("slowfast_4x16_resnet50_kinetics400", (1, 3, 32, 64, 64)),
    ("r2plus1d_v1_resnet18_kinetics400", (1, 3, 8, 56, 56)),
    ("r2plus1d_v1_resnet50_kinetics400", (1, 3, 8, 56, 56)),
    ("ircsn_v2_resnet152_f32s2_kinetics400", (1, 3, 8, 64, 64)),
    ("resnet18_v1b_kinetics400", (2, 3, 3, 64, 64)),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,shape", FAMILIES)
def test_gluoncv_layout_loads_with_identical_logits(name, shape):
    kwargs = {} if name.startswith("resnet") else {"width": 16}
    torch.manual_seed(0)
    reference = _randomised(zoo.create_model(name, **kwargs))
    state = gluoncv_layout(name, reference.state_dict())
    model = zoo.create_model(name, **kwargs).eval()
    fmt = detect_format(state, model)
    assert fmt == ("zoo" if gluoncv_family(name) == "same" else "gluoncv")
    converted = to_model_keys(state, model, fmt, name)
    want = reference.state_dict()
    assert set(converted) == set(want)
    assert all(torch.equal(converted[k], v) for k, v in want.items())
    model.load_state_dict(converted)
    model.eval()
    x = torch.randn(shape)
    with torch.no_grad():
        assert torch.equal(model(x), reference(x))


def test_a_second_copy_that_differs_is_an_error():
    from zoo.models.weights.convert import ConversionError

    with torch.device("meta"):
        model = zoo.create_model("i3d_resnet50_v1_kinetics400")
    state = gluoncv_layout("i3d_resnet50_v1_kinetics400",
                           zoo.create_model("i3d_resnet50_v1_kinetics400").state_dict())
    state["head.1.bias"] = state["head.1.bias"] + 1
    with pytest.raises(ConversionError, match="head.1.bias should be a second copy of fc.bias"):
        to_model_keys(state, model, "gluoncv", "x")


# ----------------------------------------------------------------------------- the table
def test_table_has_gluoncv_files_under_their_names():
    assert len(table.GLUONCV_SHA1) == 35
    for name, sha1 in table.GLUONCV_SHA1.items():
        assert name in zoo.list_models(), name
        tag = name.rsplit("_", 1)[1]
        entry = table.WEIGHTS[name][tag]
        assert entry.url == ("https://apache-mxnet.s3-accelerate.dualstack.amazonaws.com/torch/"
                             f"models/{name}-{sha1[:8]}.pth")
        assert (entry.format, entry.hash, entry.hash_algo, entry.dataset) == (
            "gluoncv", sha1, "sha1", tag)
        assert table.default_tag(name) == tag
        base = name.rsplit("_", 1)[0]
        custom = table.entries(base + "_custom")[tag]
        assert custom.url == entry.url and custom.new_head
    # gluoncv's own name beats the base architecture's file of the same tag.
    assert table.entries("slowfast_8x8_resnet50_kinetics400")["kinetics400"].format == "gluoncv"
    assert table.entries("slowfast_8x8_resnet50")["kinetics400"].format == "pytorchvideo"
    assert table.default_tag("i3d_slow_resnet101_f16s4_custom") == "kinetics400"
    assert set(table.entries("i3d_slow_resnet101_f16s4_custom")) >= {"kinetics400", "kinetics700"}
    assert table.default_tag("slowfast_16x8_resnet50_custom") is None  # sthsthv2 only


def test_every_gluoncv_config_model_has_gluoncv_weights_for_true():
    from helpers import CONFIG_NAMES

    from zoo.models.weights import resolve_pretrained

    for name in CONFIG_NAMES:
        source = resolve_pretrained("True", name)
        assert source.entry.format == "gluoncv", name
        base = name.rsplit("_", 1)[0]
        if name.endswith("_custom"):
            assert source.url.rsplit("/", 1)[1].startswith(base + "_kinetics400-"), name
            assert source.entry.new_head
        else:
            assert source.url.rsplit("/", 1)[1].startswith(name + "-"), name


# ----------------------------------------------------------------------------- download and load
_NAME = "tpn_resnet50_f8s8_kinetics400"
_NARROW = {"width": 16}  # a narrower TPN than gluoncv's, for speed: the file is the test's own


def _serve_gluoncv(server, tmp_path, monkeypatch, sha1=None):  # noqa: F811
    """Serve a gluoncv-format TPN at the table URL's path (through the mirror); returns the
    reference model and the URL."""
    torch.manual_seed(0)
    reference = _randomised(zoo.create_model(_NAME, **_NARROW))
    body = file_bytes(gluoncv_layout(_NAME, reference.state_dict()), tmp_path)
    entry = table.WEIGHTS[_NAME]["kinetics400"]
    path = entry.url.split(".com", 1)[1]
    server.files[path] = body
    digest = sha1 or hashlib.sha1(body).hexdigest()
    for name in (_NAME, "tpn_resnet50_f8s8_custom"):
        monkeypatch.setitem(table.WEIGHTS, name, {"kinetics400": table.WeightsEntry(
            entry.url, "gluoncv", "kinetics400", digest, "test", hash_algo="sha1",
            new_head=name.endswith("_custom"))})
    monkeypatch.setenv("ZOO_WEIGHTS_MIRROR", server.url)
    return reference, entry.url


def test_pretrained_true_downloads_checks_sha1_and_loads(server, tmp_path, monkeypatch):  # noqa
    reference, url = _serve_gluoncv(server, tmp_path, monkeypatch)
    cfg = load_config(None, ["MODEL.NAME", _NAME, "DATA.NUM_CLASSES", "400",
                             "MODEL.PRETRAINED", "True", "MODEL.KWARGS", "['width', 16]"])
    model = build_model(cfg).eval()
    x = torch.randn(1, 3, 8, 64, 64)
    with torch.no_grad():
        assert torch.equal(model(x), reference(x))
    assert os.path.isfile(cache_path(url))


def test_sha1_mismatch_removes_the_file(server, tmp_path, monkeypatch):  # noqa: F811
    _, url = _serve_gluoncv(server, tmp_path, monkeypatch, sha1="0123456789abcdef" * 2 + "01234567")
    with pytest.raises(WeightsError, match="SHA-1 .* does not match the published 0123456789"):
        zoo.create_model(_NAME, pretrained="True", **_NARROW)
    assert not os.path.exists(cache_path(url)) and not os.path.exists(cache_path(url) + ".part")


def test_custom_alias_gets_the_backbone_and_fresh_heads(server, tmp_path, monkeypatch):  # noqa
    reference, _ = _serve_gluoncv(server, tmp_path, monkeypatch)
    want = reference.state_dict()
    for classes in (7, 400):  # gluoncv's _custom drops the classifier even at 400 classes
        torch.manual_seed(5)
        fresh = zoo.create_model("tpn_resnet50_f8s8_custom", num_classes=classes,
                                 **_NARROW).state_dict()
        torch.manual_seed(5)
        model = zoo.create_model("tpn_resnet50_f8s8_custom", num_classes=classes,
                                 pretrained="True", **_NARROW)
        got = model.state_dict()
        for key, value in got.items():
            if key.startswith(("head.proj.", "aux_head.1.")):  # the classifier and TPN's aux one
                assert torch.equal(value, fresh[key]), key
            else:
                assert torch.equal(value, want[key]), key


def test_tpn_finetunes_from_a_kinetics_file_with_another_class_count(tmp_path):
    """The aux head has a class dimension too: a TPN file loads into a TPN of any class count."""
    torch.manual_seed(0)
    reference = zoo.create_model("tpn_resnet50_f8s8", num_classes=400, **_NARROW)
    path = tmp_path / "tpn.pth"
    torch.save({"model": reference.state_dict()}, path)
    model = zoo.create_model("tpn_resnet50_f8s8", num_classes=9, pretrained=str(path), **_NARROW)
    assert model.aux_head[1].weight.shape[0] == 9 and model.head.proj.weight.shape[0] == 9
    assert torch.equal(model.neck.spatial.conv.weight, reference.neck.spatial.conv.weight)


# ----------------------------------------------------------------------------- gluoncv's own code
def _gluoncv_modules(tmp_path_factory):
    wheel = os.environ.get("ZOO_GLUONCV_WHEEL", "")
    if not os.path.isfile(wheel):
        pytest.skip("compares with gluoncv's own code: set ZOO_GLUONCV_WHEEL to gluoncv's wheel "
                    "(pip download gluoncv==0.10.5.post0 --no-deps)")
    root = tmp_path_factory.mktemp("gluoncv")
    with zipfile.ZipFile(wheel) as z:
        for member in z.namelist():
            if (member.startswith("gluoncv/torch/model_zoo/action_recognition/")
                    or member == "gluoncv/torch/utils/utils.py"):
                z.extract(member, root)
    for package in ("gluoncv", "gluoncv/torch", "gluoncv/torch/model_zoo",
                    "gluoncv/torch/utils"):
        (root / package / "__init__.py").write_text("")  # only the model files, nothing else
    sys.path.insert(0, str(root))
    try:
        import gluoncv.torch.model_zoo.action_recognition as ar
    finally:
        sys.path.remove(str(root))
    return ar


@pytest.fixture(scope="module")
def gluoncv_ar(tmp_path_factory):
    return _gluoncv_modules(tmp_path_factory)


def _gluoncv_cfg(num_classes):
    from yacs.config import CfgNode

    cfg = CfgNode({"CONFIG": {
        "MODEL": {"PRETRAINED": False, "PRETRAINED_BASE": True, "BN_EVAL": False,
                  "BN_FROZEN": False, "PARTIAL_BN": False, "USE_AFFINE": False},
        "DATA": {"NUM_CLASSES": num_classes, "NUM_SEGMENT": 1, "NUM_CROP": 1},
        "INFERENCE": {"FEAT": False}}})
    return cfg


GLUONCV_CASES = FAMILIES + [
    ("i3d_resnet50_v1_kinetics400", (1, 3, 8, 64, 64)),
    ("tpn_resnet101_f32s2_kinetics400", (1, 3, 32, 64, 64)),
    ("slowfast_16x8_resnet50_sthsthv2", (1, 3, 64, 64, 64)),
    ("r2plus1d_v2_resnet152_kinetics400", (1, 3, 8, 64, 64)),
    ("resnet50_v1b_sthsthv2", (2, 3, 3, 64, 64)),
    ("i3d_slow_resnet101_f16s4_kinetics700", (1, 3, 16, 64, 64)),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,shape", GLUONCV_CASES)
def test_gluoncv_code_gives_the_same_logits(gluoncv_ar, name, shape, tmp_path, monkeypatch):
    import torchvision

    for depth in (18, 34, 50, 101, 152):  # gluoncv inflates torchvision's 2D nets: no download
        build = getattr(torchvision.models, f"resnet{depth}")
        monkeypatch.setattr(torchvision.models, f"resnet{depth}",
                            lambda *a, _b=build, **k: _b(weights=None))
    classes = model_facts(name)["num_classes"]
    torch.manual_seed(0)
    gluoncv_net = _randomised(getattr(gluoncv_ar, name)(_gluoncv_cfg(classes)))
    path = tmp_path / f"{name}.pth"
    torch.save(gluoncv_net.state_dict(), path)  # gluoncv publishes bare state dicts
    model = zoo.create_model(name, pretrained=str(path)).eval()
    x = torch.randn(shape)
    with torch.no_grad():
        want, got = gluoncv_net(x), model(x)
    assert 0.01 < want.abs().max() < 1e4
    assert (got - want).abs().max() <= 1e-4 * want.abs().max()


def test_convert_checkpoint_from_gluoncv_for_a_fixed_class_name(tmp_path):
    """tools/convert_checkpoint.py --from gluoncv on a 174-class name (Something-Something)."""
    from zoo.models.weights.convert import convert_checkpoint

    name = "i3d_resnet50_v1_sthsthv2"
    torch.manual_seed(0)
    reference = zoo.create_model(name, width=16)
    src, out = tmp_path / "gluoncv.pth", tmp_path / "zoo.pth"
    torch.save(gluoncv_layout(name, reference.state_dict()), src)
    report = convert_checkpoint(str(src), str(out), "gluoncv", name, {"width": 16})
    assert report.num_source == len(torch.load(src))  # the second copies were read too
    state = torch.load(out, weights_only=True)["model"]
    assert state["head.proj.weight"].shape[0] == 174
    assert all(torch.equal(state[k], v) for k, v in reference.state_dict().items())


def test_an_alias_for_another_input_or_alpha_gets_no_video_weights_of_its_base():
    """gluoncv's 4x16 R101 (alpha 8) and 16x8 R101 (64 frames) build zoo's 8x8 R101 layers, but
    PyTorchVideo's 8x8 R101 file was trained for alpha 4 and 32 frames: same shapes, another
    net. They must not load it by True; a same-input alias still does."""
    from zoo.models.weights.table import default_tag, entries

    for name in ("slowfast_4x16_resnet101_kinetics400", "slowfast_16x8_resnet101_kinetics400"):
        assert not any(e.dataset != "imagenet1k" for e in entries(name).values()), name
        assert default_tag(name) is None, name
    same = entries("slowfast_16x8_resnet101_50_50_kinetics400")
    assert same["kinetics400"].url.endswith("SLOWFAST_16x8_R101_50_50.pyth")
