"""Testing reads the model from the checkpoint; YAML keys zoo uses are never dropped as gluoncv's.

A TSN run's NUM_SEGMENT is kept (not dropped as an "unused gluoncv key"); a class count that
differs between config and checkpoint is a one-line error, not torch's raw size mismatch; a
fine-tuned run can be tested once its MODEL.PRETRAINED file is gone.
"""

import json
import logging

import pytest
import torch
import torch.nn as nn
import yaml
from helpers import TOY_MODEL, free_port, run_tool
from videos_for_tests import ramp_frames, write

from zoo.config import cfg_to_yaml, get_cfg, load_config
from zoo.config.config import _GLUONCV_UNUSED_KEYS, _RENAMED_KEYS, _all_keys
from zoo.infer.checkpoint_model import model_from_checkpoint
from zoo.models import MODEL_REGISTRY
from zoo.train.checkpoint import CheckpointError


def ckpt_test_toy(num_classes=10, width=8, **kwargs):
    return nn.Sequential(nn.Conv3d(3, width, 3, padding=1), nn.AdaptiveAvgPool3d(1), nn.Flatten(),
                         nn.Linear(width, num_classes))


@pytest.fixture(autouse=True)
def _toy_registered():
    """Register the toy model for this file only (registry-driven tests elsewhere must not see
    it)."""
    MODEL_REGISTRY.register(ckpt_test_toy)
    yield
    MODEL_REGISTRY._obj_map.pop("ckpt_test_toy", None)


# ----------------------------------------------------------------------------- config key lists
def test_ignored_and_renamed_gluoncv_keys_never_hide_a_live_key():
    live = set(_all_keys(get_cfg()))
    dropped = set(_GLUONCV_UNUSED_KEYS) | set(_RENAMED_KEYS)
    assert not dropped & live, f"keys zoo uses but drops or renames: {sorted(dropped & live)}"
    # Renames point at live keys.
    assert set(_RENAMED_KEYS.values()) <= live


def test_tsn_num_segment_from_a_runs_config_yaml_reaches_the_test_dataset(tmp_path):
    videos = tmp_path / "videos"
    videos.mkdir()
    write(str(videos / "a.mp4"), ramp_frames(24))
    (tmp_path / "test.txt").write_text("a.mp4 24 0\n")
    # The run's own config.yaml, as the trainer writes it, with TSN sampling over 3 segments.
    cfg = load_config(None, [
        "DATA.SAMPLING", "tsn", "DATA.NUM_SEGMENT", "3", "DATA.CLIP_LEN", "1",
        "DATA.TEST_NUM_SEGMENT", "1", "DATA.TEST_NUM_CROP", "1", "DATA.CROP_SIZE", "28",
        "DATA.SHORT_SIDE_SIZE", "32", "DATA.NUM_CLASSES", "2",
        "DATA.VAL_ANNO_PATH", str(tmp_path / "test.txt"), "DATA.VAL_DATA_PATH", str(videos),
    ])
    run_yaml = tmp_path / "config.yaml"
    run_yaml.write_text(cfg_to_yaml(cfg))
    loaded = load_config(str(run_yaml))
    assert loaded.CONFIG.DATA.NUM_SEGMENT == 3
    from zoo.data import build_dataset

    views = build_dataset(loaded, "test")[0][0]
    # (views, C, T, H, W): one view of 3 segments x 1 frame; dense sampling would give T = 1.
    assert tuple(views.shape[:3]) == (1, 3, 3)


# ------------------------------------------------------------------ model from the checkpoint
def _save(path, model, cfg_text):
    state = {"model": model.state_dict()}
    if cfg_text is not None:
        state["cfg"] = cfg_text
    torch.save(state, path)


def _same_weights(model, reference):
    ref = reference.state_dict()
    got = model.state_dict()
    return set(ref) == set(got) and all(torch.equal(ref[k], got[k]) for k in ref)


