"""Tests for the generated motion dataset (zoo.data.synthetic)."""

from __future__ import annotations

import filecmp
import json
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from zoo.config import ConfigError, load_config
from zoo.data import prepare_synthetic, synthetic
from zoo.data.decode.registry import decode_frames
from zoo.data.lists.annotations import read_annotations, read_class_names

TINY = dict(num_classes=3, train_per_class=2, val_per_class=1, num_frames=12, size=32)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def test_counts_layout_and_lists(tmp_path):
    info = synthetic.generate(str(tmp_path / "d"), seed=1, **TINY)
    assert not info["cached"] and info["num_train"] == 6 and info["num_val"] == 3
    assert info["classes"] == ["right", "left", "up"]
    train = read_annotations(info["train_list"])
    assert [r.label for r in train] == [0, 0, 1, 1, 2, 2]
    assert train[2].path == "videos/train/left/0000.mp4" and train[2].num_frames == 12
    assert len(read_annotations(info["val_list"])) == 3
    assert read_class_names(info["train_list"], 3) == ["right", "left", "up"]
    frames = decode_frames(os.path.join(info["root"], train[0].path), list(range(12)))
    assert frames.shape == (12, 32, 32, 3)
    # Nothing but the finished folder is left in the parent.
    assert os.listdir(tmp_path) == ["d"]


def test_same_seed_same_dataset(tmp_path):
    a = synthetic.generate(str(tmp_path / "a"), seed=3, **TINY)
    b = synthetic.generate(str(tmp_path / "b"), seed=3, **TINY)
    c = synthetic.generate(str(tmp_path / "c"), seed=4, **TINY)
    for name in ("train.txt", "val.txt", "classes.txt", "dataset.json"):
        assert _read(os.path.join(a["root"], name)) == _read(os.path.join(b["root"], name))
    for record in read_annotations(a["train_list"]) + read_annotations(a["val_list"]):
        paths = [os.path.join(d["root"], record.path) for d in (a, b, c)]
        fa, fb, fc = (decode_frames(path, range(12)) for path in paths)
        assert (fa == fb).all()
        assert not (fa == fc).all()
        assert filecmp.cmp(paths[0], paths[1], shallow=False)  # byte-identical files


def test_parallel_generation_writes_the_same_files(tmp_path):
    settings = dict(num_classes=2, train_per_class=24, val_per_class=8, num_frames=8, size=32)
    serial = synthetic.generate(str(tmp_path / "serial"), workers=1, **settings)
    parallel = synthetic.generate(str(tmp_path / "parallel"), workers=2, **settings)
    assert synthetic._pool_size(2, 64) == (2 if sys.platform.startswith("linux") else 1)
    records = read_annotations(serial["train_list"]) + read_annotations(serial["val_list"])
    assert len(records) == 64
    for record in records:
        a, b = (os.path.join(d["root"], record.path) for d in (serial, parallel))
        assert filecmp.cmp(a, b, shallow=False), record.path


# A process that generates the dataset in its main thread with a SIGTERM handler that does not
# end it, as the launcher's preemption guard is.
_UNDER_HANDLER = """
import signal
import sys

signal.signal(signal.SIGTERM, lambda signum, frame: None)
from zoo.data import synthetic

synthetic.generate(sys.argv[1], workers=2, num_classes=2, train_per_class=24, val_per_class=8,
                   num_frames=8, size=32)
print("done")
"""


