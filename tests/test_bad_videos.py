"""Bad input never stops or hangs training: each broken-file case, the decode time limit, the
bad-fraction guard, one decode per multi-view test item, and a real training run over a list that
mixes good videos with every bad case."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time

import pytest
import torch
from helpers import TOY_MODEL, run_tool
from torch.utils.data import DataLoader
from videos_for_tests import bad_videos, ramp_frames, write

from zoo.data import TooManyBadVideos
from zoo.data.dataset_recipes import VideoListDataset
from zoo.data.decode.base import DecodeTimeout, check_deadline, time_limit
from zoo.data.decode.registry import PyAVReader
from zoo.data.robust import GuardedLoader
from zoo.data.workers import worker_context

MEAN, STD = [0.45, 0.45, 0.45], [0.225, 0.225, 0.225]
BAD_KINDS = ["missing", "empty", "truncated", "text", "audio_only", "unreadable_frame", "short"]

# A decoder that hangs on files whose name contains "hang" (loaded by the training run too).
SLEEPY_DECODER = '''
import time
from zoo.data.decode.registry import PyAVReader, register_decoder, DECODERS


class SleepyReader(PyAVReader):
    def decode(self, indices):
        if "hang" in self.path:
            time.sleep(120)
        return super().decode(indices)


if "sleepy" not in DECODERS:
    register_decoder("sleepy", SleepyReader)
'''


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    """8 good 16-frame videos, one file per bad case, a hanging one, and the list of them all."""
    root = tmp_path_factory.mktemp("bad_media")
    good = [write(str(root / f"good_{i}.mp4"), ramp_frames(16)) for i in range(8)]
    bad = bad_videos(str(root / "bad"), good[0])
    bad["hang"] = str(root / "bad" / "hang.mp4")
    shutil.copy(good[1], bad["hang"])
    lines = []
    for i, path in enumerate(good):
        lines.append(f"{os.path.relpath(path, root)} 16 {i % 2}")
    for i, kind in enumerate(BAD_KINDS + ["hang"]):
        frames = 300 if kind == "short" else 16  # "short": the list asks for more than exists
        lines.append(f"{os.path.relpath(bad[kind], root)} {frames} {i % 2}")
    (root / "train.txt").write_text("\n".join(lines) + "\n")
    val = lines[:4] + ["bad/gone_from_val.mp4 16 1"]
    (root / "val.txt").write_text("\n".join(val) + "\n")
    (root / "sleepy.py").write_text(SLEEPY_DECODER)
    exec(compile(SLEEPY_DECODER, "sleepy.py", "exec"), {})  # register in this process too
    return {"root": str(root), "good": good, "bad": bad}


def _dataset(anno: str, root: str, split: str = "train", **extra) -> VideoListDataset:
    kwargs = dict(anno_path=anno, data_path=root, split=split, clip_len=4, frame_rate=2,
                  crop_size=28, short_side_size=32, train_short_side_range=[32, 36],
                  random_flip=False, mean=MEAN, std=STD, test_num_segment=2, test_num_crop=3)
    kwargs.update(extra)
    return VideoListDataset(**kwargs)


# ----------------------------------------------------------------------------- time limit


def test_time_limit_interrupts_a_sleep_in_the_main_thread():
    start = time.monotonic()
    with pytest.raises(DecodeTimeout, match="clip.mp4: took longer than the 0.2 s"):
        with time_limit(0.2, "clip.mp4"):
            time.sleep(30)
    assert time.monotonic() - start < 2
    with time_limit(0, "x"):  # 0 = off
        time.sleep(0.01)
    with time_limit(5, "fast"):
        pass
    time.sleep(0.3)  # no stray alarm left behind


def test_time_limit_in_other_threads_and_after_the_fact():
    errors = []

    def worker():
        try:
            with time_limit(0.1, "thread.mp4"):
                for _ in range(1000):  # a reader's per-frame loop
                    time.sleep(0.01)
                    check_deadline()
        except DecodeTimeout as e:
            errors.append(str(e))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(10)
    assert errors and "thread.mp4" in errors[0]
    with pytest.raises(DecodeTimeout):  # finished, but late: still counts as too slow
        with time_limit(0.05, "late.mp4"):
            end = time.monotonic() + 0.2
            # A body of its own: CPython 3.13 lets an exception that a signal handler raises
            # in a bare `while <condition>: pass` escape every handler (python/cpython#130279).
            while True:
                if time.monotonic() >= end:
                    break


def test_hanging_decode_is_cut_off_and_not_retried(media, monkeypatch):
    hang = media["bad"]["hang"]
    anno = os.path.join(media["root"], "hang.txt")
    with open(anno, "w") as f:
        f.write(f"{hang} 16 1\n{media['good'][0]} 16 0\n")
    ds = _dataset(anno, media["root"], decoder="sleepy", decode_timeout=0.5)
    start = time.monotonic()
    clip, label, index, n_bad = ds[0]
    assert (index, n_bad) == (1, 1) and clip.shape == (3, 4, 28, 28)
    assert time.monotonic() - start < 5
    assert ds.bad_videos.examples(ds.paths) == [f"{hang} (timeout)"]
    opened = []
    init = PyAVReader.__init__

    def counting_init(self, path, *args, **kwargs):
        opened.append(path)
        init(self, path, *args, **kwargs)

    monkeypatch.setattr(PyAVReader, "__init__", counting_init)
    start = time.monotonic()
    assert ds[0][3] == 1 and hang not in opened  # known bad: replaced without another try
    assert time.monotonic() - start < 0.5


def test_hanging_decode_in_a_loader_worker(media):
    anno = os.path.join(media["root"], "hang_worker.txt")
    with open(anno, "w") as f:
        f.write(f"{media['bad']['hang']} 16 1\n" + "".join(
            f"{g} 16 0\n" for g in media["good"][:3]))
    ds = _dataset(anno, media["root"], split="val", decoder="sleepy", decode_timeout=0.5)
    loader = DataLoader(ds, batch_size=2, num_workers=1,
                        multiprocessing_context=worker_context("auto"))  # as zoo's loaders
    start = time.monotonic()
    n_bad = sum(int(batch[3].sum()) for batch in loader)
    assert n_bad == 1 and time.monotonic() - start < 20
    assert ds.bad_videos.is_bad(0)  # the worker's finding is visible to the main process


# ----------------------------------------------------------------------------- bad cases


@pytest.mark.parametrize("kind", BAD_KINDS)
def test_each_bad_case_is_replaced_counted_and_named_once(media, kind, caplog):
    path = media["bad"][kind]
    frames = 300 if kind == "short" else 16
    anno = os.path.join(media["root"], f"one_{kind}.txt")
    with open(anno, "w") as f:
        f.write(f"{path} {frames} 1\n" + "".join(f"{g} 16 0\n" for g in media["good"][:3]))
    ds = _dataset(anno, media["root"])
    for _ in range(3):
        clip, label, index, n_bad = ds[0]
        assert n_bad == 1 and index != 0 and label == 0 and clip.shape == (3, 4, 28, 28)
    assert ds[1][3] == 0
    named = [r for r in caplog.records if os.path.basename(path) in r.getMessage()]
    assert len(named) == 1, "the file is named in exactly one warning"
    assert ds.bad_videos.bad_indices() == [0]
    # FFmpeg's own words ("Invalid data found ...") get what to do; zoo's own reasons have it.
    told = "copy or download it again, or take it out of the list" in named[0].getMessage()
    assert told == (kind in ("truncated", "text", "unreadable_frame")), named[0].getMessage()


def test_all_bad_raises_with_the_reasons(tmp_path):
    (tmp_path / "list.txt").write_text("a.mp4 10 0\nb.mp4 10 1\n")
    ds = _dataset(str(tmp_path / "list.txt"), str(tmp_path), split="val", max_tries=3)
    with pytest.raises(RuntimeError, match="videos in a row could not be read.*a.mp4"):
        ds[0]


def _guarded(anno, root, fraction, batch_size=8):
    ds = _dataset(anno, root, split="val")
    return GuardedLoader(ds, batch_size=batch_size, max_bad_fraction=fraction, split="val")


def test_too_many_bad_videos_stops_with_examples(media, tmp_path):
    good = media["good"][0]
    lines = [f"{good} 16 0" if i % 4 == 0 else f"missing_{i}.mp4 16 1" for i in range(200)]
    (tmp_path / "mostly_bad.txt").write_text("\n".join(lines) + "\n")
    loader = _guarded(str(tmp_path / "mostly_bad.txt"), str(tmp_path), 0.1)
    seen = 0
    with pytest.raises(TooManyBadVideos, match=r"MAX_BAD_FRACTION = 0.1. Examples: .*missing_1"
                                               r".mp4 \(missing\)") as info:
        for batch in loader:
            seen += len(batch[0])
    assert seen < 100, "stopped early, not at the end of the epoch"
    assert "mostly_bad.txt" in str(info.value)
    # A few bad videos under the limit: the epoch runs to the end.
    lines = [f"{good} 16 0"] * 19 + ["missing.mp4 16 1"]
    (tmp_path / "few_bad.txt").write_text("\n".join(lines) + "\n")
    batches = list(_guarded(str(tmp_path / "few_bad.txt"), str(tmp_path), 0.1))
    assert sum(int(b[3].sum()) for b in batches) == 1
    with pytest.raises(TooManyBadVideos):  # 1 of 20 is over a 0.02 limit at the epoch's end
        list(_guarded(str(tmp_path / "few_bad.txt"), str(tmp_path), 0.02))


# ----------------------------------------------------------------------------- multi-view


def test_ten_by_three_views_decode_each_video_once(media, monkeypatch):
    opens, decodes, frames = [], [], []
    init, decode = PyAVReader.__init__, PyAVReader.decode

    def counting_init(self, path, *args, **kwargs):
        opens.append(path)
        init(self, path, *args, **kwargs)

    def counting_decode(self, indices):
        decodes.append(self.path)
        out = decode(self, indices)
        frames.append(self._frames_decoded)
        return out

    monkeypatch.setattr(PyAVReader, "__init__", counting_init)
    monkeypatch.setattr(PyAVReader, "decode", counting_decode)
    long = write(os.path.join(media["root"], "long_for_views.mp4"), ramp_frames(120),
                 options={"g": "16"})
    anno = os.path.join(media["root"], "views.txt")
    with open(anno, "w") as f:
        f.write(f"{long} 120 0\n{media['good'][2]} 16 1\n")
    ds = _dataset(anno, media["root"], split="test", test_num_segment=10, test_num_crop=3)
    items = [ds[i] for i in range(2)]
    for i, (views, label, index, n_bad) in enumerate(items):
        assert views.shape == (30, 3, 4, 28, 28) and (index, n_bad) == (i, 0)
    assert opens == ds.paths and decodes == ds.paths
    assert frames[0] <= 120  # no frame of the long video decoded twice
    # Views differ along time (segments) and space (crops).
    views = items[0][0]
    assert not torch.equal(views[0], views[3]) and not torch.equal(views[0], views[1])


# ----------------------------------------------------------------------------- training run


def _read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.mark.slow
def test_training_epochs_finish_with_the_right_skip_count(media, tmp_path):
    model_file = tmp_path / "toy_models.py"
    model_file.write_text(TOY_MODEL)
    out = tmp_path / "runs"
    root = media["root"]
    r = run_tool("train_ddp.py", [
        "--extra-modules", str(model_file), "--extra-modules", os.path.join(root, "sleepy.py"),
        "DDP_CONFIG.DISTRIBUTED", "False", "MODEL.NAME", "toy_conv3d",
        "DATA.TRAIN_ANNO_PATH", os.path.join(root, "train.txt"), "DATA.TRAIN_DATA_PATH", root,
        "DATA.VAL_ANNO_PATH", os.path.join(root, "val.txt"), "DATA.VAL_DATA_PATH", root,
        "DATA.NUM_CLASSES", "2", "DATA.CLIP_LEN", "4", "DATA.FRAME_RATE", "2",
        "DATA.CROP_SIZE", "28", "DATA.SHORT_SIDE_SIZE", "32", "DATA.TRAIN_SHORT_SIDE_RANGE",
        "[32, 36]", "DATA.NUM_WORKERS", "1", "DATA.DECODER", "sleepy",
        "DATA.DECODE_TIMEOUT", "1.0", "DATA.MAX_BAD_FRACTION", "0.6",
        "TRAIN.EPOCH_NUM", "2", "TRAIN.BATCH_SIZE", "4", "VAL.BATCH_SIZE", "4",
        "LOG.BASE_PATH", str(out), "LOG.EXP_NAME", "bad", "LOG.PROGRESS_BAR", "False",
    ], timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    records = _read_jsonl(out / "bad" / "metrics.jsonl")
    epochs = [rec for rec in records if rec.get("split") == "train_epoch"]
    assert [rec["skipped_videos"] for rec in epochs] == [8, 8]  # 7 broken files + 1 hang
    assert epochs[1]["time_s"] < 5, "known-bad videos are skipped without a second time limit"
    val = [rec for rec in records if rec.get("split") == "val"]
    # The missing val video's stand-in is a video already scored: it is counted once, not twice.
    assert val[-1]["skipped_videos"] == 1 and val[-1]["num_videos"] == 4
    log = (out / "bad" / "log_rank0.txt").read_text()
    for kind in BAD_KINDS + ["hang"]:
        name = os.path.basename(media["bad"][kind])
        warnings = [ln for ln in log.splitlines() if "skipping unreadable" in ln and name in ln]
        assert len(warnings) == 1, (kind, warnings)
    assert "took longer than the 1 s time limit" in log
