"""A decoding library that does not work is never a bad video: it stops the job at the first video.

PyAV's ``open`` is replaced by one that raises ``TypeError`` (what an API change looks like: a
keyword the installed release no longer takes). The reader must raise ``DecoderLibraryError``
naming PyAV, its version and the call; no video may be marked bad; the training command must stop
in its data check, before any worker starts, with one ``error:`` line, whichever way it is
launched. A genuinely broken file must still be a bad video.
"""

import os
import shutil
import subprocess
import sys

import av
import numpy as np
import pytest
from helpers import ROOT, TINY_DATA, run_tool
from videos_for_tests import ramp_frames, write

from zoo.cli.data_preflight import check_data
from zoo.config import load_config
from zoo.data import build_dataset
from zoo.data.decode.base import DecodeError, DecoderLibraryError
from zoo.data.decode.opencv import OpenCVReader
from zoo.data.decode.pyav import PyAVReader
from zoo.data.motion import write_video
from zoo.data.synthetic import generate
from zoo.utils.errors import is_user_error, one_line

QUICKSTART = os.path.join(ROOT, "configs", "quickstart", "slowfast_tiny_motion.yaml")
MESSAGE = "open() got an unexpected keyword argument 'timeout'"

# Imported by every Python process started with this folder on PYTHONPATH: the launcher, its
# spawned workers and torchrun's ranks all get a PyAV whose open() takes no longer what zoo
# passes (writing still works, so the generated dataset can be made).
SITECUSTOMIZE = f'''
import av

_real_open = av.open


def _open(file, mode="r", **kwargs):
    if mode == "r":
        raise TypeError({MESSAGE!r})
    return _real_open(file, mode, **kwargs)


av.open = _open
'''


def _broken_open(file, mode="r", **kwargs):
    raise TypeError(MESSAGE)


@pytest.fixture(scope="module")
def mini_videos(tmp_path_factory) -> dict:
    root = str(tmp_path_factory.mktemp("mini") / "motion")
    return generate(root, num_classes=2, train_per_class=3, val_per_class=2, num_frames=16, size=32)


@pytest.fixture()
def video(tmp_path):
    path = str(tmp_path / "clip.mp4")
    write_video(path, np.zeros((8, 16, 16, 3), np.uint8))
    return path


def test_an_api_error_names_the_library_its_version_and_the_call(video, monkeypatch):
    monkeypatch.setattr(av, "open", _broken_open)
    with pytest.raises(DecoderLibraryError) as info:
        PyAVReader(video)
    message = str(info.value)
    assert message.startswith(f"PyAV {av.__version__}: `")
    assert "av.open(" in message and "decode/pyav.py:" in message
    assert f"raised TypeError: {MESSAGE}" in message
    assert "\n" not in message
    assert not isinstance(info.value, DecodeError)  # so no bad-video path can catch it
    assert is_user_error(info.value)  # one "error:" line, not an internal error's


def test_a_broken_file_is_still_a_bad_video(tmp_path):
    path = tmp_path / "broken.mp4"
    path.write_bytes(b"\x00\x00\x00\x18ftypmp42" + os.urandom(2000))
    with pytest.raises(DecodeError) as info:
        PyAVReader(str(path))
    assert info.value.kind == "open"


def test_an_opencv_api_error_is_not_a_bad_video(video, monkeypatch):
    import cv2

    def capture(*args, **kwargs):
        raise AttributeError("module 'cv2' has no attribute 'CAP_PROP_N_THREADS'")

    monkeypatch.setattr(cv2, "VideoCapture", capture)
    with pytest.raises(DecoderLibraryError, match=rf"^OpenCV {cv2.__version__}: .*AttributeError"):
        OpenCVReader(video, threads=2)


