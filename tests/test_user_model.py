"""A model defined outside zoo/ (examples/my_model.py) trains via the CONFIG.EXTRA_MODULES key."""

import json
import os

import pytest
import torch
import yaml
from helpers import ROOT, TINY_DATA, run_tool

from zoo.config import load_config
from zoo.utils.env import import_extra_modules

EXAMPLE_YAML = os.path.join(ROOT, "configs", "custom", "my_model_example.yaml")


def test_example_config_names_the_user_file():
    raw = yaml.safe_load(open(EXAMPLE_YAML, encoding="utf-8"))
    assert raw["CONFIG"]["EXTRA_MODULES"] == ["examples/my_model.py"]
    assert raw["CONFIG"]["MODEL"]["NAME"] == "my_tiny_c3d"
    assert "my_model" not in " ".join(os.listdir(os.path.join(ROOT, "zoo", "models")))


def test_user_model_builds_from_the_config():
    from zoo.models import MODEL_REGISTRY, build_model

    cfg = load_config(EXAMPLE_YAML)
    import_extra_modules([os.path.join(ROOT, p) for p in cfg.CONFIG.EXTRA_MODULES])
    assert "my_tiny_c3d" in MODEL_REGISTRY
    model = build_model(cfg)  # KWARGS width 16, stages 3; NUM_CLASSES 4
    assert model.fc.out_features == 4 and model.features[0][0].out_channels == 16
    out = model(torch.randn(2, 3, 8, 32, 32))
    assert out.shape == (2, 4) and torch.isfinite(out).all()


@pytest.mark.slow
def test_user_model_trains_through_train_ddp(tmp_path, synth_root):
    out = tmp_path / "runs"
    r = run_tool("train_ddp.py", [
        "--config-file", EXAMPLE_YAML,
        "TRAIN.EPOCH_NUM", "1",
        "DATA.SYNTHETIC.ROOT", synth_root,
        "LOG.BASE_PATH", str(out), "LOG.EXP_NAME", "user_model",
        *TINY_DATA,
    ])
    assert r.returncode == 0, r.stdout + r.stderr
    run_dir = out / "user_model"
    log = (run_dir / "log_rank0.txt").read_text()
    assert "model my_tiny_c3d" in log and "training finished" in log
    cfg_text = (run_dir / "config.yaml").read_text()
    assert "examples/my_model.py" in cfg_text and "my_tiny_c3d" in cfg_text
    val = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
           if line.strip() and json.loads(line).get("split") == "val"]
    assert val and val[-1]["epoch"] == 1
    ckpt = torch.load(run_dir / "checkpoints" / "epoch_1.pth", weights_only=True)
    assert "features.0.0.weight" in ckpt["model"] and ckpt["model"]["fc.weight"].shape == (2, 64)


@pytest.mark.slow
def test_without_the_config_key_the_name_is_unknown(tmp_path):
    r = run_tool("train_ddp.py", [
        "--config-file", EXAMPLE_YAML, "CONFIG.EXTRA_MODULES", "[]",
        "LOG.BASE_PATH", str(tmp_path), *TINY_DATA,
    ], timeout=60)
    assert r.returncode != 0
    err = [ln for ln in (r.stdout + r.stderr).splitlines() if "error" in ln]
    assert len(err) == 1 and "my_tiny_c3d" in err[0] and "EXTRA_MODULES" in err[0]


def test_user_model_without_get_classifier_uses_its_last_linear():
    # examples/my_model.py defines no get_classifier(): fine-tuning and the pretrained loader
    # take its last nn.Linear, the head `fc`.
    from zoo.models import build_model
    from zoo.models.classifier import head_keys
    from zoo.train.finetune import classifier_module

    cfg = load_config(EXAMPLE_YAML)
    import_extra_modules([os.path.join(ROOT, p) for p in cfg.CONFIG.EXTRA_MODULES])
    model = build_model(cfg)
    assert not hasattr(model, "get_classifier")
    assert classifier_module(model) is model.fc
    assert head_keys(model) == ("fc.weight", "fc.bias")


IMAGENET_MODEL = '''
import torch.nn as nn
from zoo.models import ModelFacts, register_model


class Tiny(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.net = nn.Sequential(nn.Conv3d(3, 4, 3), nn.AdaptiveAvgPool3d(1), nn.Flatten(),
                                 nn.Linear(4, num_classes))

    def forward(self, x):
        return self.net(x)


register_model("tiny_imagenet_normalised", Tiny,
               ModelFacts(input_frames=4, sampling_stride=2, crop_size=28,
                          mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
               "Tiny, ImageNet mean and std")
'''


