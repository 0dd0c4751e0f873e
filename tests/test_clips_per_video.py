"""CONFIG.DATA.CLIPS_PER_VIDEO: N independently sampled and augmented training clips from one
decode of a video, flattened into a batch that counts clips."""

from __future__ import annotations

import av
import numpy as np
import pytest
import torch
from helpers import mini_clip_cfg

from zoo.config import ConfigError
from zoo.data import build_dataset, build_loader, sampling, transforms
from zoo.data.collate import collate_clips
from zoo.data.dataset_recipes import VideoListDataset
from zoo.data.decode.registry import VideoFile
from zoo.data.synthetic import generate, write_video

MEAN, STD = [0.45, 0.45, 0.45], [0.225, 0.225, 0.225]
FRAMES, CLIP_LEN, STRIDE = 60, 6, 3


@pytest.fixture(scope="module")
def ramp(tmp_path_factory) -> dict:
    """Two 60-frame videos whose grey level is 4 * index, so a clip's frames can be read off its
    pixels, and a gluoncv list of them."""
    root = tmp_path_factory.mktemp("ramp")
    video = np.zeros((FRAMES, 32, 48, 3), np.uint8)
    for t in range(FRAMES):
        video[t] = 4 * t
    for name in ("a.mp4", "b.mp4"):
        write_video(str(root / name), video)
    (root / "list.txt").write_text(f"a.mp4 {FRAMES} 0\nb.mp4 {FRAMES} 1\n")
    return {"root": str(root), "list": str(root / "list.txt")}


@pytest.fixture(scope="module")
def mini(tmp_path_factory) -> dict:
    """A generated 2-class dataset of 16-frame, 32x32 videos (6 training videos)."""
    root = str(tmp_path_factory.mktemp("mini") / "motion")
    return generate(root, num_classes=2, train_per_class=3, val_per_class=2, num_frames=16, size=32)


def _dataset(anno: str, root: str, split: str, **overrides) -> VideoListDataset:
    kwargs = dict(anno_path=anno, data_path=root, split=split, clip_len=CLIP_LEN,
                  frame_rate=STRIDE, crop_size=28, short_side_size=32,
                  train_short_side_range=[32, 40], random_flip=True, mean=MEAN, std=STD,
                  decoder="pyav")
    kwargs.update(overrides)
    return VideoListDataset(**kwargs)


def _cfg(mini: dict, *extra: str):
    return mini_clip_cfg(mini, "VAL.BATCH_SIZE", "2", *extra)


def _frame_numbers(clip: torch.Tensor) -> list:
    """Which ramp frame each time step of a normalised ``(C, T, H, W)`` clip shows."""
    grey = (clip.mean(dim=(0, 2, 3)) * STD[0] + MEAN[0]) * 255
    return torch.round(grey / 4).long().tolist()


@pytest.fixture()
def decoded(monkeypatch):
    """The frame indices of every VideoFile.decode call, in order (the decode still runs)."""
    calls = []
    original = VideoFile.decode

    def recording_decode(self, indices):
        calls.append(list(indices))
        return original(self, indices)

    monkeypatch.setattr(VideoFile, "decode", recording_decode)
    return calls


def test_clips_have_their_own_windows_and_come_from_one_decode(ramp, decoded):
    ds = _dataset(ramp["list"], ramp["root"], "train", clips_per_video=4)
    windows = set()
    for epoch in range(3):
        decoded.clear()
        clips, label, index, n_bad = ds[(epoch, 1)]
        assert isinstance(clips, tuple) and (label, index, n_bad) == (1, 1, 0)
        assert torch.stack(clips).shape == (4, 3, CLIP_LEN, 28, 28)
        frames = [_frame_numbers(c) for c in clips]
        for f in frames:  # each clip is a dense window of the video
            assert f == list(range(f[0], f[0] + CLIP_LEN * STRIDE, STRIDE)), f
            windows.add(f[0])
        # One decode per item, of exactly the frames the clips use.
        assert decoded == [sorted({i for f in frames for i in f})]
    assert len(windows) > 4  # the clips' windows are drawn independently, not shared


def test_shared_window_decodes_one_window_for_all_clips(ramp, decoded):
    ds = _dataset(ramp["list"], ramp["root"], "train", clips_per_video=4, clips_window="shared")
    clips = ds[(2, 0)][0]
    frames = [_frame_numbers(c) for c in clips]
    assert len(clips) == 4 and all(f == frames[0] for f in frames)
    assert decoded == [frames[0]]  # (that the augmentations differ: the reference test above)


def _naive_frames(path: str) -> torch.Tensor:
    with av.open(path) as container:
        return torch.from_numpy(np.stack([f.to_ndarray(format="rgb24")
                                          for f in container.decode(video=0)]))


@pytest.mark.parametrize("window", ["independent", "shared"])
def test_each_clip_is_augmented_on_its_own(ramp, window):
    """Reference: a full decode with PyAV and, for each clip in turn, its window (one for all
    with "shared") and its augmentation drawn from the item's generator (windows first, then the
    transforms)."""
    ds = _dataset(ramp["list"], ramp["root"], "train", clips_per_video=3,
                  color_jitter=[0.4, 0.4, 0.4, 0.0], clips_window=window)
    clips = ds[(5, 0)][0]
    full = _naive_frames(ds.paths[0])
    generator = ds._item_generator(5, 0)
    windows = [sampling.clip_indices(FRAMES, CLIP_LEN, STRIDE, train=True, generator=generator)
               for _ in range(3 if window == "independent" else 1)] * (1 if window ==
                                                                       "independent" else 3)
    for clip, window in zip(clips, windows):
        expected = transforms.train_transform(
            full[torch.as_tensor(window)], 28, [32, 40], True, MEAN, STD, generator=generator,
            jitter=[0.4, 0.4, 0.4, 0.0])
        assert torch.allclose(clip, expected, atol=0.05)
    assert (clips[0] - clips[1]).abs().max() > 0.05  # other crops, flips, jitter


