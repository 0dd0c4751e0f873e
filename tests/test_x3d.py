"""X3D: PySlowFast's parameter counts; with ``shortcut_bn="width_change"``, PyTorchVideo's
network (no BN after res2.0's shortcut conv), whose logits from a PyTorchVideo state dict equal
PyTorchVideo's in eval and train mode, checked against the real ``pytorchvideo`` package (a
test-only dependency) on random weights; each network's files refused by the other in one line."""

import pytest
import torch
from helpers import as_pyslowfast_x3d, calibrated

import zoo
from zoo.config import cfg_to_yaml, load_config
from zoo.infer.checkpoint_model import model_from_checkpoint
from zoo.models.flops import count_params
from zoo.models.weights.convert import ConversionError, convert_state_dict
from zoo.models.weights.download import WeightsError
from zoo.utils.checkpoint_io import make_checkpoint

PTV_KWARGS = ["shortcut_bn", "width_change"]

# Parameter counts at 400 classes: PySlowFast's X3D-XS/S/M and X3D-L, and PyTorchVideo's
# create_x3d (one BN fewer: 48 parameters).
PYSLOWFAST_PARAMS = {"x3d_xs": 3_794_322, "x3d_s": 3_794_322, "x3d_m": 3_794_322,
                     "x3d_l": 6_153_432}


@pytest.mark.parametrize("name", sorted(PYSLOWFAST_PARAMS))
def test_parameter_counts_are_pyslowfast_s(name):
    with torch.device("meta"):
        model = zoo.create_model(name, num_classes=400)
        ptv_net = zoo.create_model(name, num_classes=400, shortcut_bn="width_change")
    assert count_params(model) == PYSLOWFAST_PARAMS[name]
    assert count_params(ptv_net) == PYSLOWFAST_PARAMS[name] - 48
    assert not isinstance(ptv_net.res2[0].shortcut.bn, torch.nn.BatchNorm3d)
    assert all(isinstance(getattr(ptv_net, f"res{n}")[0].shortcut.bn, torch.nn.BatchNorm3d)
               for n in (3, 4, 5))


def test_shortcut_bn_takes_two_values():
    with pytest.raises(ValueError, match=r"^shortcut_bn must be one of \('all', 'width_change'\)"):
        zoo.create_model("x3d_xs", shortcut_bn="none")


@pytest.mark.parametrize("name,depth_factor,dtype", [("x3d_xs", 2.2, torch.float32),
                                                    ("x3d_l", 5.0, torch.float64)])
def test_pytorchvideo_x3d_gives_the_same_logits(name, depth_factor, dtype):
    """In eval mode, then in train mode (batch statistics, dropout off), within 1e-4 of the
    largest logit. X3D-L's 55 blocks, with random BN statistics, amplify float32 rounding to
    ~3e-4 (the stem's outputs are equal to the bit, res2's within 1e-8 in float64), so it is
    compared in float64."""
    x3d = pytest.importorskip("pytorchvideo.models.x3d")
    frames, crop = 4, 64
    torch.manual_seed(0)
    ptv = x3d.create_x3d(input_clip_length=frames, input_crop_size=crop, model_num_class=7,
                         depth_factor=depth_factor, head_activation=None, dropout_rate=0.0)
    assert count_params(ptv) == PYSLOWFAST_PARAMS[name] - 48 - (400 - 7) * 2049
    x = torch.randn(2, 3, frames, crop, crop)
    ptv = calibrated(ptv, x)
    state, classes, report = convert_state_dict(ptv.state_dict(), "pytorchvideo", name,
                                                shortcut_bn="width_change")
    assert classes == 7 and not report.filled
    model = zoo.create_model(name, num_classes=classes, shortcut_bn="width_change", dropout=0.0)
    model.load_state_dict(state)
    model, ptv, x = model.to(dtype), ptv.to(dtype), x.to(dtype)
    for mode in ("eval", "train"):
        with torch.no_grad():
            ours, theirs = getattr(model, mode)()(x), getattr(ptv, mode)()(x)
        assert ours.shape == (2, 7)
        assert (ours - theirs).abs().max() <= 1e-4 * theirs.abs().max(), mode


def _ptv_x3d_file(tmp_path, classes=5):
    """PyTorchVideo's X3D-XS (random, calibrated weights) saved as its hub's .pyth holds it."""
    x3d = pytest.importorskip("pytorchvideo.models.x3d")
    torch.manual_seed(0)
    ptv = x3d.create_x3d(input_clip_length=4, input_crop_size=64, model_num_class=classes,
                         head_activation=None, dropout_rate=0.0)
    x = torch.randn(2, 3, 4, 64, 64)
    ptv = calibrated(ptv, x)
    path = tmp_path / "X3D_XS.pyth"
    torch.save({"model_state": ptv.state_dict()}, path)
    return ptv, x, str(path)


