"""X3D: PySlowFast's parameter counts, and PyTorchVideo's logits from a PyTorchVideo state dict
converted with ``--from pytorchvideo`` (its stage-2 shortcut BN filled as an identity), checked
against the real ``pytorchvideo`` package (a test-only dependency) on random weights."""

import pytest
import torch
from helpers import as_pyslowfast_x3d, calibrated

import zoo
from zoo.models.flops import count_params
from zoo.models.weights.convert import convert_state_dict

# Parameter counts at 400 classes: PySlowFast's X3D-XS/S/M and X3D-L, and PyTorchVideo's
# create_x3d (one BN fewer: 48 parameters).
PYSLOWFAST_PARAMS = {"x3d_xs": 3_794_322, "x3d_s": 3_794_322, "x3d_m": 3_794_322,
                     "x3d_l": 6_153_432}


@pytest.mark.parametrize("name", sorted(PYSLOWFAST_PARAMS))
def test_parameter_counts_are_pyslowfast_s(name):
    with torch.device("meta"):
        model = zoo.create_model(name, num_classes=400)
    assert count_params(model) == PYSLOWFAST_PARAMS[name]


@pytest.mark.parametrize("name,depth_factor,dtype", [("x3d_xs", 2.2, torch.float32),
                                                    ("x3d_l", 5.0, torch.float64)])
def test_pytorchvideo_x3d_gives_the_same_logits(name, depth_factor, dtype):
    """Within 1e-4 of the largest logit. X3D-L's 55 blocks, with random BN statistics, amplify
    float32 rounding to ~3e-4 (the stem's outputs are equal to the bit, res2's within 1e-8 in
    float64), so it is compared in float64."""
    x3d = pytest.importorskip("pytorchvideo.models.x3d")
    frames, crop = 4, 64
    torch.manual_seed(0)
    ptv = x3d.create_x3d(input_clip_length=frames, input_crop_size=crop, model_num_class=7,
                         depth_factor=depth_factor, head_activation=None, dropout_rate=0.0)
    assert count_params(ptv) == PYSLOWFAST_PARAMS[name] - 48 - (400 - 7) * 2049
    x = torch.randn(2, 3, frames, crop, crop)
    ptv = calibrated(ptv, x)
    state, classes, report = convert_state_dict(ptv.state_dict(), "pytorchvideo", name)
    assert classes == 7
    assert sorted({k.rsplit(".", 1)[0] for k in report.filled}) == ["res2.0.shortcut.bn"]
    model = zoo.create_model(name, num_classes=classes).eval()
    model.load_state_dict(state)
    model, ptv, x = model.to(dtype), ptv.to(dtype), x.to(dtype)
    with torch.no_grad():
        ours, theirs = model(x), ptv(x)
    assert ours.shape == (2, 7)
    assert (ours - theirs).abs().max() <= 1e-4 * theirs.abs().max()


def test_x3d_is_a_classifier_and_fine_tunes_its_head():
    model = zoo.create_model("x3d_xs", num_classes=5)
    assert model.get_classifier() is model.head.proj
    model.reset_classifier(3)
    with torch.no_grad():
        assert model.eval()(torch.randn(1, 3, 4, 64, 64)).shape == (1, 3)


def test_pyslowfast_x3d_keys_convert_to_the_same_logits(tmp_path):
    """A PySlowFast-keyed X3D-XS (PyTorchVideo's random weights under PySlowFast's names, as a
    .pyth file holds them) converts with --from pyslowfast and gives PyTorchVideo's logits."""
    x3d = pytest.importorskip("pytorchvideo.models.x3d")
    torch.manual_seed(0)
    ptv = x3d.create_x3d(input_clip_length=4, input_crop_size=64, model_num_class=5,
                         head_activation=None, dropout_rate=0.0)
    x = torch.randn(2, 3, 4, 64, 64)
    ptv = calibrated(ptv, x)
    state, classes, report = convert_state_dict(as_pyslowfast_x3d(ptv.state_dict()), "pyslowfast",
                                                "x3d_xs")
    assert classes == 5 and not report.filled
    model = zoo.create_model("x3d_xs", num_classes=classes).eval()
    model.load_state_dict(state)
    with torch.no_grad():
        ours, theirs = model(x), ptv(x)
    assert (ours - theirs).abs().max() <= 1e-4 * theirs.abs().max()
