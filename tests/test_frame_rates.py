"""Seconds and frames. CONFIG.DATA.TARGET_FPS: strides counted on a fixed-rate timeline, so a clip
spans the same seconds of a 15, 30 or 60 fps video; 0 keeps each video's own frames. zoo-predict's
windows: each reads its own seconds. The videos here show the same two seconds at three rates,
each frame drawn with its number (tests/video_corpus.py)."""

from __future__ import annotations

import logging
import os

import av
import cv2
import numpy as np
import pytest
import torch
import video_corpus as vc

from zoo.config import load_config
from zoo.data import build_dataset, sampling

SECONDS = 2
RATES = (15, 30, 60)


def _write(path: str, fps: int) -> str:
    """``SECONDS`` seconds at ``fps``: frame ``i`` shows ``i``."""
    frames = vc.frames(SECONDS * fps, size=(48, 64))
    with av.open(path, "w") as container:
        stream = container.add_stream("libx264", rate=fps,
                                      options={"g": "10", "bf": "0", "preset": "ultrafast",
                                               "crf": "10"})
        stream.height, stream.width, stream.pix_fmt = 48, 64, "yuv420p"
        for image in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


@pytest.fixture(scope="module")
def rates(tmp_path_factory):
    """A list of the three videos (label = its position in RATES) and their folder."""
    root = tmp_path_factory.mktemp("rates")
    lines = [f"v{fps}.mp4 -1 {k}\n" for k, fps in enumerate(RATES)]
    for fps in RATES:
        _write(str(root / f"v{fps}.mp4"), fps)
    (root / "list.txt").write_text("".join(lines))
    return root


def _frame_numbers(rates, split: str, target_fps: str, *extra: str) -> dict:
    """{fps: frame numbers of the clip(s) the dataset reads} for each video of the list."""
    cfg = load_config(None, [
        "DATA.TRAIN_ANNO_PATH", str(rates / "list.txt"), "DATA.TRAIN_DATA_PATH", str(rates),
        "DATA.VAL_ANNO_PATH", str(rates / "list.txt"), "DATA.VAL_DATA_PATH", str(rates),
        "DATA.CLIP_LEN", "4", "DATA.FRAME_RATE", "4", "DATA.TARGET_FPS", target_fps,
        "DATA.TEST_NUM_SEGMENT", "2", "DATA.NUM_CLASSES", "3", *extra])
    dataset = build_dataset(cfg, split)
    out = {}
    for k, fps in enumerate(RATES):
        frames, views = dataset._read(k, torch.Generator().manual_seed(k))
        numbers = [vc.read_number(image) for image in frames.numpy()]
        out[fps] = numbers if views is None else [[numbers[r] for r in v] for v in views]
    return out


def test_the_timeline_maps_to_each_videos_own_frames():
    assert sampling.on_timeline(120, 60.0, 30) == (60, 2.0)
    assert sampling.on_timeline(30, 15.0, 30) == (60, 0.5)
    assert sampling.on_timeline(100, 29.97, 0) == (100, 1.0)  # off
    assert sampling.on_timeline(100, None, 30) == (100, 1.0)  # no rate known
    assert sampling.to_source(np.array([0, 4, 8, 59]), 2.0, 120).tolist() == [0, 8, 16, 118]
    assert sampling.to_source(np.array([0, 1, 2, 3, 59]), 0.5, 30).tolist() == [0, 1, 1, 2, 29]


def test_a_clip_spans_the_same_seconds_at_every_frame_rate(rates):
    val = _frame_numbers(rates, "val", "30")
    assert val[30] == [23, 27, 31, 35]  # the centred window of 60 frames, 4 apart
    assert val[60] == [2 * n for n in val[30]]  # the same instants
    assert val[15] == [12, 14, 16, 18]  # the nearest frames: 11.5 -> 12, 13.5 -> 14, ...
    test = _frame_numbers(rates, "test", "30")
    assert test[60] == [[2 * n for n in view] for view in test[30]]
    train = _frame_numbers(rates, "train", "30")
    assert np.diff(train[60]).tolist() == [8, 8, 8] and np.diff(train[30]).tolist() == [4, 4, 4]
    assert all(n < SECONDS * 60 for n in train[60])