def test_a_trainer_built_directly_normalises_with_the_models_mean_and_std(tmp_path, synth_root):
    from zoo.data import prepare_synthetic
    from zoo.train.trainer import Trainer

    path = tmp_path / "imagenet_model.py"
    path.write_text(IMAGENET_MODEL)
    cfg = load_config(None, [*TINY_DATA, "CONFIG.EXTRA_MODULES", repr([str(path)]),
                             "MODEL.NAME", "tiny_imagenet_normalised",
                             "DDP_CONFIG.DISTRIBUTED", "False", "DATA.SYNTHETIC.ROOT", synth_root,
                             "LOG.BASE_PATH", str(tmp_path / "runs"), "LOG.EXP_NAME", "direct"])
    assert list(cfg.CONFIG.DATA.MEAN) == []  # empty: the model's own
    trainer = Trainer(prepare_synthetic(cfg))  # as docs/hooks.md drives it
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    assert list(trainer.cfg.CONFIG.DATA.MEAN) == mean and list(trainer.cfg.CONFIG.DATA.STD) == std
    got_mean, got_std = trainer.step.normalization
    assert list(got_mean) == mean and list(got_std) == std
    written = yaml.safe_load(open(tmp_path / "runs" / "direct" / "config.yaml"))
    assert written["CONFIG"]["DATA"]["MEAN"] == mean


def test_a_model_returning_no_logits_tensor_or_no_batch_dimension_stops_in_one_line():
    # A dict or tuple (an auxiliary output) and a .squeeze() at a batch of one reached zoo's
    # loss and evaluator, which stopped as "an internal error".
    from zoo.config import ConfigError
    from zoo.models.classifier import check_logits

    logits = torch.zeros(3, 4)
    with pytest.raises(ConfigError, match=r"^model u_dict returns a dict, not a tensor of "
                                          r"logits: its forward must return the \(batch, "
                                          r"NUM_CLASSES\) logits alone"):
        check_logits({"logits": logits}, 4, "u_dict")
    with pytest.raises(ConfigError, match="model u_tuple returns a tuple, not a tensor"):
        check_logits((logits, logits), 4, "u_tuple")
    with pytest.raises(ConfigError, match=r"model u_squeeze returns logits of shape \(4,\), not "
                                          r"\(batch, 4\): keep the batch dimension"):
        check_logits(logits[0], 4, "u_squeeze")
    check_logits(logits, 4, "fine")


def test_logits_of_another_class_count_stop_training_testing_and_predicting(tmp_path):
    # A model whose head has 7 outputs under NUM_CLASSES 4 would train and score classes 4..6.
    from zoo.config import ConfigError
    from zoo.infer import predictor as predicting
    from zoo.infer.evaluator import evaluate
    from zoo.train.step import TrainStep

    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(8, 7))
    clips = torch.randn(2, 2, 4)
    predictor = predicting.Predictor.__new__(predicting.Predictor)
    predictor.model, predictor.device, predictor.images = model, torch.device("cpu"), False
    predictor.cfg = load_config(None, ["DATA.NUM_CLASSES", "4", "MODEL.NAME", "u_wrongcls"])
    predictor._views = lambda path, start=-1.0, end=-1.0: clips
    predictor.classes = [str(c) for c in range(7)]  # names for what the model scores
    video = tmp_path / "a.mp4"
    video.write_bytes(b"")
    with pytest.raises(ConfigError, match="u_wrongcls returns logits of shape"):
        predictor.predict([str(video)])  # stops, not one video's error
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = TrainStep(model, optimizer, None, torch.device("cpu"), 4, model_name="u_wrongcls")
    with pytest.raises(ConfigError) as e:
        step(clips, torch.tensor([0, 3]))
    line = str(e.value)
    assert "\n" not in line and "u_wrongcls" in line and "(2, 7)" in line
    assert "CONFIG.DATA.NUM_CLASSES is 4" in line and "nn.Linear(width, num_classes)" in line
    assert model[1].weight.grad is None  # the check precedes the backward
    loader = [(clips, torch.tensor([0, 3]), torch.arange(2), torch.zeros(2))]
    with pytest.raises(ConfigError, match=r"model u_wrongcls returns logits of shape \(2, 7\)"):
        evaluate(model, loader, torch.device("cpu"), num_classes=4, model_name="u_wrongcls")
    views = [(clips.unsqueeze(1), torch.tensor([0, 3]), torch.arange(2), torch.zeros(2))]
    with pytest.raises(ConfigError, match=r"shape \(2, 7\)"):  # (B, V, ...) views per video
        evaluate(model, views, torch.device("cpu"), num_classes=4, model_name="u_wrongcls")
    assert evaluate(model, loader, torch.device("cpu"))["num_videos"] == 2  # no count: no check