def _mini_cfg(mini, *extra):
    return load_config(None, [
        "DATA.NUM_CLASSES", "2", "DATA.CLIP_LEN", "4", "DATA.FRAME_RATE", "2",
        "DATA.CROP_SIZE", "28", "DATA.SHORT_SIDE_SIZE", "32", "DATA.NUM_WORKERS", "0",
        "TRAIN.BATCH_SIZE", "2",
        "DATA.TRAIN_ANNO_PATH", mini["train_list"], "DATA.TRAIN_DATA_PATH", mini["root"],
        "DATA.VAL_ANNO_PATH", mini["val_list"], "DATA.VAL_DATA_PATH", mini["root"],
        "DDP_CONFIG.DISTRIBUTED", "False", "DATA.DECODER", "pyav", *extra])


def test_no_video_is_marked_bad_and_the_item_is_not_replaced(mini_videos, monkeypatch):
    dataset = build_dataset(_mini_cfg(mini_videos), "train")
    monkeypatch.setattr(av, "open", _broken_open)
    with pytest.raises(DecoderLibraryError):
        dataset[0]
    assert dataset.bad_videos.bad_indices() == []


def test_the_data_check_stops_at_the_first_video(mini_videos, monkeypatch):
    monkeypatch.setattr(av, "open", _broken_open)
    with pytest.raises(DecoderLibraryError, match=rf"^PyAV {av.__version__}: "):
        check_data(_mini_cfg(mini_videos), ("train", "val"))


def test_the_data_check_lets_unreadable_first_videos_pass(mini_videos, monkeypatch, caplog):
    """A few unreadable videos at the top of a list are the loader's to skip, not a stop."""
    real = PyAVReader._open_stream
    calls = []

    def first_two_broken(self):
        calls.append(self.path)
        if len(calls) <= 2:
            raise av.error.InvalidDataError(1094995529, "Invalid data found when processing input")
        real(self)

    monkeypatch.setattr(PyAVReader, "_open_stream", first_two_broken)
    check_data(_mini_cfg(mini_videos), ("train",))
    assert len(calls) == 3


def test_a_worker_error_becomes_the_workers_own_line():
    """torch re-raises a loader worker's exception with the worker's traceback in its message."""
    wrapped = DecoderLibraryError(
        "Caught DecoderLibraryError in DataLoader worker process 0.\n"
        "Original Traceback (most recent call last):\n"
        '  File "x.py", line 1, in f\n'
        "zoo.data.decode.base.DecoderLibraryError: PyAV 19.0.2: `av.open(x)` raised TypeError: t")
    assert one_line(wrapped) == "PyAV 19.0.2: `av.open(x)` raised TypeError: t"


def _launchers():
    torchrun = shutil.which("torchrun")
    run = [torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]
    return {
        "one process": ["DDP_CONFIG.DISTRIBUTED", "False"],
        "two gloo processes": ["DDP_CONFIG.NUM_CPU_PROCS", "2"],
        "torchrun": run + ["--standalone", "--nproc_per_node", "2"],
    }


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(_launchers()))
def test_the_training_command_stops_in_its_data_check(mode, tmp_path, synth_root):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    out = tmp_path / "runs"
    args = ["--config-file", QUICKSTART, *TINY_DATA, "DATA.SYNTHETIC.ROOT", synth_root,
            "DATA.DECODER", "pyav", "DATA.NUM_WORKERS", "1",
            "LOG.BASE_PATH", str(out), "LOG.EXP_NAME", "api"]
    launcher = _launchers()[mode]
    if mode == "torchrun":
        done = subprocess.run([*launcher, os.path.join(ROOT, "tools", "train_ddp.py"), *args],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    else:
        done = run_tool("train_ddp.py", [*args, *launcher], env=env)
    text = done.stdout + done.stderr
    assert done.returncode != 0, text
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, text
    assert errors[0].startswith(f"error: PyAV {av.__version__}: `"), errors
    assert f"raised TypeError: {MESSAGE}" in errors[0]
    # Stopped in the data check: no worker was spawned, no video was skipped, nothing trained.
    logs = "".join(p.read_text() for p in out.glob("api/log_rank*.txt"))
    assert "process(es), global ranks" not in text + logs
    assert "unreadable" not in text + logs and "could not be decoded" not in text + logs
    assert not list(out.glob("api/metrics.jsonl"))


def test_a_file_opencv_reads_no_frame_of_is_a_bad_video_when_pyav_cannot_either(tmp_path):
    """OpenCV reading no frame of a file is a library's limit only where PyAV decodes that frame
    (a codec this OpenCV lacks, tests/test_conformance.py's av1_mp4): a file whose frames are
    gone (the index first, the data cut off) stays a bad video."""
    path = write(str(tmp_path / "cut.mp4"), ramp_frames(24, 32, 48),
                 container_options={"movflags": "faststart"})  # the index first
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:data.index(b"mdat") + 4])  # the frames' data cut off
    with OpenCVReader(path) as video:
        with pytest.raises(DecodeError) as e:
            video.decode_array([0, 1])
    assert not isinstance(e.value, DecoderLibraryError) and path in str(e.value)