def test_a_pytorchvideo_file_fine_tunes_pytorchvideos_network(tmp_path):
    """MODEL.PRETRAINED of a PyTorchVideo file, in the X3D built with shortcut_bn width_change:
    train-mode logits (batch statistics; dropout off) equal PyTorchVideo's own model's, and so do
    the gradients of a step (in float64: float32 rounding, amplified by the batch statistics of
    2 clips, moves them by ~1%)."""
    ptv, x, path = _ptv_x3d_file(tmp_path)
    model = zoo.create_model("x3d_xs", num_classes=5, pretrained=path, dropout=0.0,
                             shortcut_bn="width_change")
    with torch.no_grad():
        ours, theirs = model.train()(x), ptv.train()(x)
    assert (ours - theirs).abs().max() <= 1e-4 * theirs.abs().max()
    model, ptv, x = model.double(), ptv.double(), x.double()
    model(x).square().sum().backward()
    ptv(x).square().sum().backward()
    pairs = [(model.res2[0].shortcut.conv.weight, ptv.blocks[1].res_blocks[0].branch1_conv.weight),
             (model.stem.bn.weight, ptv.blocks[0].norm.weight),
             (model.head.lin_5.weight, ptv.blocks[-1].pool.post_conv.weight)]
    for mine, ref in pairs:
        assert (mine.grad - ref.grad).abs().max() <= 1e-9 * ref.grad.abs().max()


def test_a_pytorchvideo_file_in_the_default_x3d_is_refused_in_one_line(tmp_path):
    ptv, _, path = _ptv_x3d_file(tmp_path)
    with pytest.raises(WeightsError) as e:
        zoo.create_model("x3d_xs", num_classes=5, pretrained=path)
    message = str(e.value)
    assert "\n" not in message and "res2.0" in message
    assert f"MODEL.KWARGS {PTV_KWARGS}" in message
    with pytest.raises(ConversionError, match=r"^--from pytorchvideo: .*--kwargs shortcut_bn "
                                              r"width_change") as e:
        convert_state_dict(ptv.state_dict(), "pytorchvideo", "x3d_xs")
    assert "\n" not in str(e.value)


def test_a_pyslowfast_file_in_the_pytorchvideo_x3d_is_refused_in_one_line(tmp_path):
    ptv, _, _ = _ptv_x3d_file(tmp_path)
    with pytest.raises(ConversionError, match=r"^--from pyslowfast: .*res2\.0.*shortcut_bn "
                                              r"'all'") as e:
        convert_state_dict(as_pyslowfast_x3d(ptv.state_dict()), "pyslowfast", "x3d_xs",
                           shortcut_bn="width_change")
    assert "\n" not in str(e.value)


def test_a_run_of_the_pytorchvideo_x3d_tests_as_trained(tmp_path):
    """A zoo checkpoint records MODEL.KWARGS shortcut_bn width_change: testing rebuilds that
    network from it (whatever the test config's kwargs), and the default X3D refuses it."""
    ptv, x, path = _ptv_x3d_file(tmp_path)
    trained = load_config(None, ["MODEL.NAME", "x3d_xs", "MODEL.KWARGS", str(PTV_KWARGS),
                                 "DATA.NUM_CLASSES", "5"], validate=False)
    model = zoo.create_model("x3d_xs", num_classes=5, pretrained=path, shortcut_bn="width_change")
    ckpt = tmp_path / "epoch_1.pth"
    torch.save(make_checkpoint(model.state_dict(), cfg_to_yaml(trained)), ckpt)
    cfg = load_config(None, ["MODEL.NAME", "x3d_xs", "DATA.NUM_CLASSES", "5"], validate=False)
    cfg, rebuilt = model_from_checkpoint(cfg, str(ckpt))
    assert list(cfg.CONFIG.MODEL.KWARGS) == PTV_KWARGS
    assert "res2.0.shortcut.bn.weight" not in rebuilt.state_dict()
    with torch.no_grad():
        assert (rebuilt.eval()(x) - ptv.eval()(x)).abs().max() <= 1e-4 * ptv(x).abs().max()
    with pytest.raises(WeightsError, match=r"build the model with MODEL.KWARGS "
                                           r"\['shortcut_bn', 'width_change'\]"):
        zoo.create_model("x3d_xs", num_classes=5, pretrained=str(ckpt))


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
