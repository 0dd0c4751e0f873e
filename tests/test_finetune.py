"""Fine-tuning in one command: a checkpoint trained on 4 generated classes fine-tunes on a
generated 3-class dataset; the class count is read from the data and the head is re-initialised."""

import json
import subprocess
import sys

import pytest
from helpers import ROOT, TINY_DATA, run_tool

SMALL_MODEL = ["MODEL.KWARGS", "['width', 8, 'dropout', 0.0]", "DATA.CLIP_LEN", "4"]


def _overrides_without(keys, pairs):
    out = []
    for k, v in zip(pairs[0::2], pairs[1::2]):
        if k not in keys:
            out += [k, v]
    return out


@pytest.mark.slow
def test_finetune_to_a_different_class_count(tmp_path, synth_root):
    # 1. A "pretrained" checkpoint: 4 generated classes.
    pre = run_tool("train_ddp.py", [
        "MODEL.NAME", "slowfast_tiny_resnet18", *TINY_DATA, *SMALL_MODEL,
        "DATA.NUM_CLASSES", "4", "TRAIN.EPOCH_NUM", "1", "DDP_CONFIG.DISTRIBUTED", "False",
        "DATA.SYNTHETIC.ROOT", synth_root, "LOG.BASE_PATH", str(tmp_path), "LOG.EXP_NAME", "pre",
    ])
    assert pre.returncode == 0, pre.stdout[-3000:]
    ckpt = tmp_path / "pre" / "checkpoints" / "epoch_1.pth"

    # 2. The user's data: 3 classes, as lists + classes.txt.
    data = tmp_path / "mine"
    gen = subprocess.run([sys.executable, "-m", "zoo.data.synthetic", "--out", str(data),
                          "--num-classes", "3", "--train-per-class", "4", "--val-per-class", "3",
                          "--frames", "8", "--size", "32", "--seed", "7"],
                         cwd=ROOT, capture_output=True, text=True)
    assert gen.returncode == 0, gen.stderr

    # 3. One command.
    tiny = _overrides_without({"DATA.SYNTHETIC.ENABLE", "DATA.NUM_CLASSES"}, TINY_DATA)
    ft = run_tool("train_ddp.py", [
        "--config-file", "configs/custom/slowfast_tiny_finetune.yaml",
        "MODEL.PRETRAINED", str(ckpt), *tiny, *SMALL_MODEL, "TRAIN.EPOCH_NUM", "2",
        "DATA.TRAIN_ANNO_PATH", str(data / "train.txt"), "DATA.TRAIN_DATA_PATH", str(data),
        "DATA.VAL_ANNO_PATH", str(data / "val.txt"), "DATA.VAL_DATA_PATH", str(data),
        "LOG.BASE_PATH", str(tmp_path), "LOG.EXP_NAME", "ft",
    ])
    assert ft.returncode == 0, ft.stdout[-3000:]
    run_dir = tmp_path / "ft"
    assert "NUM_CLASSES: 3" in (run_dir / "config.yaml").read_text()
    log = (run_dir / "log_rank0.txt").read_text()
    assert "re-initialised head.proj" in log
    val = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    val = [r for r in val if r.get("split") == "val"][-1]
    assert val["num_videos"] == 9
    assert val["top5"] == 100.0  # top-5 of 3 classes is top-3: always right
    assert 0.0 <= val["top1"] <= 100.0


# ----------------------------------------------------------------------------- classifier rule
# Models that do not define get_classifier() (a user's EXTRA_MODULES file): the module
# `classifier_name` names, else the last nn.Linear; a one-line error when there is none.
def test_classifier_of_a_model_without_get_classifier():
    import torch.nn as nn

    from zoo.models.classifier import head_keys
    from zoo.train.finetune import classifier_module, freeze_backbone

    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    assert classifier_module(net) is net[2]
    assert head_keys(net) == ("2.weight", "2.bias")
    assert freeze_backbone(net) == ["0.weight", "0.bias"]
    assert net[2].weight.requires_grad and not net[0].weight.requires_grad
    net.classifier_name = "0"
    assert classifier_module(net) is net[0] and head_keys(net) == ("0.weight", "0.bias")


