"""TorchScript / ONNX export through tools/export.py and zoo.infer.export, checked vs eager."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn
from helpers import run_tool

import zoo
from zoo.infer.export import export_model

SMALL_SLOWFAST = dict(width=8, depth=18, zero_init_final_bn=False)


def _randomise_bn(model: nn.Module) -> nn.Module:
    """Non-trivial BN statistics, so exported and eager logits are compared at a useful scale."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(1.0, 2.0)
    return model


@pytest.mark.slow
def test_export_tool_slowfast_onnx(tmp_path):
    pytest.importorskip("onnx")  # torch's ONNX exporter needs it
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    model = zoo.create_model("slowfast_4x16_resnet50", num_classes=10, head_init_std=0.5,
                             **SMALL_SLOWFAST)
    ckpt = tmp_path / "small.pth"
    torch.save({"model": _randomise_bn(model).state_dict()}, ckpt)
    kwargs = [x for k, v in SMALL_SLOWFAST.items() for x in (k, str(v))]
    r = run_tool("export.py", [
        "--model", "slowfast_4x16_resnet50", "--format", "onnx", "--num-classes", "10",
        "--pretrained", str(ckpt), "--kwargs", *kwargs, "--input-shape", "1", "3", "16", "32",
        "32", "--out", str(tmp_path / "out"),
    ])
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(r.stdout[r.stdout.index("{"):])["onnx"]
    assert result["max_abs_diff"] < 1e-4 and result["max_abs_logit"] > 0.1
    # The file takes one (B, C, T, H, W) clip (slow frames picked inside) at any batch size.
    session = ort.InferenceSession(result["path"], providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["clip"]
    clip = torch.randn(3, 3, 16, 32, 32)
    (got,) = session.run(None, {"clip": clip.numpy()})
    with torch.no_grad():
        want = model.eval()(clip)
    assert (torch.from_numpy(got) - want).abs().max() < 1e-4


@pytest.mark.parametrize("name,kwargs,shape", [
    ("slowfast_8x8_resnet50", SMALL_SLOWFAST, (2, 3, 16, 32, 32)),
    ("i3d_resnet50", dict(width=8, depth=18, zero_init_final_bn=False), (1, 3, 8, 32, 32)),
    ("r2plus1d_resnet18", dict(width=8), (1, 3, 8, 32, 32)),
    ("tsn_resnet50", dict(base_width=8), (1, 3, 4, 32, 32)),
    ("resnet18", dict(base_width=8), (2, 3, 32, 32)),
    ("mc3_18", {}, (1, 3, 8, 32, 32)),
])
@pytest.mark.filterwarnings("ignore:.*torch.jit:FutureWarning")
def test_export_torchscript_and_onnx(tmp_path, name, kwargs, shape):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    results = export_model(name, str(tmp_path), num_classes=6, input_shape=shape,
                           model_kwargs=kwargs, atol=1e-4, rtol=0.0)
    assert results["torchscript"]["max_abs_diff"] < 1e-5
    assert results["onnx"]["max_abs_diff"] < 1e-4
    loaded = torch.jit.load(results["torchscript"]["path"])
    assert loaded(torch.randn(shape)).shape == (shape[0], 6)


def test_export_rejects_bad_format(tmp_path):
    with pytest.raises(ValueError, match="formats"):
        export_model("resnet18", str(tmp_path), formats=("tflite",), model_kwargs={"base_width": 8})


@pytest.mark.filterwarnings("ignore:.*torch.jit:FutureWarning")
def _count_loads(monkeypatch, path) -> list:
    """A list that gets, for each ``torch.load`` of ``path`` from now on, whether it mapped the
    file's tensors (``mmap=True``) rather than reading them."""
    loads = []
    real_load = torch.load

    def counting_load(f, *args, **kwargs):
        if str(f) == str(path):
            loads.append(bool(kwargs.get("mmap")))
        return real_load(f, *args, **kwargs)

    monkeypatch.setattr(torch, "load", counting_load)
    return loads


def test_a_zoo_run_exports_with_its_classes_kwargs_and_ema(tmp_path, monkeypatch):
    """A fine-tuned run's checkpoint exports as it was trained, named by the file alone: its
    5-class head (not a fresh 400-class one), its kwargs and its EMA weights. The file is looked
    at with its tensors mapped, then read once in full: the weights exported are those torch's
    full reader gave."""
    from zoo.utils.checkpoint_io import make_checkpoint

    torch.manual_seed(0)
    model = zoo.create_model("slowfast_4x16_resnet50", num_classes=5, **SMALL_SLOWFAST)
    ema = _randomise_bn(zoo.create_model("slowfast_4x16_resnet50", num_classes=5,
                                         head_init_std=0.5, **SMALL_SLOWFAST))
    pairs = [x for k, v in SMALL_SLOWFAST.items() for x in (k, v)]
    cfg = ("CONFIG:\n  MODEL:\n    NAME: slowfast_4x16_resnet50\n"
           f"    KWARGS: {json.dumps(pairs)}\n  DATA:\n    NUM_CLASSES: 5\n"
           "    CLIP_LEN: 16\n    CROP_SIZE: 32\n")
    ckpt = tmp_path / "epoch_3.pth"
    torch.save(make_checkpoint(model.state_dict(), cfg, epoch=3, ema=ema.state_dict()), ckpt)
    # No input shape given: the clip it was trained on (16 frames, 32 px), not the model's
    # facts (32 frames, 224 px).
    reads = _count_loads(monkeypatch, ckpt)
    result = export_model(None, str(tmp_path / "out"), ("torchscript",), pretrained=str(ckpt))
    assert reads == [True, False]
    exported = torch.jit.load(result["torchscript"]["path"])
    clip = torch.randn(1, 3, 16, 32, 32)
    with torch.no_grad():
        got, want = exported(clip), ema.eval()(clip)
    assert got.shape == (1, 5)
    assert (got - want).abs().max() < 1e-4


# A small VideoMAE built for 4-frame 32 px clips (its sine position table follows the clip).
SMALL_VIDEOMAE = dict(embed_dim=64, depth=2, num_heads=4, frames=4, crop_size=32)


def test_a_converted_checkpoint_exports_at_the_clip_its_kwargs_build(tmp_path):
    """A converted checkpoint records MODEL.KWARGS only (no DATA.CLIP_LEN / CROP_SIZE): the
    example clip is the one its kwargs frames / crop_size build the model for, and the ONNX
    graph takes the model's real clips."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from zoo.utils.checkpoint_io import make_checkpoint

    torch.manual_seed(0)
    model = zoo.create_model("videomae_vit_s", num_classes=3, **SMALL_VIDEOMAE).eval()
    pairs = [x for k, v in SMALL_VIDEOMAE.items() for x in (k, repr(v))]  # as the converter
    cfg = ("CONFIG:\n  MODEL:\n    NAME: videomae_vit_s\n"
           f"    KWARGS: {json.dumps(pairs)}\n  DATA:\n    NUM_CLASSES: 3\n")
    ckpt = tmp_path / "vmae.pth"
    torch.save(make_checkpoint(model.state_dict(), cfg,
                               converted_from={"scheme": "huggingface"}), ckpt)
    result = export_model(None, str(tmp_path / "e"), ("onnx",), pretrained=str(ckpt))
    session = ort.InferenceSession(result["onnx"]["path"], providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].shape[1:] == [3, 4, 32, 32]
    clip = torch.randn(2, 3, 4, 32, 32)
    (got,) = session.run(["logits"], {"clip": clip.numpy()})
    with torch.no_grad():
        assert (torch.from_numpy(got) - model(clip)).abs().max() < 1e-4


@pytest.mark.filterwarnings("ignore:.*torch.jit:FutureWarning")
def test_export_takes_the_clip_from_kwargs_and_names_its_own_flags(tmp_path):
    """--model mvit_v2_s --kwargs frames 4 crop_size 64 exports at 4 x 64 (not the facts'
    16 x 224, which the model refuses); a refused --input-shape is one line naming zoo-export's
    flags, not a training run's config keys."""
    from zoo.infer.export import ExportError

    kwargs = dict(frames=4, crop_size=64, depth=3, embed_dim=16, dim_mul=[[1, 2.0]],
                  head_mul=[[1, 2.0]], pool_q_stride=[[1, 1, 2, 2]])
    result = export_model("mvit_v2_s", str(tmp_path), ("torchscript",), num_classes=3,
                          model_kwargs=kwargs)
    assert result["torchscript"]["max_abs_diff"] < 1e-4
    with pytest.raises(ExportError) as e:
        export_model("mvit_v2_s", str(tmp_path), ("torchscript",), num_classes=3,
                     model_kwargs=kwargs, input_shape=(1, 3, 8, 64, 64))
    text = str(e.value)
    assert "\n" not in text and "DATA." not in text
    assert "--input-shape 1 3 4 64 64" in text and "--kwargs frames" in text


@pytest.mark.filterwarnings("ignore:.*torch.jit:FutureWarning")
def test_weights_of_another_class_count_export_their_classifier(tmp_path):
    """--pretrained a Hugging Face folder of 5 classes without --num-classes exports its trained
    5-class classifier (the eager model's logits are the folder's), not a random 400-class one;
    --num-classes still exports another count."""
    transformers = pytest.importorskip("transformers")

    torch.manual_seed(0)
    config = transformers.VideoMAEConfig(
        hidden_size=24, num_hidden_layers=1, num_attention_heads=3, intermediate_size=96,
        num_frames=4, image_size=32, patch_size=16, tubelet_size=2, num_labels=5,
        layer_norm_eps=1e-6)
    hf = transformers.VideoMAEForVideoClassification(config).eval()
    hf.save_pretrained(tmp_path / "hf")
    kwargs = dict(embed_dim=24, depth=1, num_heads=3, frames=4, crop_size=32)
    result = export_model("videomae_vit_s", str(tmp_path / "e"), ("torchscript",),
                          pretrained=str(tmp_path / "hf"), model_kwargs=kwargs)
    exported = torch.jit.load(result["torchscript"]["path"])
    clip = torch.randn(2, 3, 4, 32, 32)
    with torch.no_grad():
        want = hf(pixel_values=clip.permute(0, 2, 1, 3, 4)).logits
        got = exported(clip)
    assert got.shape == (2, 5)
    assert (got - want).abs().max() <= 1e-4 * want.abs().max()
    result = export_model("videomae_vit_s", str(tmp_path / "e7"), ("torchscript",),
                          pretrained=str(tmp_path / "hf"), model_kwargs=kwargs, num_classes=7)
    assert torch.jit.load(result["torchscript"]["path"])(clip).shape == (2, 7)


@pytest.mark.filterwarnings("ignore:.*torch.jit:FutureWarning")
@pytest.mark.parametrize("legacy", [False, True])
def test_another_projects_weights_are_read_once(tmp_path, monkeypatch, legacy):
    """--pretrained a local file that is not a zoo run: zoo-export looks at it twice before the
    load (is it a zoo run? how many classes?) with its tensors mapped, not read, so the file is
    read once; a legacy-format file (torch.save before 1.6), which cannot be mapped, still
    exports, with its trained classifier."""
    torch.manual_seed(0)
    model = zoo.create_model("slowfast_4x16_resnet50", num_classes=6, **SMALL_SLOWFAST)
    path = tmp_path / "other.pyth"
    torch.save({"model_state": model.state_dict()}, path,
               _use_new_zipfile_serialization=not legacy)
    reads = _count_loads(monkeypatch, path)
    result = export_model("slowfast_4x16_resnet50", str(tmp_path / "e"), ("torchscript",),
                          pretrained=str(path), model_kwargs=SMALL_SLOWFAST,
                          input_shape=(1, 3, 16, 32, 32))
    assert len(reads) == 3
    assert reads.count(False) == (3 if legacy else 1)
    exported = torch.jit.load(result["torchscript"]["path"])
    clip = torch.randn(1, 3, 16, 32, 32)
    with torch.no_grad():
        got, want = exported(clip), model.eval()(clip)
    assert got.shape == (1, 6) and torch.allclose(got, want, atol=1e-5)