def test_without_a_target_rate_strides_count_each_videos_own_frames(rates):
    val = _frame_numbers(rates, "val", "0")
    assert val[30] == [23, 27, 31, 35]
    assert val[60] == [53, 57, 61, 65]  # the centre of 120 frames, in half the seconds
    assert val[15] == [8, 12, 16, 20]


def test_frame_folders_keep_their_strides_and_say_so(tmp_path, caplog):
    folder = tmp_path / "frames" / "clip"
    folder.mkdir(parents=True)
    for i, image in enumerate(vc.frames(40, size=(48, 64))):
        cv2.imwrite(str(folder / f"img_{i + 1:05d}.png"), image[..., ::-1])
    (tmp_path / "list.txt").write_text("clip 40 0\n")
    cfg = load_config(None, [
        "DATA.VAL_ANNO_PATH", str(tmp_path / "list.txt"),
        "DATA.VAL_DATA_PATH", str(tmp_path / "frames"), "DATA.DECODER", "frames",
        "DATA.CLIP_LEN", "4", "DATA.FRAME_RATE", "4", "DATA.TARGET_FPS", "30",
        "DATA.NUM_CLASSES", "1"])
    with caplog.at_level(logging.WARNING):
        dataset = build_dataset(cfg, "val")
    said = [r.getMessage() for r in caplog.records if "TARGET_FPS" in r.getMessage()]
    assert len(said) == 1 and "does not apply to frame folders" in said[0], said
    frames, _ = dataset._read(0, torch.Generator())
    assert [vc.read_number(image) for image in frames.numpy()] == [13, 17, 21, 25]
    assert os.path.basename(str(tmp_path / "list.txt")) in said[0]


def test_a_negative_target_rate_is_refused():
    with pytest.raises(Exception, match="CONFIG.DATA.TARGET_FPS"):
        load_config(None, ["DATA.TARGET_FPS", "-30"])


def test_prediction_windows_each_read_their_own_seconds(tmp_path, monkeypatch):
    from zoo.data.decode.pyav import PyAVReader
    from zoo.infer import predictor as predicting
    from zoo.infer import windows as cutting

    path = _write(str(tmp_path / "v60.mp4"), 60)  # 2 s: frame i shows i
    assert cutting.windows(2.0, 0.5, 0.5) == [(0.0, 0.5), (0.5, 1.0), (1.0, 1.5), (1.5, 2.0)]
    assert cutting.windows(2.0, 1.5, 1.0) == [(0.0, 1.5), (1.0, 2.0)]
    assert cutting.windows(2.0, 0.5, 1.5) == [(0.0, 0.5), (1.5, 2.0)]
    assert cutting.windows(1.0, 4.0, 4.0) == [(0.0, 1.0)]  # shorter than one window
    read, real = [], PyAVReader.decode

    def decode(self, indices):
        frames = real(self, indices)
        read.append([vc.read_number(image) for image in frames.numpy()])
        return frames

    monkeypatch.setattr(PyAVReader, "decode", decode)
    predictor = predicting.Predictor.__new__(predicting.Predictor)  # reading only, no model
    predictor.cfg = load_config(None, [
        "DATA.DECODER", "pyav", "DATA.CLIP_LEN", "4", "DATA.FRAME_RATE", "2",
        "DATA.TEST_NUM_SEGMENT", "2", "DATA.TEST_NUM_CROP", "1", "DATA.CROP_SIZE", "32",
        "DATA.SHORT_SIDE_SIZE", "32", "DATA.MEAN", "[0.5, 0.5, 0.5]",
        "DATA.STD", "[0.5, 0.5, 0.5]"])
    monkeypatch.setattr(predictor, "_top", lambda views, topk: [{"views": tuple(views.shape)}])
    result = predictor.predict([path], window=0.5)[0]
    assert [(w["start"], w["end"]) for w in result["windows"]] == cutting.windows(2, 0.5, 0.5)
    assert all(w["top"] == [{"views": (2, 3, 4, 32, 32)}] for w in result["windows"])
    assert len(read) == 4
    for k, numbers in enumerate(read):  # window k: frames 30k .. 30k + 29
        assert numbers and all(30 * k <= n < 30 * (k + 1) for n in numbers), (k, numbers)