def test_model_name_kwargs_and_class_count_come_from_the_checkpoint(tmp_path, caplog):
    trained = ckpt_test_toy(num_classes=3, width=4)
    saved_cfg = load_config(None, ["MODEL.NAME", "ckpt_test_toy", "MODEL.KWARGS", "['width', 4]",
                                   "DATA.NUM_CLASSES", "3"], validate=False)
    ckpt = tmp_path / "epoch_1.pth"
    _save(ckpt, trained, cfg_to_yaml(saved_cfg))
    # The config to test with says 5 classes, no kwargs, and a pretrained file that is gone.
    cfg = load_config(None, ["MODEL.NAME", "ckpt_test_toy", "DATA.NUM_CLASSES", "5",
                             "MODEL.PRETRAINED", str(tmp_path / "gone.pth")], validate=False)
    with caplog.at_level(logging.WARNING, logger="zoo"):
        new_cfg, model = model_from_checkpoint(cfg, str(ckpt))
    assert _same_weights(model, trained)
    assert new_cfg.CONFIG.DATA.NUM_CLASSES == 3
    assert list(new_cfg.CONFIG.MODEL.KWARGS) == ["width", 4]
    assert new_cfg.CONFIG.MODEL.PRETRAINED == ""
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "CONFIG.DATA.NUM_CLASSES 3" in warnings[0] and "CONFIG.MODEL.KWARGS" in warnings[0]


def test_the_user_file_a_checkpoint_records_defines_its_model(tmp_path, monkeypatch):
    # The checkpoint's model name comes with the EXTRA_MODULES file that registers it: zoo-test
    # and zoo-export of a config that does not list the file build the model.
    from zoo.infer.checkpoint_model import zoo_run_model

    monkeypatch.setattr(MODEL_REGISTRY, "_obj_map", dict(MODEL_REGISTRY._obj_map))
    user_file = tmp_path / "ckpt_user_models.py"
    user_file.write_text(
        "import torch.nn as nn\n"
        "from zoo.models import MODEL_REGISTRY\n"
        "@MODEL_REGISTRY.register()\n"
        "def ckpt_user_file_net(num_classes=10, width=8):\n"
        "    return nn.Sequential(nn.Conv3d(3, width, 3, padding=1), nn.AdaptiveAvgPool3d(1),\n"
        "                         nn.Flatten(), nn.Linear(width, num_classes))\n")
    trained = ckpt_test_toy(num_classes=3, width=4)
    saved_cfg = load_config(None, ["MODEL.NAME", "ckpt_user_file_net", "DATA.NUM_CLASSES", "3",
                                   "MODEL.KWARGS", "['width', 4]",
                                   "EXTRA_MODULES", repr([str(user_file)])], validate=False)
    ckpt = tmp_path / "epoch_1.pth"
    _save(ckpt, trained, cfg_to_yaml(saved_cfg))
    assert "ckpt_user_file_net" not in MODEL_REGISTRY
    cfg = load_config(None, ["DATA.NUM_CLASSES", "3"], validate=False)  # no EXTRA_MODULES
    new_cfg, model = model_from_checkpoint(cfg, str(ckpt))
    assert new_cfg.CONFIG.MODEL.NAME == "ckpt_user_file_net" and _same_weights(model, trained)
    name, exported, classes, _ = zoo_run_model(str(ckpt), torch.load(ckpt, weights_only=False))
    assert name == "ckpt_user_file_net" and classes == 3 and _same_weights(exported, trained)


def test_checkpoint_without_a_config_gives_its_class_count_from_the_classifier(tmp_path):
    trained = ckpt_test_toy(num_classes=7)
    ckpt = tmp_path / "bare.pth"
    _save(ckpt, trained, None)
    cfg = load_config(None, ["MODEL.NAME", "ckpt_test_toy", "DATA.NUM_CLASSES", "4"],
                      validate=False)
    new_cfg, model = model_from_checkpoint(cfg, str(ckpt))
    assert new_cfg.CONFIG.DATA.NUM_CLASSES == 7 and _same_weights(model, trained)


