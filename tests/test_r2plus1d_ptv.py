"""R(2+1)D-50 in PyTorchVideo's layout: the hub's parameter count, PyTorchVideo's logits from a
PyTorchVideo state dict converted with ``--from pytorchvideo``, and a converted file loading with
``pretrained=``, checked against the real ``pytorchvideo`` package (a test-only dependency) on
random weights."""

import pytest
import torch
import torch.nn as nn
from helpers import calibrated

import zoo
from zoo.models.flops import count_params
from zoo.models.weights.convert import convert_state_dict

NAME = "r2plus1d_16x4_resnet50"
# PyTorchVideo's hub r2plus1d_r50 at 400 classes (its model zoo: 28.11M).
HUB_PARAMS = 28_107_600


def _ptv(classes: int, width: int = 64, pool=(1, 2, 2)):
    """PyTorchVideo's create_r2plus1d with logits out, sized for a 4 x 64 x 64 clip (its head
    pools a fixed window: res5 is 1 x 2 x 2 there)."""
    r2plus1d = pytest.importorskip("pytorchvideo.models.r2plus1d")
    return r2plus1d.create_r2plus1d(model_num_class=classes, stem_dim_out=width,
                                    head_pool_kernel_size=pool, head_activation=None,
                                    dropout_rate=0.0)


def test_parameter_count_is_the_hubs():
    hub = pytest.importorskip("pytorchvideo.models.hub")
    with torch.device("meta"):
        model = zoo.create_model(NAME, num_classes=400)
        theirs = hub.r2plus1d_r50(pretrained=False)
    assert count_params(model) == count_params(theirs) == HUB_PARAMS
    assert zoo.models.model_facts(NAME)["params"] == HUB_PARAMS


def test_pytorchvideo_r2plus1d_gives_the_same_logits():
    """Within 1e-4 of the largest logit, on the full-width net (float32: the same ops in the same
    order, so the logits agree to the bit here)."""
    torch.manual_seed(0)
    ptv = _ptv(7)
    x = torch.randn(2, 3, 4, 64, 64)
    ptv = calibrated(ptv, x)
    state, classes, report = convert_state_dict(ptv.state_dict(), "pytorchvideo", NAME)
    assert classes == 7 and not report.filled
    model = zoo.create_model(NAME, num_classes=classes).eval()
    model.load_state_dict(state)
    with torch.no_grad():
        ours, theirs = model(x), ptv(x)
    assert ours.shape == (2, 7)
    assert (ours - theirs).abs().max() <= 1e-4 * theirs.abs().max()


@pytest.mark.parametrize("prefix", ["", "model."])
def test_converted_file_loads_with_pretrained(tmp_path, prefix):
    """A PyTorchVideo ``.pyth`` (``{"model_state": ...}``) of a narrow net loads through
    ``create_model(pretrained=FILE)`` and gives PyTorchVideo's logits; so does the file
    PySlowFast's ``PTVR2plus1D`` writes (the same keys under its ``model.`` wrapper)."""
    torch.manual_seed(1)
    ptv = _ptv(5, width=8)
    x = torch.randn(1, 3, 4, 64, 64)
    ptv = calibrated(ptv, x)
    path = tmp_path / "R2PLUS1D_tiny.pyth"
    torch.save({"model_state": {prefix + k: v for k, v in ptv.state_dict().items()}}, path)
    model = zoo.create_model(NAME, num_classes=5, width=8, pretrained=str(path)).eval()
    with torch.no_grad():
        ours, theirs = model(x), ptv(x)
    assert (ours - theirs).abs().max() <= 1e-4 * theirs.abs().max()


def test_other_families_refuse_its_keys():
    """Its (2+1)D conv keys fit no 3D ResNet: converting onto I3D is a one-line error."""
    from zoo.models.weights.convert.common import ConversionError

    state = _ptv(5, width=8).state_dict()
    with pytest.raises(ConversionError, match="conv_b"):
        convert_state_dict(state, "pytorchvideo", "i3d_resnet50", width=8)


def test_is_a_classifier_with_logits_and_fine_tunes_its_head():
    model = zoo.create_model(NAME, num_classes=5, width=8, dropout=0.2)
    assert model.get_classifier() is model.head.proj
    assert isinstance(model.head.dropout, nn.Dropout) and model.head.dropout.p == 0.2
    model.reset_classifier(3)
    with torch.no_grad():
        out = model.eval()(torch.randn(2, 3, 4, 32, 32))
    assert out.shape == (2, 3)
    assert not torch.allclose(out.sum(1), torch.ones(2))  # logits, no softmax
    with pytest.raises(ValueError, match="depth"):
        zoo.create_model(NAME, depth=34)


@pytest.mark.slow
def test_full_size_logits_match_the_hub_head():
    """At the published 16 x 224 x 224 input PyTorchVideo's (4, 7, 7) head pool is global:
    the hub net without its softmax gives zoo's logits."""
    hub = pytest.importorskip("pytorchvideo.models.hub")
    torch.manual_seed(0)
    ptv = hub.r2plus1d_r50(pretrained=False)
    ptv.blocks[-1].activation = None
    x = torch.randn(1, 3, 16, 224, 224)
    ptv = calibrated(ptv, x)
    state, classes, _ = convert_state_dict(ptv.state_dict(), "pytorchvideo", NAME)
    model = zoo.create_model(NAME, num_classes=classes).eval()
    model.load_state_dict(state)
    with torch.no_grad():
        ours, theirs = model(x), ptv(x)
    assert (ours - theirs).abs().max() <= 1e-4 * theirs.abs().max()
