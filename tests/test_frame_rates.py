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
    assert cutting.windows(0, 2.0, 0.5, 0.5) == [(0.0, 0.5), (0.5, 1.0), (1.0, 1.5), (1.5, 2.0)]
    assert cutting.windows(0, 2.0, 1.5, 1.0) == [(0.0, 1.5), (1.0, 2.0)]
    assert cutting.windows(0, 2.0, 0.5, 1.5) == [(0.0, 0.5), (1.5, 2.0)]
    assert cutting.windows(0, 1.0, 4.0, 4.0) == [(0.0, 1.0)]  # shorter than one window
    assert cutting.windows(2.0, 3.0, 0.6, 0.6) == [(2.0, 2.6), (2.6, 3.0)]  # a late start
    assert cutting.windows(1.5, 1.0, 0.5, 0.5) == [(1.5, 1.5)]  # a part that ends before
    # 0.3 s windows over 6 s: 20 of them, the last ending at the end (20 strides summed in
    # floating point make 5.9999 s)
    tenths = cutting.windows(0, 6.0, 0.3, 0.3)
    assert len(tenths) == 20 and tenths[-1] == (5.7, 6.0)
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
    assert [(w["start"], w["end"]) for w in result["windows"]] == cutting.windows(0, 2, 0.5, 0.5)
    assert all(w["top"] == [{"views": (2, 3, 4, 32, 32)}] for w in result["windows"])
    assert len(read) == 4
    for k, numbers in enumerate(read):  # window k: frames 30k .. 30k + 29
        assert numbers and all(30 * k <= n < 30 * (k + 1) for n in numbers), (k, numbers)


# A recording with a pause: frames 0-23 at 25 fps from 0 s, frames 24-47 from 5.76 s on (a
# screen recording, or a phone in low light).
PAUSED_MS = [40 * i + (4800 if i >= 24 else 0) for i in range(vc.NUM)]


def _paused_and_late(folder) -> dict:
    """The paused recording in MP4 and Matroska, and a constant-rate video whose stream starts 2 s
    into the file, behind an audio track (``ffmpeg -itsoffset 2``): frame ``i`` shows ``i``."""
    import subprocess

    paused = str(folder / "paused.mp4")
    vc._pyav(paused, "libx264", options={"bf": "0", "g": "12", "preset": "ultrafast",
                                          "crf": "12"}, pts_ms=PAUSED_MS)
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", paused, "-c", "copy",
                    str(folder / "paused.mkv")], check=True, capture_output=True)
    steady = str(folder / "steady.mp4")
    vc._pyav(steady, "libx264", options={"bf": "0", "g": "12", "preset": "ultrafast", "crf": "12"})
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-itsoffset", "2", "-i", steady, "-f", "lavfi",
                    "-t", "4", "-i", "sine", "-map", "0:v", "-map", "1:a", "-c:v", "copy",
                    "-c:a", "aac", str(folder / "late.mp4")], check=True, capture_output=True)
    return {"paused.mp4": PAUSED_MS, "paused.mkv": PAUSED_MS,
            "late.mp4": [2000 + 40 * i for i in range(vc.NUM)]}


@pytest.mark.parametrize("decoder", ["pyav", "auto", "opencv"])
def test_time_ranges_are_the_seconds_players_show(tmp_path, decoder):
    """A list's start,end seconds are the file's timeline, as players and ``ffmpeg -ss`` count
    it: in a paused recording 6-7 s are frames 24-47 (the average rate, 7.1 fps, put them at
    frames 42-47) and 0-1 s frames 0-23 (it read 0-6); where the video starts 2 s into the file,
    3-4 s are its frames 25-47 (it read 2 s late)."""
    shown = _paused_and_late(tmp_path)
    ranges = [("paused.mp4", 6.0, 7.0), ("paused.mp4", 0.0, 1.0), ("paused.mkv", 6.0, 7.0),
              ("late.mp4", 3.0, 4.0)]
    (tmp_path / "list.csv").write_text("path,label,start,end\n" + "".join(
        f"{name},0,{a},{b}\n" for name, a, b in ranges))
    cfg = load_config(None, [
        "DATA.VAL_ANNO_PATH", str(tmp_path / "list.csv"), "DATA.VAL_DATA_PATH", str(tmp_path),
        "DATA.CLIP_LEN", "8", "DATA.FRAME_RATE", "3", "DATA.NUM_CLASSES", "2",
        "DATA.DECODER", decoder])
    dataset = build_dataset(cfg, "val")
    for k, (name, a, b) in enumerate(ranges):
        frames, _ = dataset._read(k, torch.Generator().manual_seed(0))
        numbers = [vc.read_number(image) for image in frames.numpy()]
        inside = [i for i, ms in enumerate(shown[name]) if a <= ms / 1000 < b]
        assert numbers and set(numbers) <= set(inside), (name, a, b, numbers, inside)
        assert max(numbers) - min(numbers) >= 12, (name, numbers)  # the clip spans the range