def test_prediction_reads_the_checkpoint_once(tmp_path, monkeypatch, capsys):
    import zoo.infer.checkpoint_model as checkpoint_module
    import zoo.infer.predictor as predictor_module
    import zoo.utils.checkpoint_io as checkpoint_io
    from zoo.cli import predict

    trained = ckpt_test_toy(num_classes=2)
    saved_cfg = load_config(None, ["MODEL.NAME", "ckpt_test_toy", "DATA.NUM_CLASSES", "2"],
                            validate=False)
    ckpt = str(tmp_path / "epoch_1.pth")
    _save(ckpt, trained, cfg_to_yaml(saved_cfg))
    reads, real = [], checkpoint_io.load_checkpoint

    def counted(path):
        reads.append(path)
        return real(path)

    monkeypatch.setattr(checkpoint_io, "load_checkpoint", counted)
    monkeypatch.setattr(checkpoint_module, "load_checkpoint", counted)
    built = []

    class Scoring(predictor_module.Predictor):  # the real model loading, no video scoring
        def predict(self, paths, topk=5, window=0.0, stride=0.0):
            built.append(self.model)
            return [{"video": p, "top": []} for p in paths]

    monkeypatch.setattr(predictor_module, "Predictor", Scoring)
    assert predict.main(["--checkpoint", ckpt, "--device", "cpu", "a.mp4"]) == 0
    assert reads == [ckpt] and _same_weights(built[0], trained)


def test_weights_that_do_not_fit_are_one_checkpoint_error(tmp_path):
    ckpt = tmp_path / "other.pth"
    _save(ckpt, ckpt_test_toy(num_classes=2, width=8), None)
    cfg = load_config(None, ["MODEL.NAME", "ckpt_test_toy", "MODEL.KWARGS", "['width', 6]",
                             "DATA.NUM_CLASSES", "2"], validate=False)
    with pytest.raises(CheckpointError) as e:
        model_from_checkpoint(cfg, str(ckpt))
    text = str(e.value)
    assert "\n" not in text and "shape mismatch" in text and "ckpt_test_toy" in text



# ------------------------------------------------ through the tools, as the README's user runs them
@pytest.fixture(scope="module")
def finetuned_run(tmp_path_factory):
    """The README's custom-data run: the YAML says 5 classes, the command line trains 3, starting
    from a pretrained file that is deleted afterwards. Returns (yaml path, run folder, a video)."""
    root = tmp_path_factory.mktemp("finetuned")
    videos = root / "videos"
    videos.mkdir()
    for i in range(6):
        write(str(videos / f"v{i}.mp4"), ramp_frames(8))
    (root / "train.txt").write_text("".join(f"v{i}.mp4 8 {i % 3}\n" for i in range(6)))
    (root / "toy.py").write_text(TOY_MODEL)
    pretrained = root / "pretrained.pth"
    # The state dict of helpers.py's toy_conv3d (2 classes), built without registering it here.
    torch.manual_seed(0)
    head2 = nn.Sequential(nn.Conv3d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool3d(1),
                          nn.Flatten(), nn.Linear(8, 2))
    torch.save({"model": head2.state_dict()}, pretrained)
    lists = {"TRAIN_ANNO_PATH": str(root / "train.txt"), "TRAIN_DATA_PATH": str(videos),
             "VAL_ANNO_PATH": str(root / "train.txt"), "VAL_DATA_PATH": str(videos)}
    config = {"CONFIG": {
        "EXTRA_MODULES": [str(root / "toy.py")],
        "MODEL": {"NAME": "toy_conv3d", "PRETRAINED": str(pretrained)},
        "DATA": {**lists, "NUM_CLASSES": 5, "CLIP_LEN": 4, "FRAME_RATE": 1, "CROP_SIZE": 28,
                 "SHORT_SIDE_SIZE": 32, "TRAIN_SHORT_SIDE_RANGE": [32, 36], "NUM_WORKERS": 0,
                 "TEST_NUM_SEGMENT": 2, "TEST_NUM_CROP": 1},
        "TRAIN": {"BATCH_SIZE": 2, "EPOCH_NUM": 1}, "VAL": {"BATCH_SIZE": 2},
        "TEST": {"BATCH_SIZE": 2},
        "LOG": {"BASE_PATH": str(root / "runs"), "EXP_NAME": "ft"},
    }}
    yaml_path = root / "my_videos.yaml"
    yaml_path.write_text(yaml.safe_dump(config))
    r = run_tool("train_ddp.py", ["--config-file", str(yaml_path), "DATA.NUM_CLASSES", "3",
                                  "DDP_CONFIG.DISTRIBUTED", "False"])
    assert r.returncode == 0, r.stdout + r.stderr
    pretrained.unlink()  # the checkpoint must not need it any more
    return yaml_path, root / "runs" / "ft", str(videos / "v0.mp4")


