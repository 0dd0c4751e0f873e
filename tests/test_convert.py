"""Checkpoint converters: every key mapped, shapes right, same logits as the real implementation.

PySlowFast and MMAction2 state dicts are generated here from their published key schemes
(REFERENCE.md), walking the SlowFast architecture independently of zoo's converter code; the
PyTorchVideo round trip runs against the real ``pytorchvideo`` package (a test-only dependency).
"""

from __future__ import annotations

from typing import Dict, Tuple

import pytest
import torch
import torch.nn as nn
from helpers import (
    PATHS,
    Entry,
    calibrated,
    mmaction2_key,
    run_tool,
    single_pathway_key,
    slowfast_entries,
)

import zoo
from zoo.models.weights.convert import (
    ConversionError,
    convert_checkpoint,
    convert_state_dict,
)


def zoo_key(e: Entry) -> str:
    """The key zoo's docs give each tensor."""
    what, p, i, j, part, param = e
    if what == "stem":
        return f"{PATHS[p]}_stem.{param}"
    if what == "fuse":
        return f"fuse_{('stem', 'res2', 'res3', 'res4')[i]}.{param}"
    if what == "block":
        kind, rest = param.split(".", 1)
        name = "shortcut." + kind if part == "short" else f"{kind}_{part}"
        return f"{PATHS[p]}_res{i + 2}.{j}.{name}.{rest}"
    return f"head.proj.{param}"


def pyslowfast_key(e: Entry) -> str:
    what, p, i, j, part, param = e
    if what == "stem":
        return f"s1.pathway{p}_stem.{param}"
    if what == "fuse":
        return f"s{i + 1}_fuse.{param.replace('conv.', 'conv_f2s.')}"
    if what == "block":
        kind, rest = param.split(".", 1)
        name = {"short": "branch1"}.get(part, f"branch2.{part}")
        return f"s{i + 2}.pathway{p}_res{j}.{name}{'_bn' if kind == 'bn' else ''}.{rest}"
    return f"head.projection.{param}"


def _tensor(shape):
    return torch.randint(0, 1000, shape) if shape == () else torch.randn(shape)


def _source(to_key, **arch) -> Tuple[Dict[str, torch.Tensor], Dict[str, str]]:
    """A random source state dict and the zoo key each source key should land on."""
    state, expect = {}, {}
    for e, shape in slowfast_entries(**arch):
        key = to_key(e)
        if key is not None:
            state[key] = _tensor(shape)
            expect[key] = zoo_key(e)
    return state, expect


@pytest.mark.parametrize("name,arch,kwargs,count", [
    ("slowfast_8x8_resnet50", dict(alpha=4, k=7), {}, 662),
    ("slowfast_4x16_resnet50", dict(alpha=8, k=5), {}, 662),
    ("slowfast_16x8_resnet101", dict(depth=101, alpha=4, k=5, width=16,
                                     temp_blocks=(3, 4, 6, 3)), {"width": 16}, 1274),
])
def test_pyslowfast_scheme(tmp_path, name, arch, kwargs, count):
    state, expect = _source(pyslowfast_key, **arch)
    assert len(state) == count
    src = tmp_path / "model.pyth"
    torch.save({"epoch": 196, "model_state": state, "optimizer_state": {}, "cfg": "x: 1\n"}, src)
    out = tmp_path / "zoo.pth"
    report = convert_checkpoint(str(src), str(out), "pyslowfast", name, kwargs)
    assert report.num_source == report.num_target == count and not report.filled
    ckpt = torch.load(out, weights_only=True)
    assert {"model", "optimizer", "scheduler", "scaler", "epoch", "iteration", "cfg",
            "rng"} <= set(ckpt)
    assert f"NAME: {name}" in ckpt["cfg"] and "NUM_CLASSES: 400" in ckpt["cfg"]
    for key, tensor in state.items():
        assert torch.equal(ckpt["model"][expect[key]], tensor), key
    model = zoo.create_model(name, num_classes=400, pretrained=str(out), **kwargs)
    assert torch.equal(model.head.proj.weight, state["head.projection.weight"])