def test_one_clip_per_video_and_val_test_are_unchanged(ramp):
    one = _dataset(ramp["list"], ramp["root"], "train")
    also_one = _dataset(ramp["list"], ramp["root"], "train", clips_per_video=1)
    assert torch.equal(one[(2, 1)][0], also_one[(2, 1)][0])
    assert one[(2, 1)][0].shape == (3, CLIP_LEN, 28, 28)
    for split in ("val", "test"):
        plain = _dataset(ramp["list"], ramp["root"], split, test_num_segment=2)
        many = _dataset(ramp["list"], ramp["root"], split, test_num_segment=2, clips_per_video=4)
        assert torch.equal(plain[1][0], many[1][0])


def test_items_depend_on_epoch_and_index_only(ramp):
    ds = _dataset(ramp["list"], ramp["root"], "train", clips_per_video=2)
    a = torch.stack(ds[(3, 0)][0])
    torch.manual_seed(99)  # the global RNG plays no part
    assert torch.equal(a, torch.stack(ds[(3, 0)][0]))
    assert not torch.equal(a, torch.stack(ds[(4, 0)][0]))


def test_loader_batch_counts_clips(mini):
    cfg = _cfg(mini, "TRAIN.BATCH_SIZE", "4", "DATA.CLIPS_PER_VIDEO", "2")
    loader = build_loader(cfg, "train")
    # 6 videos, 2 per batch: 3 batches of 4 clips (with one clip per video, 1 batch of 4).
    assert len(loader) == 3
    assert len(build_loader(_cfg(mini, "TRAIN.BATCH_SIZE", "4"), "train")) == 1
    loader.sampler.set_epoch(1)
    dataset = build_dataset(cfg, "train", uint8_train_clips=True)  # the loader's uint8 clips
    seen = []
    for clips, labels, indices, n_bad in loader:
        assert clips.shape == (4, 3, 8, 28, 28) and n_bad.tolist() == [0, 0, 0, 0]
        for video in (0, 2):  # a video's clips are next to each other, label and index repeated
            index = int(indices[video])
            item, label, _, _ = dataset[(1, index)]
            assert indices[video + 1] == index and labels[video] == labels[video + 1] == label
            assert torch.equal(clips[video:video + 2], torch.stack(item))
            seen.append(index)
    assert sorted(seen) == list(range(6))


def test_collate_keeps_skipped_video_counts_and_refuses_single_clips():
    item = ((torch.zeros(3, 4, 8, 8), torch.zeros(3, 4, 8, 8)), 1, 7, 1)
    other = ((torch.ones(3, 4, 8, 8), torch.ones(3, 4, 8, 8)), 0, 3, 0)
    clips, labels, indices, n_bad = collate_clips([item, other], clips_per_video=2)
    assert clips.shape == (4, 3, 4, 8, 8) and clips[2:].eq(1).all() and clips[:2].eq(0).all()
    assert labels.tolist() == [1, 1, 0, 0] and indices.tolist() == [7, 7, 3, 3]
    assert n_bad.tolist() == [1, 0, 0, 0]  # sums to the videos skipped
    with pytest.raises(ConfigError, match=r"CLIPS_PER_VIDEO = 2 but the training dataset "
                                          r"returned one Tensor of shape \(3, 4, 8, 8\) per item"):
        collate_clips([(torch.zeros(3, 4, 8, 8), 1, 7, 0)] * 2, clips_per_video=2)
    with pytest.raises(ConfigError, match="returned 3 clips per item, not a tuple of 2"):
        collate_clips([((torch.zeros(3, 4, 8, 8),) * 3, 1, 7, 0)], clips_per_video=2)


def test_config_errors(mini):
    with pytest.raises(ConfigError, match="BATCH_SIZE = 6 is not a multiple of CONFIG.DATA."
                                          "CLIPS_PER_VIDEO = 4"):
        _cfg(mini, "TRAIN.BATCH_SIZE", "6", "DATA.CLIPS_PER_VIDEO", "4")
    with pytest.raises(ConfigError, match="CLIPS_PER_VIDEO = 0 is not allowed"):
        _cfg(mini, "DATA.CLIPS_PER_VIDEO", "0")
    with pytest.raises(ConfigError, match="CLIPS_WINDOW = 'same' is not allowed: expected "
                                          "independent or shared"):
        _cfg(mini, "DATA.CLIPS_WINDOW", "same")
    with pytest.raises(ConfigError, match=r"BATCH_SIZE = 16 is larger than the 12 training clips "
                                          r"\(6 videos x CONFIG.DATA.CLIPS_PER_VIDEO 2\)"):
        build_loader(_cfg(mini, "TRAIN.BATCH_SIZE", "16", "DATA.CLIPS_PER_VIDEO", "2"), "train")