def test_no_classifier_is_one_line_and_the_loader_says_why():
    import torch
    import torch.nn as nn

    from zoo.models.classifier import head_keys
    from zoo.models.weights import WeightsError
    from zoo.models.weights.load import load_state
    from zoo.train.finetune import classifier_module

    net = nn.Sequential(nn.Conv3d(3, 4, 1), nn.Conv3d(4, 5, 1))
    with pytest.raises(ValueError) as e:
        classifier_module(net)
    msg = str(e.value)
    assert "\n" not in msg and "get_classifier()" in msg and "classifier_name" in msg
    # The loader does not guess a head: a class-count change is an error that says why.
    assert head_keys(net) == ()
    other = {k: torch.zeros((7,) + v.shape[1:]) if k.startswith("1.") else v
             for k, v in net.state_dict().items()}
    with pytest.raises(WeightsError, match="no classifier found"):
        load_state(net, other)


def test_a_class_count_change_in_a_layer_after_the_classifier_names_it_as_the_likely_head():
    """A user model with an nn.Linear registered after its classifier (an auxiliary head): the
    rule takes the later layer, so a new class count in the real classifier is an error that
    says which layer to name."""
    import torch.nn as nn

    from zoo.models.weights import WeightsError
    from zoo.models.weights.load import load_state

    class Net(nn.Module):
        def __init__(self, classes):
            super().__init__()
            self.fc = nn.Linear(8, classes)
            self.aux = nn.Linear(8, 2)

    with pytest.raises(WeightsError) as e:
        load_state(Net(3), Net(4).state_dict())
    msg = str(e.value)
    assert "\n" not in msg and "zoo took aux for the classifier" in msg
    assert "classifier_name = 'fc'" in msg
    Named = type("Named", (Net,), {"classifier_name": "fc"})
    load_state(Named(3), Net(4).state_dict())  # the hint's fix: the fresh 3-class head is kept


def test_keys_that_treat_the_head_apart_stop_on_a_last_linear_without_the_class_count(
        monkeypatch):
    """The rule takes `attn` (1 output, registered after the head `fc`): FREEZE_BACKBONE would
    train attn alone and BACKBONE_LR_MULT slow down fc, so preparing the model stops and names
    the layer to give classifier_name."""
    import logging

    import torch
    import torch.nn as nn

    from zoo.config import ConfigError, load_config
    from zoo.train import model_setup

    class AttnPool(nn.Module):
        def __init__(self, classes):
            super().__init__()
            self.fc = nn.Linear(8, classes)
            self.attn = nn.Linear(8, 1)

    built = []
    monkeypatch.setattr(model_setup, "build_model", lambda cfg, classes=(): built.append(
        cls(cfg.CONFIG.DATA.NUM_CLASSES)) or built[-1])
    log = logging.getLogger("test_finetune")
    for keys in (["MODEL.FREEZE_BACKBONE", "True"], ["TRAIN.BACKBONE_LR_MULT", "0.1"]):
        cfg = load_config(None, ["DATA.NUM_CLASSES", "4", "MODEL.NAME", "u_attnpool", *keys])
        cls = AttnPool
        with pytest.raises(ConfigError) as e:
            model_setup.prepare_model(cfg, torch.device("cpu"), log)
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith(f"CONFIG.{keys[0]} ") and "u_attnpool" in msg
        assert "zoo took attn (1 output, CONFIG.DATA.NUM_CLASSES is 4) for the classifier" in msg
        assert "classifier_name = 'fc'" in msg
        cls = type("Named", (AttnPool,), {"classifier_name": "fc"})  # the line's advice
        model_setup.prepare_model(cfg, torch.device("cpu"), log)
    cls = AttnPool  # neither key: the head is not treated apart, nothing to check
    model_setup.prepare_model(load_config(None, ["DATA.NUM_CLASSES", "4"]), torch.device("cpu"),
                              log)


@pytest.mark.slow
def test_classifier_module_sees_through_wrappers():
    import torch
    import torch.nn as nn

    import zoo
    from zoo.train.finetune import classifier_module

    model = zoo.create_model("resnet18", num_classes=3, base_width=8)
    assert classifier_module(nn.DataParallel(model)) is model.fc
    assert classifier_module(torch.compile(model)) is model.fc  # compiles lazily: no cost here