@pytest.mark.slow
def test_mmaction2_scheme(tmp_path):
    state, expect = _source(mmaction2_key, alpha=8, k=5)  # SlowFast R50 4x16
    assert len(state) == 662 - 4 * 5  # no lateral BNs
    src = tmp_path / "mm.pth"
    torch.save({"meta": {"epoch": 256}, "state_dict": state}, src)
    # zoo's default laterals (conv + BN + ReLU) are another network: refused in one line.
    with pytest.raises(ConversionError, match=r"^--from mmaction2: .*--kwargs fuse_norm_act False"):
        convert_checkpoint(str(src), str(tmp_path / "zoo.pth"), "mmaction2",
                           "slowfast_4x16_resnet50")
    # Bare-conv laterals (MMAction2's design): nothing filled, nothing left over.
    exact = tmp_path / "exact.pth"
    report = convert_checkpoint(str(src), str(exact), "mmaction2", "slowfast_4x16_resnet50",
                                {"fuse_norm_act": False})
    assert not report.filled and not report.notes and report.num_target == len(state)
    ckpt = torch.load(exact, weights_only=True)
    assert "fuse_norm_act" in ckpt["cfg"]
    zoo_state = ckpt["model"]
    for key, tensor in state.items():
        if key != "cls_head.fc_cls.weight":
            assert torch.equal(zoo_state[expect[key]], tensor), key
    # Head columns: MMAction2 [fast 256 | slow 2048] -> zoo [slow 2048 | fast 256].
    mm_head, head = state["cls_head.fc_cls.weight"], zoo_state["head.proj.weight"]
    assert torch.equal(head[:, :2048], mm_head[:, 256:])
    assert torch.equal(head[:, 2048:], mm_head[:, :256])
    zoo.create_model("slowfast_4x16_resnet50", fuse_norm_act=False, pretrained=str(exact))


@pytest.mark.slow
def test_conversion_errors_name_the_keys(tmp_path):
    state, _ = _source(pyslowfast_key, depth=18, width=16, beta=4)
    kwargs = dict(depth=18, width=16, beta_inv=4, fusion_kernel=7, alpha=4)
    convert_state_dict(state, "pyslowfast", "slowfast_8x8_resnet50", **kwargs)  # fits
    extra = dict(state, **{"s4.pathway0_nonlocal3.conv_g.weight": torch.zeros(1)})
    with pytest.raises(ConversionError, match="nonlocal3"):
        convert_state_dict(extra, "pyslowfast", "slowfast_8x8_resnet50", **kwargs)
    missing = {k: v for k, v in state.items() if k != "s3.pathway1_res1.branch2.b.weight"}
    with pytest.raises(ConversionError, match=r"fast_res3\.1\.conv_b\.weight"):
        convert_state_dict(missing, "pyslowfast", "slowfast_8x8_resnet50", **kwargs)
    bad = dict(state, **{"s2_fuse.conv_f2s.weight": torch.zeros(8, 4, 5, 1, 1)})
    with pytest.raises(ConversionError, match="shape mismatches.*s2_fuse"):
        convert_state_dict(bad, "pyslowfast", "slowfast_8x8_resnet50", **kwargs)
    with pytest.raises(ConversionError, match="converts to"):
        convert_state_dict(state, "torchvision", "slowfast_8x8_resnet50", **kwargs)
    pickled = tmp_path / "pickled.pth"
    torch.save({"state_dict": state, "meta": {"obj": nn.ReLU()}}, pickled)
    r = run_tool("convert_checkpoint.py", ["--from", "mmaction2", "--model",
                                           "slowfast_8x8_resnet50", str(pickled),
                                           str(tmp_path / "o.pth")], timeout=120)
    assert r.returncode == 1 and "--unsafe-load" in r.stderr
    assert not (tmp_path / "o.pth").exists()


@pytest.mark.parametrize("scheme", ["pyslowfast", "mmaction2"])
@pytest.mark.parametrize("name", ["i3d_resnet50", "slow_8x8_resnet50"])
def test_single_pathway_key_schemes(scheme, name):
    zoo_state = zoo.create_model(name, num_classes=9, width=8, depth=18).state_dict()
    source = {single_pathway_key(scheme, k): v for k, v in zoo_state.items()}
    state, classes, _ = convert_state_dict(source, scheme, name, width=8, depth=18)
    assert classes == 9 and list(state) == list(zoo_state)
    assert all(torch.equal(state[k], v) for k, v in zoo_state.items())


def test_torchvision_same_key_models_convert_unchanged():
    import torchvision

    with torch.device("meta"):
        for tv, name in ((torchvision.models.resnet18(), "resnet18"),
                         (torchvision.models.resnet50(num_classes=10), "tsn_resnet50"),
                         (torchvision.models.video.r2plus1d_18(), "r2plus1d_resnet18"),
                         (torchvision.models.video.swin3d_t(num_classes=7), "swin3d_t")):
            state, classes, _ = convert_state_dict(tv.state_dict(), "torchvision", name)
            assert list(state) == list(tv.state_dict())
            assert classes == tv.state_dict()[list(tv.state_dict())[-2]].shape[0]