@pytest.mark.parametrize("decoder", ["pyav", "opencv"])
def test_a_time_range_before_the_video_starts_is_a_bad_record(tmp_path, decoder):
    """0-1.5 s of a file whose video starts at 2 s holds no frame: one line says so (it gave a
    clip of the first frame, frozen), while 1.5-3 s reads the frames shown by 3 s."""
    from zoo.data.decode.base import DecodeError

    _paused_and_late(tmp_path)
    (tmp_path / "list.csv").write_text("path,label,start,end\nlate.mp4,0,0,1.5\n"
                                       "late.mp4,0,1.5,3\n")
    cfg = load_config(None, [
        "DATA.VAL_ANNO_PATH", str(tmp_path / "list.csv"), "DATA.VAL_DATA_PATH", str(tmp_path),
        "DATA.CLIP_LEN", "4", "DATA.FRAME_RATE", "2", "DATA.NUM_CLASSES", "2",
        "DATA.DECODER", decoder])
    dataset = build_dataset(cfg, "val")
    with pytest.raises(DecodeError) as err:
        dataset._read(0, torch.Generator().manual_seed(0))
    assert "ends at 1.5 s, before the video's first frame shows at 2.0 s" in str(err.value)
    assert err.value.kind == "short"
    frames, _ = dataset._read(1, torch.Generator().manual_seed(0))
    assert {vc.read_number(image) for image in frames.numpy()} <= set(range(25))


def test_a_target_rate_follows_the_frames_times():
    """TARGET_FPS on frames shown at irregular times: each step of the timeline takes the frame
    shown at its time, so a pause repeats the frame before it."""
    times = np.array(PAUSED_MS) / 1000
    length, steps = sampling.on_times(times, 25)
    assert length == round((times[-1] + 0.04) * 25)  # 6.72 s of 25 fps steps
    for k in range(length):
        t = times[0] + k / 25
        assert times[steps[k]] <= t + 1e-6 and (steps[k] == len(times) - 1
                                                or times[steps[k] + 1] > t + 1e-6)
    assert set(steps[30:140].tolist()) == {23}  # 1.2-5.6 s: the pause shows frame 23
    assert sampling.uniform(np.arange(50) / 30) and not sampling.uniform(times)
    assert sampling.uniform(np.round(np.arange(50) / 30, 3))  # Matroska's millisecond times


def test_a_target_rate_clip_in_a_pause_repeats_the_frame_shown(tmp_path):
    """The paused recording at TARGET_FPS 25: the middle clip of the 6.72 s lies in the pause,
    where a player shows frame 23; the average rate (7.1 fps) spread it over frames 20-28."""
    _paused_and_late(tmp_path)
    (tmp_path / "list.txt").write_text("paused.mp4 -1 0\n")
    cfg = load_config(None, [
        "DATA.VAL_ANNO_PATH", str(tmp_path / "list.txt"), "DATA.VAL_DATA_PATH", str(tmp_path),
        "DATA.CLIP_LEN", "8", "DATA.FRAME_RATE", "4", "DATA.TARGET_FPS", "25",
        "DATA.NUM_CLASSES", "2"])
    frames, _ = build_dataset(cfg, "val")._read(0, torch.Generator().manual_seed(0))
    assert [vc.read_number(image) for image in frames.numpy()] == [23] * 8


def test_prediction_windows_start_where_the_video_does(tmp_path):
    from zoo.infer import windows as cutting

    _paused_and_late(tmp_path)
    assert cutting.video_span(str(tmp_path / "late.mp4")) == pytest.approx((2.0, 3.92))
    assert cutting.video_span(str(tmp_path / "paused.mkv")) == pytest.approx(
        (0.0, PAUSED_MS[-1] / 1000 + 1 / (48 / 6.72)), abs=0.01)


def test_zoo_reencode_keeps_the_seconds_a_list_names(tmp_path):
    """A file whose video starts 2 s after its audio, re-encoded (audio dropped, the video's
    times kept): its frames have the same times before and after, so a list's 3-4 s names the
    same frames in both (the output's own start, 2 s, is not counted from)."""
    from zoo.cli.reencode import reencode
    from zoo.data.decode.pyav import PyAVReader

    _paused_and_late(tmp_path)
    source, output = str(tmp_path / "late.mp4"), str(tmp_path / "out" / "late.mp4")
    reencode(source, output, short_side=48)
    with PyAVReader(source) as a, PyAVReader(output) as b:
        assert np.allclose(a.frame_times(), b.frame_times(), atol=1e-3)
        assert b.frame_times()[0] == pytest.approx(2.0)
