"""The loading path for real sizes: the one-pass scale + convert against an independent
reference, skipped non-reference frames against a sequential decode, the dataset's choice of the
output size, and a smoke run of ``tools/benchmark_data.py --end-to-end``."""

import json

import av
import numpy as np
import pytest
import torch
from torchvision.transforms.v2 import functional as tvf
from videos_for_tests import ramp_frames, write

from zoo.data.decode.base import OutputSize
from zoo.data.decode.pyav import PyAVReader
from zoo.data.decode.registry import AutoReader

# Mean absolute difference (0-255) allowed between the one-pass frames and a full-size decode
# resized by torchvision (antialiased bilinear). Both are triangle filters widened by the scale
# factor, but FFmpeg scales the chroma planes at their own (half) resolution and rounds through
# 15-bit integers; and the reference's full-size conversion (FFmpeg's fast unscaled YUV->RGB) is
# itself ~1.1 grey levels darker than an exact BT.601 conversion, which the scaled path matches.
# Measured on these frames: 1.05-1.49 (0.6-1.0 of it that offset), while any other frame is at
# least 9.5 away, so the bound also tells the frame from its neighbours.
ONE_PASS_MAE = 2.0


def _frames(num, height, width):
    """Ramp frames (grey level = frame number) with a static smooth texture in the lower left,
    so the filters meet edges and texture, not only flat areas."""
    frames = ramp_frames(num, height, width)
    for t in range(num):  # and a quarter whose level jumps by 37 a frame: no frame near another
        frames[t, : height // 2, width // 2 :] = (37 * t) % 200 + 28
    y, x = np.mgrid[0:height // 2, 0:width // 2]
    texture = 127 + 100 * np.sin(x / 3.0) * np.cos(y / 5.0)
    frames[:, height // 2:, : width // 2, 2] = texture.astype(np.uint8)
    return frames


@pytest.fixture(scope="module")
def bframe_video(tmp_path_factory):
    """320x240 H.264 with B-frames (x264 veryfast: 3, b-pyramid), one keyframe every 50."""
    path = str(tmp_path_factory.mktemp("loading") / "bframes.mp4")
    return write(path, _frames(60, 240, 320), options={"preset": "veryfast", "bf": "3",
                                                         "g": "50"})


def _sequential(path):
    """Every frame of a plain sequential PyAV decode, full size, RGB (the reference)."""
    with av.open(path) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])


def _mae(a, b):
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


def test_one_pass_resize_matches_full_decode_then_torchvision(bframe_video):
    reference = _sequential(bframe_video)
    indices = [0, 3, 17, 18, 31, 49, 50, 59]
    with PyAVReader(bframe_video) as video:
        assert video.set_output_size(OutputSize(short_side=96))
        out = video.decode_array(indices)
    # torchvision's short-side resize: 240x320 -> 96x128 (the long side rounded down).
    assert out.shape == (len(indices), 96, 128, 3)
    resized = tvf.resize(torch.from_numpy(reference).permute(0, 3, 1, 2), [96],
                         antialias=True).permute(0, 2, 3, 1).numpy()
    for row, i in enumerate(indices):
        errors = [_mae(out[row], resized[j]) for j in range(len(resized))]
        assert errors[i] <= ONE_PASS_MAE, (i, errors[i])
        assert int(np.argmin(errors)) == i  # the frame itself, not a neighbour


def test_output_size_rules():
    assert OutputSize(short_side=320).target(1080, 1920) == (320, 568)  # floor, as torchvision
    assert OutputSize(short_side=320).target(1920, 1080) == (568, 320)
    assert OutputSize(short_side=320).target(256, 340) == (256, 340)  # never enlarged
    assert OutputSize(short_side=256, height=128, width=170).target(1080, 1920) == (128, 170)


def test_no_output_size_gives_full_frames(bframe_video):
    with PyAVReader(bframe_video) as video:
        video.set_output_size(None)
        assert video.decode_array([5]).shape == (1, 240, 320, 3)


def test_auto_reader_forwards_the_size(bframe_video):
    with AutoReader(bframe_video) as video:
        assert video.set_output_size(OutputSize(short_side=120))
        assert video.decode_array([1, 2]).shape == (2, 120, 160, 3)


def _decode(path, indices, skip):
    with PyAVReader(path, threads=1) as video:
        video.skip_unneeded = skip
        out = video.decode_array(indices)
        assert not video._sequential  # found by timestamps, not counted from the start
        return out, video._frames_decoded


@pytest.mark.parametrize("indices", [
    list(range(10, 42, 2)),  # a training clip at stride 2
    [0, 1, 2, 7, 30, 31, 57],
    [55, 57, 59, 61, 62],  # past the end: the last frame, even when frames before it are skipped
    [44, 2, 44, 20],  # any order, repeats
])
def test_skipping_nonref_frames_is_exact(bframe_video, indices):
    reference = _sequential(bframe_video)
    want = reference[np.minimum(indices, len(reference) - 1)]
    skipped, decoded_skipping = _decode(bframe_video, indices, skip=True)
    plain, decoded_plain = _decode(bframe_video, indices, skip=False)
    assert np.array_equal(skipped, want) and np.array_equal(plain, want)
    if indices[0] == 10:  # frames between the kept ones were B-frames nothing references
        assert decoded_skipping < decoded_plain


def test_skipping_pays_on_a_clip_at_stride_2(bframe_video):
    _, decoded_skipping = _decode(bframe_video, list(range(20, 52, 2)), skip=True)
    _, decoded_plain = _decode(bframe_video, list(range(20, 52, 2)), skip=False)
    # x264's b-pyramid leaves about half of the frames unreferenced.
    assert decoded_skipping <= 0.8 * decoded_plain, (decoded_skipping, decoded_plain)


def test_dataset_asks_for_the_transform_size(tmp_path, bframe_video):
    from zoo.data.dataset_recipes import VideoListDataset

    (tmp_path / "list.txt").write_text(f"{bframe_video} 60 0\n")
    common = dict(clip_len=4, frame_rate=2, crop_size=64, short_side_size=80,
                  train_short_side_range=[72, 96], random_flip=True, mean=[0.5] * 3,
                  std=[0.5] * 3, decoder="auto")
    train = VideoListDataset(str(tmp_path / "list.txt"), "/", "train", **common)
    assert train.output_size() == OutputSize(short_side=96)
    val = VideoListDataset(str(tmp_path / "list.txt"), "/", "val", **common)
    assert val.output_size() == OutputSize(short_side=80)
    fixed = VideoListDataset(str(tmp_path / "list.txt"), "/", "train", frame_size=[90, 100],
                             **common)
    assert fixed.output_size() == OutputSize(height=90, width=100)
    off = VideoListDataset(str(tmp_path / "list.txt"), "/", "train", decode_resize=False,
                           **common)
    assert off.output_size() is None
    with train._open(0) as video:
        assert video.decode_array([0]).shape == (1, 96, 128, 3)
    clip = train[(0, 0)][0]
    assert clip.shape == (3, 4, 64, 64)
    # The val clip from scaled frames against the one from full frames: the same centre crop.
    scaled_val = val[0][0]
    plain_val = VideoListDataset(str(tmp_path / "list.txt"), "/", "val", decode_resize=False,
                                 **common)[0][0]
    assert (scaled_val - plain_val).abs().mean() * 0.5 * 255 < 2.0


@pytest.mark.slow  # ~5 s: benchmarks are in the full tier (DEVELOPERS.md)
def test_end_to_end_benchmark_smoke(tmp_path, monkeypatch, capsys):
    from benchmarks import clip_loading
    from benchmarks import data as bench
    from zoo.cli import benchmark_data
    from zoo.data.decode.torchcodec import torchcodec_unusable

    why_not = torchcodec_unusable()  # the benchmark's bar is against torchcodec
    if why_not:
        pytest.skip(why_not)
    small = dict(clip_loading.SETS["kinetics"], seconds=2, height=128, width=170, gop=25)
    monkeypatch.setitem(clip_loading.SETS, "kinetics", small)
    # In this process instead of a fresh one per measurement (each would import torch again).
    monkeypatch.setattr(bench, "_spawn",
                        lambda worker, timeout=None, **params: clip_loading._worker(**params))
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # this process keeps its own
    paths = ["zoo", "torchcodec"]
    assert benchmark_data.main(["--end-to-end", "--sets", "kinetics", "--generate", "1",
                                "--paths", *paths, "--e2e-clips", "2", "--rounds", "1",
                                "--out", str(tmp_path), "--json",
                                str(tmp_path / "r.json")]) == 0
    text = capsys.readouterr().out
    assert "zoo defaults / best(torchcodec, decord) =" in text
    assert "one-pass frames (short side 224)" in text
    rows = json.loads((tmp_path / "r.json").read_text())["end_to_end"]["kinetics"]
    assert [r["path"] for r in rows] == paths
    assert all(r["clips_per_s"] > 0 and r["clips"] == 2 for r in rows), rows


def _decode_in_child(path, queue):
    with PyAVReader(path) as video:
        queue.put(video.decode_array([3]).shape)


def test_forked_worker_decodes_after_the_parent_did(bframe_video):
    # The parent's converter (with FFmpeg's scaler threads) must be neither used nor freed in a
    # forked DataLoader worker: doing either hung the worker.

    with PyAVReader(bframe_video) as video:  # 320x240: threaded decoder and scaler
        video.decode_array([1, 2])
    child, queue = _start_forked(_decode_in_child, bframe_video)
    assert _result_of(child, queue, 120) == (1, 240, 320, 3)


def _start_forked(target, *args):
    """A forked child running ``target(*args, queue)``; its process and queue."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=target, args=(*args, queue))
    child.start()
    return child, queue


def _result_of(child, queue, timeout):
    """What the child put in its queue; fails (killing it) when it hung or failed."""
    child.join(timeout)
    hung = child.is_alive()
    if hung:
        child.kill()
    assert not hung and child.exitcode == 0
    return queue.get(timeout=5)


def _collect_in_child(queue):
    import gc

    queue.put(gc.collect() >= 0)


def test_forked_worker_survives_a_leaked_threaded_reader(bframe_video):
    # An unclosed reader in a reference cycle owns FFmpeg's decoder threads. Collected in a forked
    # child (where those threads do not exist), freeing it would wait for them forever.
    import gc

    class Holder:
        pass

    gc.disable()  # keep the cycle alive until the fork, as a busy process may
    try:
        video = PyAVReader(bframe_video)  # 320x240: a threaded decoder
        video.decode_array([1, 2])
        holder = Holder()
        holder.video, holder.me = video, holder
        del video, holder
        child, queue = _start_forked(_collect_in_child)
    finally:
        gc.enable()
    assert _result_of(child, queue, 60)


@pytest.fixture(scope="module")
def one_keyframe_video(tmp_path_factory):
    """200 frames of 160x120 H.264 with a single keyframe (no scene-cut keyframes either)."""
    path = str(tmp_path_factory.mktemp("gop") / "one_key.mp4")
    return write(path, _frames(200, 120, 160), options={
        "g": "1000", "bf": "2", "x264-params": "scenecut=0:keyint=1000:min-keyint=1000"})


def test_no_seek_back_to_a_keyframe_already_passed(one_keyframe_video):
    with av.open(one_keyframe_video) as container:
        keys = sum(1 for p in container.demux(video=0) if p.is_keyframe)
    assert keys == 1  # the premise: every seek would land on frame 0
    reference = _sequential(one_keyframe_video)
    # Four clips' windows with gaps longer than the frames decoded before them: a seek from
    # frame 45 to 110 would decode 0..110 again.
    indices = sorted({s + 2 * j for s in (5, 110, 150) for j in range(8)})
    out, decoded = _decode(one_keyframe_video, indices, skip=False)
    assert np.array_equal(out, reference[indices])
    assert decoded <= max(indices) + 1 + 4, decoded  # each frame once (+ the decoder's delay)