@pytest.mark.slow
def test_pytorchvideo_round_trip_slowfast_r50(tmp_path):
    slowfast = pytest.importorskip("pytorchvideo.models.slowfast")
    torch.manual_seed(0)
    fast = torch.randn(1, 3, 32, 64, 64)
    slow = fast[:, :, torch.linspace(0, 31, 8).long()]
    # create_slowfast's defaults are SlowFast R50 8x8; its head pools with a fixed window.
    ptv = slowfast.create_slowfast(head_pool_kernel_sizes=((8, 2, 2), (32, 2, 2)))
    ptv = calibrated(ptv, [slow, fast])
    src = tmp_path / "SLOWFAST_8x8_R50.pyth"
    torch.save({"model_state": ptv.state_dict()}, src)
    out = tmp_path / "zoo.pth"
    r = run_tool("convert_checkpoint.py", ["--from", "pytorchvideo", "--model",
                                           "slowfast_8x8_resnet50", str(src), str(out)])
    assert r.returncode == 0, r.stdout + r.stderr
    model = zoo.create_model("slowfast_8x8_resnet50", num_classes=400, pretrained=str(out))
    model.eval()
    with torch.no_grad():
        want = ptv([slow, fast])  # PyTorchVideo's forward rewrites the list it is given
        assert 0.1 < want.abs().max() < 100
        assert (model([slow, fast]) - want).abs().max() < 1e-4
        assert (model(fast) - want).abs().max() < 1e-4  # single tensor: slow picked inside


@pytest.mark.slow
def test_pytorchvideo_slowfast_r101_16x8_small():
    slowfast = pytest.importorskip("pytorchvideo.models.slowfast")
    torch.manual_seed(0)
    res4 = ((3, 1, 1),) * 6 + ((1, 1, 1),) * 17  # the "50_50" pattern of slowfast_16x8_r101_50_50
    kernels = (((1, 1, 1), (1, 1, 1), res4, (3, 1, 1)), ((3, 1, 1), (3, 1, 1), res4, (3, 1, 1)))
    ptv = slowfast.create_slowfast(
        model_depth=101, stem_dim_outs=(16, 2), slowfast_fusion_conv_kernel_size=(5, 1, 1),
        stage_conv_a_kernel_sizes=kernels, model_num_class=7,
        head_pool_kernel_sizes=((4, 1, 1), (16, 1, 1)))
    x = [torch.randn(2, 3, 4, 32, 32), torch.randn(2, 3, 16, 32, 32)]
    ptv = calibrated(ptv, x)
    state, classes, _ = convert_state_dict(ptv.state_dict(), "pytorchvideo",
                                           "slowfast_16x8_resnet101", width=16)
    model = zoo.create_model("slowfast_16x8_resnet101", num_classes=classes, width=16).eval()
    model.load_state_dict(state)
    with torch.no_grad():
        assert (model(x) - ptv(list(x))).abs().max() < 1e-4


@pytest.mark.parametrize("name", ["slow_8x8_resnet50", "i3d_resnet50"])
def test_pytorchvideo_single_pathway_small(name):
    resnet = pytest.importorskip("pytorchvideo.models.resnet")
    torch.manual_seed(0)
    if name == "i3d_resnet50":  # PyTorchVideo's hub i3d_r50 settings
        arch = dict(stem_conv_kernel_size=(5, 7, 7), stage1_pool=nn.MaxPool3d,
                    stage_conv_a_kernel_size=((3, 1, 1), [(3, 1, 1), (1, 1, 1)],
                                              [(3, 1, 1), (1, 1, 1)], [(1, 1, 1), (3, 1, 1)]),
                    head_pool_kernel_size=(4, 1, 1))
    else:  # slow_r50
        arch = dict(stem_conv_kernel_size=(1, 7, 7), head_pool_kernel_size=(8, 1, 1))
    ptv = resnet.create_resnet(stem_dim_out=8, model_num_class=6, **arch)
    x = torch.randn(2, 3, 8, 32, 32)
    ptv = calibrated(ptv, x)
    state, classes, _ = convert_state_dict(ptv.state_dict(), "pytorchvideo", name, width=8)
    model = zoo.create_model(name, num_classes=classes, width=8).eval()
    model.load_state_dict(state)
    with torch.no_grad():
        assert (model(x) - ptv(x)).abs().max() < 1e-4