def _console_checks(r):
    console = r.stdout + r.stderr
    assert r.returncode == 0, console
    assert "Traceback" not in console and "error:" not in console, console
    warnings = [ln for ln in console.splitlines() if "trained with" in ln]
    assert len(warnings) == 1, console
    assert "CONFIG.DATA.NUM_CLASSES 3 (the config says 5)" in warnings[0], console
    return console


@pytest.mark.slow
@pytest.mark.parametrize("procs", ["one", "two"])
def test_test_ddp_with_the_yaml_of_a_finetuned_run(finetuned_run, procs):
    yaml_path, run_dir, _ = finetuned_run
    mode = (["DDP_CONFIG.DISTRIBUTED", "False"] if procs == "one"
            else ["DDP_CONFIG.NUM_CPU_PROCS", "2", "DDP_CONFIG.DIST_URL",
                  f"tcp://127.0.0.1:{free_port()}"])
    (run_dir / "test_metrics.json").unlink(missing_ok=True)
    r = run_tool("test_ddp.py", ["--config-file", str(yaml_path), *mode])
    _console_checks(r)
    metrics = json.loads((run_dir / "test_metrics.json").read_text())
    assert metrics["num_videos"] == 6 and metrics["views"] == 2


@pytest.mark.slow
def test_predict_with_the_yaml_of_a_finetuned_run(finetuned_run):
    yaml_path, run_dir, video = finetuned_run
    r = run_tool("predict.py", ["--config-file", str(yaml_path), "--checkpoint",
                                str(run_dir / "checkpoints" / "epoch_1.pth"), "--json", video])
    _console_checks(r)
    result = json.loads(r.stdout)  # warnings go to stderr: stdout is the JSON alone
    # Three classes in the checkpoint's head: three probabilities that sum to 1.
    top = result[0]["top"]
    assert sorted(t["class"] for t in top) == [0, 1, 2]
    assert abs(sum(t["prob"] for t in top) - 1.0) < 1e-4


def test_testing_on_other_clips_than_trained_is_named(tmp_path, caplog):
    """A run trained with command-line overrides (8 frames, 112 px) and tested with its YAML
    alone (32 frames, 224 px) is tested on other clips: one warning names each key."""
    trained = load_config(None, ["MODEL.NAME", "ckpt_test_toy", "DATA.NUM_CLASSES", "3",
                                 "DATA.CLIP_LEN", "8", "DATA.CROP_SIZE", "112",
                                 "DATA.SHORT_SIDE_SIZE", "128"])
    path = tmp_path / "epoch_1.pth"
    torch.save({"model": ckpt_test_toy(3).state_dict(), "cfg": cfg_to_yaml(trained)}, path)
    yaml_only = load_config(None, ["MODEL.NAME", "ckpt_test_toy", "DATA.NUM_CLASSES", "3",
                                   "DATA.CLIP_LEN", "32", "DATA.CROP_SIZE", "224",
                                   "DATA.SHORT_SIDE_SIZE", "256"])
    with caplog.at_level(logging.WARNING, logger="zoo"):
        model_from_checkpoint(yaml_only, str(path))
    [line] = [r.getMessage() for r in caplog.records if "trained on other clips" in r.getMessage()]
    assert "CLIP_LEN 32 (trained: 8), CROP_SIZE 224 (trained: 112), SHORT_SIDE_SIZE 256 " \
           "(trained: 128)" in line
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="zoo"):
        model_from_checkpoint(trained, str(path))  # as trained: no warning
    assert not [r for r in caplog.records if "trained on other clips" in r.getMessage()]


