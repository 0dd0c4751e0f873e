"""Training clips written straight into the batch (ClipDataset.write_batches /
``__getitems__``): the same pixels, labels and indices as items collated one by one, with no
second copy of the clips, in the training process and in loader workers."""

from __future__ import annotations

import copy
import functools

import pytest
import torch
import torch.nn.functional as F
from helpers import mini_clip_cfg

import zoo.data.batch_memory as batch_memory
from zoo.data import build_dataset, build_loader, transforms
from zoo.data.batch_memory import BatchMemory, WrittenItems
from zoo.data.collate import collate_clips, collate_train
from zoo.data.synthetic import generate


@pytest.fixture(scope="module")
def mini(tmp_path_factory) -> dict:
    """A generated 2-class dataset of 16-frame, 32x32 videos (6 training videos)."""
    root = str(tmp_path_factory.mktemp("mini") / "motion")
    return generate(root, num_classes=2, train_per_class=3, val_per_class=2, num_frames=16, size=32)


def _reference(clip, box, size, rows=None, flip=False):
    """The resize as F.interpolate makes it, written independently of crop_resize."""
    top, left, height, width = box
    region = clip[..., top:top + height, left:left + width]
    if rows is not None:
        region = region[rows]
    if flip:
        region = region.flip(-1)
    if (height, width) == (size, size):
        return region
    return F.interpolate(region.contiguous(), size=(size, size), mode="bilinear",
                         align_corners=False, antialias=True)


@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize("rows", [None, [4, 0, 2, 2, 7]])
@pytest.mark.parametrize("side", [18, 22, 40])
def test_crop_resize_into_a_batch_row_gives_the_same_pixels(flip, rows, side):
    torch.manual_seed(0)
    frames = torch.randint(0, 256, (8, 48, 64, 3), dtype=torch.uint8)
    clip = transforms.as_clip(frames)
    picked = None if rows is None else torch.tensor(rows)
    length = 8 if rows is None else len(rows)
    batch = torch.zeros((3, length, 22, 22, 3), dtype=torch.uint8)
    out = batch[1].permute(0, 3, 1, 2)
    box = (3, 5, side, side)
    result = transforms.crop_resize(clip, box, 22, picked, flip=flip, out=out)
    expected = _reference(clip, box, 22, picked, flip)
    assert result.data_ptr() == out.data_ptr()
    assert torch.equal(batch[1].permute(0, 3, 1, 2), expected)
    assert int(batch[0].count_nonzero()) == 0 and int(batch[2].count_nonzero()) == 0


@pytest.mark.parametrize("jitter", [(0.0, 0.0, 0.0, 0.0), (0.4, 0.4, 0.4, 0.0)])
def test_train_transform_into_a_row_matches_the_returned_clip(jitter):
    frames = torch.randint(0, 256, (6, 40, 52, 3), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(1))
    args = (frames, 28, (32, 40), True, [0.45] * 3, [0.225] * 3)
    for seed in range(6):
        alone = transforms.train_transform(*args, generator=torch.Generator().manual_seed(seed),
                                           jitter=jitter, as_uint8=True)
        row = torch.empty((6, 28, 28, 3), dtype=torch.uint8)
        written = transforms.train_transform(*args, generator=torch.Generator().manual_seed(seed),
                                             jitter=jitter, as_uint8=True, out=row)
        assert written.data_ptr() == row.data_ptr() and written.shape == alone.shape
        assert torch.equal(written, alone)
    with pytest.raises(ValueError, match="as_uint8"):
        transforms.train_transform(*args, out=torch.empty((6, 28, 28, 3), dtype=torch.uint8))


def _collate(clips_per_video: int):
    if clips_per_video == 1:
        return collate_train
    return functools.partial(collate_clips, clips_per_video=clips_per_video)


@pytest.mark.parametrize("clips_per_video,window", [(1, "independent"), (3, "shared"),
                                                    (2, "independent")])
