"""tools/extract_features.py: one .npy per video holding the features the classifier reads."""

import os

import numpy as np
import pytest
import torch
import torch.nn as nn
from helpers import TOY_MODEL, run_tool
from videos_for_tests import noise_frames, write

from zoo.config import load_config
from zoo.data import build_dataset
from zoo.data.lists.records import AnnotationError, VideoRecord
from zoo.infer.features import feature_path, feature_paths, pooled_features

WIDTH = 6


def _toy(classes: int = 3) -> nn.Module:
    """The helpers.py toy model (Conv3d -> ReLU -> pool -> flatten -> Linear), built here."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv3d(3, WIDTH, kernel_size=3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(WIDTH, classes),
    )


@pytest.fixture()
def feat_setup(tmp_path):
    videos = ["a/one.mp4", "a/two.mp4", "b/three.mp4"]
    for i, rel in enumerate(videos):
        os.makedirs(tmp_path / "data" / os.path.dirname(rel), exist_ok=True)
        write(str(tmp_path / "data" / rel), noise_frames(12, size=32, seed=i))
    lst = tmp_path / "val.txt"
    lst.write_text("".join(f"{rel} 12 {i}\n" for i, rel in enumerate(videos)))
    model_file = tmp_path / "toy_models.py"
    model_file.write_text(TOY_MODEL)
    ckpt = tmp_path / "toy.pth"
    torch.save({"model": _toy().state_dict()}, ckpt)
    # A gluoncv-style feature config: INFERENCE.FEAT, LOG.SAVE_DIR 'features'.
    cfg = tmp_path / "toy_feat.yaml"
    cfg.write_text(f"""
CONFIG:
  EXTRA_MODULES: ['{model_file}']
  INFERENCE:
    FEAT: True
  DATA:
    VAL_ANNO_PATH: '{lst}'
    VAL_DATA_PATH: '{tmp_path / "data"}/'
    NUM_CLASSES: 3
    CLIP_LEN: 4
    FRAME_RATE: 2
    CROP_SIZE: 28
    SHORT_SIDE_SIZE: 32
    TRAIN_SHORT_SIDE_RANGE: [32, 36]
    NUM_WORKERS: 0
  MODEL:
    NAME: 'toy_conv3d'
    PRETRAINED: '{ckpt}'
    KWARGS: ['width', {WIDTH}]
  LOG:
    BASE_PATH: '{tmp_path / "logs"}'
    EXP_NAME: 'toy'
    SAVE_DIR: 'features'