@pytest.mark.parametrize("decoder", ["pyav", "opencv", "auto"])
def test_the_data_check_advises_reencoding_long_videos_that_decode_from_the_start(
        tmp_path, caplog, decoder):
    """A long AVI decodes each clip from its first frame: the data check says so once per
    list, naming zoo-reencode; the same video in MP4 (seekable) gets no such warning."""
    frames = ramp_frames(320, 32, 48)
    for ext, codec in (("avi", "mpeg4"), ("mp4", "libx264")):
        (tmp_path / ext).mkdir()
        for label in (0, 1):
            write(str(tmp_path / ext / f"{label}.{ext}"), frames, codec=codec,
                  options={"g": "250"})
        (tmp_path / f"{ext}.txt").write_text(f"0.{ext} 320 0\n1.{ext} 320 1\n")
        cfg = load_config(None, [
            "DATA.NUM_CLASSES", "2", "DATA.CLIP_LEN", "4", "DATA.FRAME_RATE", "2",
            "DATA.CROP_SIZE", "28", "DATA.SHORT_SIDE_SIZE", "32", "TRAIN.BATCH_SIZE", "1",
            "DATA.TRAIN_ANNO_PATH", str(tmp_path / f"{ext}.txt"),
            "DATA.TRAIN_DATA_PATH", str(tmp_path / ext), "DDP_CONFIG.DISTRIBUTED", "False",
            "DATA.DECODER", decoder])
        caplog.clear()
        with caplog.at_level("WARNING"):
            check_data(cfg, ("train",))
        advice = [r.getMessage() for r in caplog.records if "zoo-reencode" in r.getMessage()]
        if ext == "avi":
            assert len(advice) == 1 and "(320 frames)" in advice[0], advice
        else:
            assert not advice, advice


def test_the_data_check_warns_when_shared_memory_cannot_hold_the_batches(tmp_path, caplog,
                                                                          monkeypatch):
    """Docker's 64 MB /dev/shm cannot hold the batches 4 workers keep in flight."""
    import collections

    from zoo.cli import data_preflight

    usage = collections.namedtuple("usage", "total used free")
    cfg = load_config(None, ["DATA.NUM_WORKERS", "4", "TRAIN.BATCH_SIZE", "8",
                             "DATA.CLIP_LEN", "16", "DATA.CROP_SIZE", "224"])
    for free_mb, processes, warned in ((64, 1, True), (24 << 10, 1, False), (200, 1, False),
                                       (200, 2, True)):
        monkeypatch.setattr(data_preflight.shutil, "disk_usage",
                            lambda folder, f=free_mb: usage(f << 20, 0, f << 20))
        caplog.clear()
        with caplog.at_level("WARNING"):
            data_preflight.check_shared_memory(cfg, processes, str(tmp_path))
        says = [r.getMessage() for r in caplog.records if "shared memory" in r.getMessage()]
        assert len(says) == int(warned), (free_mb, processes, says)
        if warned:  # 8 clips of 16 x 224 x 224 x 3 bytes: 18 MB a batch
            assert f"{processes} process(es) x 4 workers x 2 batches in flight x 18 MB" in says[0]
            assert "--shm-size" in says[0]