def test_parallel_generation_ends_under_a_sigterm_handler_that_does_not_end_the_process(
        tmp_path):
    """The launcher handles SIGTERM; its pool workers inherit the handler through fork.
    Generation still ends, its workers with it."""
    if not sys.platform.startswith("linux"):
        pytest.skip("videos are written in several processes on Linux only")
    proc = subprocess.Popen([sys.executable, "-c", _UNDER_HANDLER, str(tmp_path / "d")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the process and the workers it left
        proc.communicate()
        pytest.fail("generation still running after 120 s: the pool is waiting for its workers")
    assert proc.returncode == 0 and out.split() == ["done"], err[-2000:]


@pytest.mark.parametrize("fault", ["killed", "stuck", "stuck, SIGTERM handled"])
def test_a_killed_or_stuck_encoding_process_does_not_hang_the_dataset(tmp_path, monkeypatch, caplog,
                                                                    request, fault):
    """A pool never hears of a worker that died, and waits forever for one that hangs: after
    STALL_SECONDS without a finished batch, the rest is written here, and the files are the same.
    "SIGTERM handled": the calling process handles SIGTERM without ending (as the launcher's
    preemption guard may), which the workers inherit through fork: the pool still stops them."""
    if not sys.platform.startswith("linux"):
        pytest.skip("videos are written in several processes on Linux only")
    if "SIGTERM" in fault:
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
        request.addfinalizer(lambda: signal.signal(signal.SIGTERM, previous))
    settings = dict(num_classes=2, train_per_class=24, val_per_class=8, num_frames=8, size=32)
    serial = synthetic.generate(str(tmp_path / "serial"), workers=1, **settings)
    write_video = synthetic.write_video

    def faulty(path, video):
        if multiprocessing.parent_process() is not None and path.endswith("left/0003.mp4"):
            if fault == "killed":
                os._exit(1)
            time.sleep(3600)
        write_video(path, video)

    monkeypatch.setattr(synthetic, "write_video", faulty)
    monkeypatch.setattr(synthetic, "STALL_SECONDS", 2.0)
    with caplog.at_level(logging.WARNING, logger="zoo.data.synthetic"):
        parallel = synthetic.generate(str(tmp_path / "parallel"), workers=2, **settings)
    assert "no encoding process finished a batch of videos in 2 s" in caplog.text
    records = read_annotations(serial["train_list"]) + read_annotations(serial["val_list"])
    for record in records:
        a, b = (os.path.join(d["root"], record.path) for d in (serial, parallel))
        assert filecmp.cmp(a, b, shallow=False), record.path


def _render_whole_frames(spec: synthetic.VideoSpec) -> np.ndarray:
    """The plain definition: blend every shape's coverage over whole frames."""
    num_frames, size = len(spec.centres), spec.background.shape[0]
    video = np.broadcast_to(spec.background, (num_frames, size, size, 3)).copy()
    pixels = np.arange(size, dtype=np.float32) + 0.5
    layers = [(d["shape"], d["size"], d["colour"], d["centres"]) for d in spec.distractors]
    layers.append((spec.target_shape, spec.target_size, spec.target_colour, spec.centres))
    for shape, shape_size, colour, centres in layers:
        centres = centres.astype(np.float32)
        dx = pixels[None, None, :] - centres[:, 0, None, None]
        dy = pixels[None, :, None] - centres[:, 1, None, None]
        half = shape_size / 2
        if shape == "square":
            alpha = np.clip(half + 0.5 - np.abs(dx), 0, 1) * np.clip(half + 0.5 - np.abs(dy), 0, 1)
        else:
            alpha = np.clip(half + 0.5 - np.sqrt(dx * dx + dy * dy), 0, 1)
        video += alpha[..., None] * (colour - video)
    return np.clip(video + 0.5, 0, 255).astype(np.uint8)


def test_render_equals_whole_frame_blending():
    for index in range(12):
        spec = synthetic.video_spec(0, "train", index % 4, index, 16, 48)
        assert np.array_equal(synthetic.render(spec), _render_whole_frames(spec)), index


def test_second_call_reuses_and_foreign_folder_is_refused(tmp_path):
    out = str(tmp_path / "d")
    synthetic.generate(out, **TINY)
    assert synthetic.generate(out, **TINY)["cached"]
    with pytest.raises(ValueError, match="already exists"):
        synthetic.generate(out, **dict(TINY, num_frames=10))
    (tmp_path / "empty").mkdir()  # an empty folder may be filled
    assert not synthetic.generate(str(tmp_path / "empty"), **TINY)["cached"]
    with pytest.raises(ValueError, match="num_classes"):
        synthetic.generate(str(tmp_path / "x"), **dict(TINY, num_classes=9))


def test_interrupted_run_leaves_nothing(tmp_path, monkeypatch):
    calls = []

    def failing_write(path, video):
        calls.append(path)
        if len(calls) == 3:
            raise KeyboardInterrupt
        original(path, video)

    original = synthetic.write_video
    monkeypatch.setattr(synthetic, "write_video", failing_write)
    with pytest.raises(KeyboardInterrupt):
        synthetic.generate(str(tmp_path / "d"), **TINY)
    assert os.listdir(tmp_path) == []


def test_losing_the_race_uses_the_winner(tmp_path, monkeypatch):
    out = str(tmp_path / "d")
    original = synthetic._write_dataset

    def write_then_other_process_wins(tmp, settings, workers=0):
        manifest = original(tmp, settings, workers)
        monkeypatch.setattr(synthetic, "_write_dataset", original)
        synthetic.generate(out, **TINY)  # "another process" finishes first
        return manifest

    monkeypatch.setattr(synthetic, "_write_dataset", write_then_other_process_wins)
    info = synthetic.generate(out, **TINY)
    assert info["cached"] and os.listdir(tmp_path) == ["d"]


def test_single_frame_carries_no_direction():
    """The middle frame and the time-averaged position look the same for every class."""
    num_frames, size, per_class = 32, 64, 300
    middle, average, moves = [], [], []
    for label in range(8):
        specs = [
            synthetic.video_spec(0, "train", label, i, num_frames, size) for i in range(per_class)
        ]
        centres = np.stack([s.centres for s in specs])  # (N, T, 2)
        middle.append(centres[:, num_frames // 2].mean(0))
        average.append(centres.mean(1).mean(0))
        moves.append((centres[:, -1] - centres[:, 0]).mean(0))
        sizes = np.array([s.target_size for s in specs])[:, None, None]
        assert (centres - sizes / 2 >= 0).all() and (centres + sizes / 2 <= size).all()
    middle, average = np.stack(middle), np.stack(average)
    assert np.abs(middle - size / 2).max() < 2.0
    assert np.abs(average - size / 2).max() < 2.0
    # ...while the motion itself points in the class direction and is clearly visible.
    for label, move in enumerate(moves):
        direction = np.array(synthetic.DIRECTIONS[label][1])
        assert np.dot(move, direction) / np.linalg.norm(direction) > 15
        assert np.linalg.norm(move) < 32


def test_rendered_target_follows_its_path(tmp_path):
    info = synthetic.generate(str(tmp_path / "d"), seed=0, **dict(TINY, num_classes=4))
    for record in read_annotations(info["val_list"]):
        spec = synthetic.video_spec(0, "val", record.label, 0, 12, 32)
        frames = decode_frames(os.path.join(info["root"], record.path), [0, 11]).numpy()
        for frame, (x, y) in zip(frames, spec.centres[[0, -1]]):
            pixel = frame[int(y), int(x)].astype(float)
            assert np.abs(pixel - spec.target_colour).max() < 40
        for distractor in spec.distractors:  # jitter in place, never drift
            assert np.ptp(distractor["centres"], axis=0).max() <= 2


def test_prepare_synthetic(tmp_path, monkeypatch):
    overrides = [
        "DATA.SYNTHETIC.ENABLE", "True", "DATA.SYNTHETIC.ROOT", str(tmp_path),
        "DATA.NUM_CLASSES", "2", "DATA.SYNTHETIC.TRAIN_PER_CLASS", "2",
        "DATA.SYNTHETIC.VAL_PER_CLASS", "1", "DATA.SYNTHETIC.NUM_FRAMES", "8",
        "DATA.SYNTHETIC.SIZE", "32",
    ]
    cfg = load_config(None, overrides)
    new = prepare_synthetic(cfg)
    assert new is not cfg and new.is_frozen() and cfg.CONFIG.DATA.TRAIN_ANNO_PATH == ""
    root = new.CONFIG.DATA.TRAIN_DATA_PATH
    assert os.path.dirname(root) == str(tmp_path) and os.path.basename(root).startswith("motion_")
    assert new.CONFIG.DATA.VAL_ANNO_PATH == os.path.join(root, "val.txt")
    with open(os.path.join(root, "dataset.json")) as f:
        assert json.load(f)["settings"]["num_frames"] == 8
    assert prepare_synthetic(cfg).CONFIG.DATA.TRAIN_DATA_PATH == root  # same settings, same folder
    other = prepare_synthetic(load_config(None, overrides + ["DATA.SYNTHETIC.SEED", "1"]))
    assert other.CONFIG.DATA.TRAIN_DATA_PATH != root

    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    assert synthetic.default_root() == str(tmp_path / "cache")
    off = load_config(None, ["DATA.NUM_CLASSES", "2"])
    assert prepare_synthetic(off) is off
    with pytest.raises(ConfigError, match="NUM_CLASSES = 400 .* 2 to 8"):
        prepare_synthetic(load_config(None, ["DATA.SYNTHETIC.ENABLE", "True"]))


def test_command_line(tmp_path, capsys):
    synthetic.main(["--out", str(tmp_path / "d"), "--num-classes", "2", "--train-per-class", "1",
                    "--val-per-class", "1", "--frames", "8", "--size", "32"])
    out = capsys.readouterr().out
    assert "wrote: 2 train + 2 val videos" in out and str(tmp_path / "d") in out