""")
    return tmp_path, videos, str(cfg)


def test_pooled_features_are_the_classifier_input():
    model = _toy().eval()
    clips = torch.randn(2, 3, 4, 16, 16)
    want = model[:-1](clips)  # everything before the Linear
    assert torch.allclose(pooled_features(model, clips), want)


def test_parts_of_a_video_get_files_of_their_own_and_collisions_stop():
    out = os.path.join("out")
    records = [VideoRecord("a/x.mp4", -1, 0), VideoRecord("a/x.mp4", -1, 0, 12.5, 20.0),
               VideoRecord("a/x.mp4", -1, 1, 20.0, -1.0), VideoRecord("a/x.mp4", -1, 1, -1, 4),
               VideoRecord("f/dir", 30, 2, offset=10), VideoRecord("../y.mp4", -1, 0)]
    names = [os.path.relpath(p, out) for p in feature_paths(out, records, "val.csv")]
    assert names == [os.path.join("a", n) for n in (
        "x.npy", "x@12.5s-20s.npy", "x@20s-end.npy", "x@0s-4s.npy")] + [
        os.path.join("f", "dir@frames11-40.npy"), "y.npy"]
    for twin in (VideoRecord("a/x.webm", -1, 0), VideoRecord("a/x.mp4", -1, 3)):
        with pytest.raises(AnnotationError, match=r"val.csv: 'a/x.mp4' and '.*' would both "
                                                  r"write .*x.npy"):
            feature_paths(out, [records[0], twin], "val.csv")


def test_frame_folding_models_average_their_frames():
    from zoo.models import create_model

    model = create_model("resnet18", num_classes=5).eval()
    clips = torch.randn(2, 3, 3, 32, 32)  # 3 frames, classified one by one
    frames = clips.transpose(1, 2).reshape(6, 3, 32, 32)
    want = model.forward_features(frames).view(2, 3, -1).mean(1)
    assert torch.allclose(pooled_features(model, clips), want, atol=1e-5)


@pytest.mark.slow
def test_tool_writes_one_npy_per_video(feat_setup):
    tmp_path, videos, cfg_path = feat_setup
    proc = run_tool("extract_features.py", ["--config-file", cfg_path])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out_dir = tmp_path / "logs" / "toy" / "features"
    files = sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*.npy"))
    assert files == ["a/one.npy", "a/two.npy", "b/three.npy"]
    # Reference: the same weights without their Linear, on the same validation clips.
    model = _toy().eval()
    dataset = build_dataset(load_config(cfg_path), "val")
    for i, rel in enumerate(videos):
        got = np.load(feature_path(str(out_dir), rel))
        assert got.shape == (WIDTH,) and got.dtype == np.float32
        want = model[:-1](dataset[i][0][None])[0].detach().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_tool_dry_run_names_the_output(feat_setup):
    tmp_path, _, cfg_path = feat_setup
    proc = run_tool("extract_features.py", ["--config-file", cfg_path, "--dry-run"])
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    params = 3 * WIDTH * 27 + WIDTH + WIDTH * 3 + 3  # Conv3d(3, W, 3) + Linear(W, 3)
    assert f"model: toy_conv3d, {params} parameters, 3 classes" in out
    assert os.path.join("toy", "features") in out
    assert not (tmp_path / "logs").exists()


def test_windows_give_one_row_each_with_their_seconds(feat_setup, monkeypatch):
    from zoo.cli.extract_features import main

    tmp_path, videos, cfg_path = feat_setup  # 12 frames at 25 fps: 0.48 s each
    (tmp_path / "data" / "b" / "broken.mp4").write_text("not a video")
    with open(tmp_path / "val.txt", "a", encoding="utf-8") as f:
        f.write("b/broken.mp4 12 2\n")
    out = tmp_path / "windows"
    assert main(["--config-file", cfg_path, "--output", str(out), "--window", "0.2",
                 "--stride", "0.15", "DATA.NUM_WORKERS", "0"]) == 1  # the broken video
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*.npy")) == sorted(
        [f"{os.path.splitext(rel)[0]}{end}" for rel in videos
         for end in (".npy", ".windows.npy")])  # none for the broken video
    want_times = [[0.0, 0.2], [0.15, 0.35], [0.3, 0.48]]
    model = _toy().eval()
    for rel in videos:
        feats = np.load(feature_path(str(out), rel))
        times = np.load(feature_path(str(out), rel)[:-4] + ".windows.npy")
        assert feats.shape == (3, WIDTH) and feats.dtype == np.float32
        np.testing.assert_allclose(times, want_times, atol=1e-6)
        # Row k: the validation clip of window k's seconds, through the same weights.
        lst = tmp_path / "one_window.csv"
        for k, (a, b) in enumerate(want_times):
            lst.write_text(f"path,label,start,end\n{rel},0,{a},{b}\n")
            cfg = load_config(cfg_path, ["DATA.VAL_ANNO_PATH", str(lst)])
            clip = build_dataset(cfg, "val")[0][0]
            want = model[:-1](clip[None])[0].detach().numpy()
            np.testing.assert_allclose(feats[k], want, rtol=1e-5, atol=1e-6)


def test_a_video_without_features_makes_the_exit_code_1(feat_setup, capsys, monkeypatch):
    """As zoo-predict: the readable videos get their files, the unreadable one a warning, and the
    last line counts it; the exit code is 1."""
    from zoo.cli.extract_features import main
    from zoo.models import MODEL_REGISTRY

    # The config's EXTRA_MODULES registers toy_conv3d: into a copy of the registry, as another
    # test of this process may have registered it from its own file.
    monkeypatch.setattr(MODEL_REGISTRY, "_obj_map", {
        k: v for k, v in MODEL_REGISTRY._obj_map.items() if k != "toy_conv3d"})
    tmp_path, videos, cfg_path = feat_setup
    (tmp_path / "data" / "b" / "broken.mp4").write_text("not a video")
    with open(tmp_path / "val.txt", "a", encoding="utf-8") as f:
        f.write("b/broken.mp4 12 2\n")
    out = tmp_path / "feats"
    assert main(["--config-file", cfg_path, "--output", str(out), "DATA.NUM_WORKERS", "0"]) == 1
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*.npy")) == sorted(
        f"{os.path.splitext(rel)[0]}.npy" for rel in videos)
    console = capsys.readouterr()
    assert "error:" not in console.err, console.err
    lines = [ln for ln in console.out.splitlines() if ln.strip()]
    assert "no features for" in "\n".join(lines) and "broken.mp4" in "\n".join(lines)
    assert "wrote 3 feature files" in lines[-1] and "1 video could not be read" in lines[-1]


def test_a_zoo_run_gives_its_ema_features_and_class_count(feat_setup):
    """A zoo run's checkpoint is built as testing builds it: its EMA weights (those it validated
    and tests with) and its class count when the config says NUM_CLASSES 0."""
    from zoo.config import cfg_to_yaml
    from zoo.utils.checkpoint_io import make_checkpoint

    tmp_path, videos, cfg_path = feat_setup
    torch.manual_seed(1)
    ema = _toy()
    for p in ema.parameters():
        p.data.add_(torch.randn_like(p))  # other weights than the 'model' entry
    run = tmp_path / "run.pth"
    torch.save(make_checkpoint(_toy().state_dict(), cfg_to_yaml(load_config(cfg_path)),
                               epoch=2, ema=ema.state_dict()), run)
    out = tmp_path / "run_features"
    proc = run_tool("extract_features.py", ["--config-file", cfg_path, "--output", str(out),
                                            "DATA.NUM_CLASSES", "0", "MODEL.PRETRAINED", str(run)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    dataset = build_dataset(load_config(cfg_path), "val")
    for i, rel in enumerate(videos):
        want = ema.eval()[:-1](dataset[i][0][None])[0].detach().numpy()
        np.testing.assert_allclose(np.load(feature_path(str(out), rel)), want, rtol=1e-5,
                                   atol=1e-6)
    assert "its EMA weights" in proc.stdout + proc.stderr


def test_a_last_linear_without_the_class_count_is_not_read_as_the_classifier(feat_setup,
                                                                             monkeypatch):
    """A model whose last nn.Linear scores tokens (1 output) after its head: its features would
    be the attention's input, so extraction stops and names the layer to give classifier_name."""
    from zoo.config import ConfigError
    from zoo.infer import features

    class AttnPool(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv3d(3, WIDTH, 1)
            self.fc = nn.Linear(WIDTH, 3)
            self.attn = nn.Linear(WIDTH, 1)

        def forward(self, x):
            tokens = self.conv(x).flatten(2).transpose(1, 2)  # (B, N, WIDTH)
            return self.fc((self.attn(tokens).softmax(1) * tokens).sum(1))

    _, _, cfg_path = feat_setup
    cfg = load_config(cfg_path)
    monkeypatch.setattr(features, "feature_model", lambda c: (c, AttnPool()))
    with pytest.raises(ConfigError) as e:
        features.extract_features(cfg, output=str(feat_setup[0] / "out"))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("feature extraction: model toy_conv3d: ")
    assert "zoo took attn (1 output" in msg and "classifier_name = 'fc'" in msg