@pytest.mark.parametrize("name", ["i3d_resnet50", "slow_8x8_resnet50"])
def test_torchvision_inflation_keeps_static_logits(tmp_path, name, caplog):
    import torchvision

    torch.manual_seed(0)
    r50 = torchvision.models.resnet50().eval()
    path = tmp_path / "resnet50.pth"
    torch.save(r50.state_dict(), path)
    image = torch.randn(1, 3, 32, 32)
    static = image.unsqueeze(2).repeat(1, 1, 8, 1, 1)
    model = zoo.create_model(name, num_classes=1000, inflate_from=str(path),
                             temporal_pad="replicate").eval()
    with torch.no_grad():
        want = r50(image)
        scale = want.abs().max()  # ~30: float32 sums in another order differ by ~1e-6 of it
        assert (model(static) - want).abs().max() < 1e-5 * (1 + scale)
        # Zero temporal padding (the published nets): the end frames see fewer taps.
        zeros = zoo.create_model(name, num_classes=1000, inflate_from=str(path)).eval()
        assert (zeros(static) - want).abs().max() < 0.5 * want.abs().max()
    # The converter does the same inflation into a file; a 400-class model skips the head.
    out = tmp_path / "inflated.pth"
    convert_checkpoint(str(path), str(out), "torchvision", name)
    with caplog.at_level("WARNING"):
        zoo.create_model(name, num_classes=400, pretrained=str(out))
    lines = [r.getMessage() for r in caplog.records if "re-initialised" in r.getMessage()]
    assert len(lines) == 1 and "head.proj" in lines[0] and "(1000, 2048)" in lines[0]


def test_pretrained_loading(tmp_path, caplog):
    kwargs = dict(width=8, depth=18)
    model = zoo.create_model("slowfast_tiny_resnet18", num_classes=5, **kwargs)
    path = tmp_path / "ckpt.pth"
    torch.save({"model": {f"module.{k}": v for k, v in model.state_dict().items()},
                "epoch": 3, "cfg": ""}, path)
    same = zoo.create_model("slowfast_tiny_resnet18", num_classes=5, pretrained=str(path),
                            **kwargs)
    assert all(torch.equal(a, b) for a, b in zip(same.state_dict().values(),
                                                 model.state_dict().values()))
    with caplog.at_level("WARNING"):
        other = zoo.create_model("slowfast_tiny_resnet18", num_classes=7, pretrained=str(path),
                                 **kwargs)
    lines = [r.getMessage() for r in caplog.records if "re-initialised" in r.getMessage()]
    assert len(lines) == 1 and "head.proj" in lines[0] and "weight (5, 320)" in lines[0]
    assert other.head.proj.weight.shape == (7, 320)
    assert torch.equal(other.fast_res3[0].conv_a.weight, model.fast_res3[0].conv_a.weight)
    with pytest.raises(RuntimeError, match=r"shape mismatch: slow_stem\.conv\.weight"):
        zoo.create_model("slowfast_tiny_resnet18", pretrained=str(path), width=16, depth=18)
    with pytest.raises(RuntimeError, match=r"missing from checkpoint .*slow_res2\.2"):
        zoo.create_model("slowfast_tiny_resnet18", pretrained=str(path), width=8, depth=50)


def test_a_damaged_file_is_called_damaged_not_refused(tmp_path):
    from zoo.models.weights.convert.common import read_source

    whole = tmp_path / "whole.pth"
    torch.save({"state_dict": {"w": torch.zeros(64, 64)}}, whole)
    cut = tmp_path / "cut.pth"
    cut.write_bytes(whole.read_bytes()[:4000])
    for unsafe in (False, True):  # --unsafe-load cannot mend a cut file, so it is not offered
        with pytest.raises(ConversionError) as e:
            read_source(str(cut), ["state_dict"], allow_pickle=unsafe)
        assert "cut short or damaged" in str(e.value)
        assert "weights_only" not in str(e.value) and "--unsafe-load" not in str(e.value)
    assert list(read_source(str(whole), ["state_dict"])) == ["w"]


def test_a_whole_pickled_model_converts_with_unsafe_load(tmp_path):
    """torch.save(model) pickles the module: MODEL.PRETRAINED refuses it and points to
    --unsafe-load, which reads the model's state_dict()."""
    import torchvision

    from zoo.models.weights import WeightsError

    torch.manual_seed(0)
    net = torchvision.models.resnet18(num_classes=10)
    whole = tmp_path / "whole.pth"
    torch.save(net, whole)
    with pytest.raises(WeightsError, match="--unsafe-load .a whole pickled model"):
        zoo.create_model("resnet18", num_classes=10, pretrained=str(whole))
    out = tmp_path / "zoo.pth"
    convert_checkpoint(str(whole), str(out), "torchvision", "resnet18", allow_pickle=True)
    model = zoo.create_model("resnet18", num_classes=10, pretrained=str(out))
    assert all(torch.equal(model.state_dict()[k], v) for k, v in net.state_dict().items())