def test_testing_at_another_test_short_side_is_named(tmp_path, caplog):
    """DATA.TEST_SHORT_SIDE_SIZE (0 = SHORT_SIDE_SIZE) is compared as the side it resolves to."""
    common = ["MODEL.NAME", "ckpt_test_toy", "DATA.NUM_CLASSES", "3", "DATA.SHORT_SIDE_SIZE", "256"]
    trained = load_config(None, [*common, "DATA.TEST_SHORT_SIDE_SIZE", "224"])
    path = tmp_path / "epoch_1.pth"
    torch.save({"model": ckpt_test_toy(3).state_dict(), "cfg": cfg_to_yaml(trained)}, path)

    def warnings_for(args):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="zoo"):
            model_from_checkpoint(load_config(None, [*common, *args]), str(path))
        return [r.getMessage() for r in caplog.records
                if "trained on other clips" in r.getMessage()]

    [line] = warnings_for([])
    assert "TEST_SHORT_SIDE_SIZE 256 (trained: 224)" in line
    assert warnings_for(["DATA.TEST_SHORT_SIDE_SIZE", "224"]) == []
    # 0 resolving to the same side is no difference (the training side is named alone).
    [line] = warnings_for(["DATA.SHORT_SIDE_SIZE", "224", "DATA.TEST_SHORT_SIDE_SIZE", "0"])
    assert "SHORT_SIDE_SIZE 224 (trained: 256)" in line and "TEST_SHORT_SIDE_SIZE" not in line


# ---------------------------------------------------------------- converted checkpoints' clips
def _scored_cfg(monkeypatch, argv):
    """The config zoo-predict scores with for ``argv`` (the model is loaded, no video read)."""
    import zoo.infer.predictor as predictor_module
    from zoo.cli import predict

    seen = []

    class Scoring(predictor_module.Predictor):
        def predict(self, paths, topk=5, window=0.0, stride=0.0):
            seen.append(self.cfg)
            return [{"video": p, "top": []} for p in paths]

    monkeypatch.setattr(predictor_module, "Predictor", Scoring)
    code = predict.main(["--device", "cpu", *argv])
    return code, (seen[0].CONFIG.DATA if seen else None)


def test_predict_on_a_converted_videomae_feeds_the_clip_its_kwargs_build(tmp_path, monkeypatch,
                                                                         capsys):
    """A converted checkpoint records its model but no clip: zoo-predict without a config feeds
    the frames / crop its MODEL.KWARGS build the model for (VideoMAE would run on any clip),
    VideoMAE's published frame stride, and logs the clip and views."""
    transformers = pytest.importorskip("transformers")
    import zoo.models.videomae as videomae
    from zoo.cli import predict
    from zoo.models.weights.convert import convert_checkpoint

    torch.manual_seed(0)
    config = transformers.VideoMAEConfig(
        hidden_size=24, num_hidden_layers=1, num_attention_heads=3, intermediate_size=96,
        num_frames=4, image_size=32, patch_size=16, tubelet_size=2, num_labels=3)
    transformers.VideoMAEForVideoClassification(config).save_pretrained(tmp_path / "hf")
    ckpt = str(tmp_path / "zoo.pth")
    convert_checkpoint(str(tmp_path / "hf"), ckpt, "huggingface", "videomae_vit_s",
                       dict(embed_dim=24, depth=1, num_heads=3, frames=4, crop_size=32))
    video = str(tmp_path / "v.mp4")
    write(video, ramp_frames(48, 40, 56))
    shapes, forward = [], videomae.VideoMAE.forward

    def recorded(self, x):
        shapes.append(tuple(x.shape))
        return forward(self, x)

    monkeypatch.setattr(videomae.VideoMAE, "forward", recorded)
    assert predict.main(["--checkpoint", ckpt, "--device", "cpu", video]) == 0
    assert shapes == [(30, 3, 4, 32, 32)]
    assert "clips of 4 frames 4 apart at 32 px (short side 32), 10 x 3 views" in \
        capsys.readouterr().err