def test_written_batch_equals_items_collated_one_by_one(mini, clips_per_video, window):
    cfg = mini_clip_cfg(mini, "DATA.CLIPS_PER_VIDEO", str(clips_per_video),
                        "DATA.CLIPS_WINDOW", window, "TRAIN.BATCH_SIZE", "6")
    dataset = build_dataset(cfg, "train", uint8_train_clips=True)
    keys = [(2, 4), (2, 0), (2, 5), (7, 1)]
    expected = _collate(clips_per_video)([dataset[key] for key in keys])
    assert not isinstance(dataset.__getitems__(keys), WrittenItems)  # off until asked for
    dataset.write_batches(None)
    items = dataset.__getitems__(keys)
    assert isinstance(items, WrittenItems) and items.slot is None
    assert items.clips.shape == (len(keys) * clips_per_video, 8, 28, 28, 3)
    batch = _collate(clips_per_video)(items)
    assert batch[0].data_ptr() == items.clips.data_ptr()  # handed over, not copied
    assert batch[0].dtype == torch.uint8 and batch[0].shape == expected[0].shape
    assert batch[0].stride() == expected[0].stride()
    for got, want in zip(batch, expected):
        assert torch.equal(got, want)


@pytest.fixture()
def as_worker(mini, monkeypatch):
    """A training dataset writing into a BatchMemory of 2 buffers, with this process taken for
    loader worker 0."""
    dataset = build_dataset(mini_clip_cfg(mini), "train", uint8_train_clips=True)
    memory = BatchMemory(num_workers=1, per_worker=2)
    worker = type("Info", (), {"id": 0})()
    monkeypatch.setattr(batch_memory, "get_worker_info", lambda: worker)
    dataset.write_batches(memory)
    return dataset, memory


def test_replaced_items_are_copied_and_free_their_buffer(as_worker):
    dataset, memory = as_worker
    items = dataset.__getitems__([(0, 1), (0, 2)])
    assert items.slot is not None and int(memory.flags[items.slot]) == 1
    # Code between dataset and collate that swaps a clip: the batch is a copy, the buffer free.
    items[1] = (items[1][0].clone(), *items[1][1:])
    batch = collate_train(items, memory=memory)
    assert int(memory.flags[items.slot]) == 0
    assert batch[0].data_ptr() != items.clips.data_ptr()
    assert torch.equal(batch[0][1], dataset[(0, 2)][0])


def test_an_item_that_fails_frees_the_buffer(as_worker, monkeypatch):
    dataset, memory = as_worker
    calls = []
    original = dataset._train_clip

    def second_fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("a bug in a transform")
        return original(*args, **kwargs)

    monkeypatch.setattr(dataset, "_train_clip", second_fails)
    with pytest.raises(RuntimeError, match="a bug in a transform"):
        dataset.__getitems__([(0, 1), (0, 2)])
    assert int(memory.flags.sum()) == 0


def test_loader_workers_hand_over_written_batches(mini):
    """Through loader workers (kept buffers on): every batch equals the same videos' items
    collated in this process."""
    cfg = mini_clip_cfg(mini, "DATA.CLIPS_PER_VIDEO", "2", "DATA.CLIPS_WINDOW", "shared",
                        "DATA.NUM_WORKERS", "2", "TRAIN.BATCH_SIZE", "4")
    loader = build_loader(cfg, "train")
    reference = build_dataset(cfg, "train", uint8_train_clips=True)
    loader.sampler.set_epoch(3)
    seen = 0
    for clips, labels, indices, bad in loader:
        assert int(bad.sum()) == 0
        videos = indices[::2].tolist()
        expected = collate_clips([reference[(3, v)] for v in videos], clips_per_video=2)
        assert torch.equal(clips, expected[0]) and torch.equal(labels, expected[1])
        seen += 1
    assert seen == 3


def test_a_subclass_with_its_own_getitem_is_still_called(mini):
    """A DataLoader prefers ``__getitems__``: a user's ``__getitem__`` override must still run."""
    cfg = mini_clip_cfg(mini)
    plain = build_dataset(cfg, "train", uint8_train_clips=True)

    class Marked(type(plain)):
        def __getitem__(self, item):
            clip, label, index, bad = super().__getitem__(item)
            return clip, label + 100, index, bad

    marked = copy.copy(plain)
    marked.__class__ = Marked
    marked.write_batches(None)
    items = marked.__getitems__([(0, 1), (0, 2)])
    assert [item[1] for item in items] == [plain.labels[1] + 100, plain.labels[2] + 100]
    assert torch.equal(collate_train(items)[0], collate_train([plain[(0, 1)], plain[(0, 2)]])[0])