def test_predict_on_a_converted_x3d_feeds_its_published_clip(tmp_path, monkeypatch):
    """A converted PyTorchVideo X3D-XS (kwargs without frames / crop_size) is scored on X3D-XS's
    published clip: 4 frames 12 apart at 160 px; an override given after the videos wins."""
    x3d = pytest.importorskip("pytorchvideo.models.x3d")
    from zoo.models.weights.convert import convert_checkpoint

    torch.manual_seed(0)
    ptv = x3d.create_x3d(input_clip_length=4, input_crop_size=64, model_num_class=5)
    torch.save({"model_state": ptv.state_dict()}, tmp_path / "X3D_XS.pyth")
    ckpt = str(tmp_path / "zoo.pth")
    convert_checkpoint(str(tmp_path / "X3D_XS.pyth"), ckpt, "pytorchvideo", "x3d_xs",
                       {"shortcut_bn": "width_change"})
    code, data = _scored_cfg(monkeypatch, ["--checkpoint", ckpt, "a.mp4"])
    assert code == 0
    assert (data.CLIP_LEN, data.FRAME_RATE, data.CROP_SIZE, data.SHORT_SIDE_SIZE) == \
        (4, 12, 160, 160)
    code, data = _scored_cfg(monkeypatch, ["--checkpoint", ckpt, "a.mp4", "DATA.CROP_SIZE", "182"])
    assert (code, data.CLIP_LEN, data.CROP_SIZE) == (0, 4, 182)


def test_predict_on_a_converted_checkpoint_of_a_model_without_facts_names_the_keys(
        tmp_path, monkeypatch, capsys):
    """No published input and no frames / crop_size kwargs: one line naming the checkpoint and
    the keys to give, not the global default clip; given, they are used."""
    ckpt = str(tmp_path / "zoo.pth")
    cfg_text = yaml.safe_dump({"CONFIG": {"MODEL": {"NAME": "ckpt_test_toy", "KWARGS": []},
                                          "DATA": {"NUM_CLASSES": 3}}})
    _save(ckpt, ckpt_test_toy(3), cfg_text)
    code, data = _scored_cfg(monkeypatch, ["--checkpoint", ckpt, "a.mp4"])
    err = capsys.readouterr().err
    assert code != 0 and data is None
    assert ckpt in err and "DATA.CLIP_LEN N and DATA.CROP_SIZE N" in err
    assert "--config-file" in err
    code, data = _scored_cfg(monkeypatch, ["--checkpoint", ckpt, "a.mp4", "DATA.CLIP_LEN", "8",
                                           "DATA.CROP_SIZE", "48"])
    assert (code, data.CLIP_LEN, data.CROP_SIZE) == (0, 8, 48)


def test_testing_a_converted_checkpoint_on_other_clips_than_its_kwargs_is_named(tmp_path,
                                                                                caplog):
    """A config's clip is compared with the frames / crop_size a converted checkpoint's
    MODEL.KWARGS build the model for (it records no DATA keys)."""
    path = str(tmp_path / "zoo.pth")
    cfg_text = yaml.safe_dump({"CONFIG": {
        "MODEL": {"NAME": "ckpt_test_toy", "KWARGS": ["frames", "8", "crop_size", "64"]},
        "DATA": {"NUM_CLASSES": 3}}})
    _save(path, ckpt_test_toy(3), cfg_text)
    cfg = load_config(None, ["MODEL.NAME", "ckpt_test_toy", "DATA.NUM_CLASSES", "3"])
    with caplog.at_level(logging.WARNING, logger="zoo"):
        model_from_checkpoint(cfg, path)
    [line] = [r.getMessage() for r in caplog.records if "trained on other clips" in r.getMessage()]
    assert "CLIP_LEN 32 (trained: 8), CROP_SIZE 224 (trained: 64)" in line
