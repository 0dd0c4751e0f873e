"""Tests for zoo.data: lists, decoding, sampling, transforms, the dataset and the loader."""

from __future__ import annotations

import av
import numpy as np
import pytest
import torch
from torch.utils.data import DistributedSampler
from videos_for_tests import write_audio_only

from zoo.config import ConfigError, load_config
from zoo.data import build as data_build
from zoo.data import build_dataset, build_loader, sampling
from zoo.data import workers as data_workers
from zoo.data.dataset_recipes import VideoListDataset
from zoo.data.decode.registry import DecodeError, VideoFile, count_frames, decode_frames
from zoo.data.lists.annotations import AnnotationError, read_annotations, read_class_names
from zoo.data.robust import GuardedLoader
from zoo.data.synthetic import generate, write_video

MEAN, STD = [0.45, 0.45, 0.45], [0.225, 0.225, 0.225]


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def ramp_video(tmp_path_factory) -> str:
    """40 frames whose grey level is 6 * index, so a frame's index can be read off its pixels."""
    path = str(tmp_path_factory.mktemp("ramp") / "ramp.mp4")
    video = np.zeros((40, 32, 48, 3), np.uint8)
    for t in range(40):
        video[t] = 6 * t
        video[t, :8, :8] = (255, 0, 0)  # a red corner, to check channel order
    write_video(path, video)
    return path


@pytest.fixture(scope="module")
def mini(tmp_path_factory) -> dict:
    """A generated 2-class dataset of 16-frame, 32x32 videos."""
    root = str(tmp_path_factory.mktemp("mini") / "motion")
    return generate(root, num_classes=2, train_per_class=3, val_per_class=2, num_frames=16, size=32)


def _dataset(mini: dict, split: str, **overrides) -> VideoListDataset:
    kwargs = dict(
        anno_path=mini["train_list"] if split == "train" else mini["val_list"],
        data_path=mini["root"],
        split=split,
        clip_len=8,
        frame_rate=2,
        crop_size=28,
        short_side_size=32,
        train_short_side_range=[32, 36],
        random_flip=False,
        mean=MEAN,
        std=STD,
        test_num_segment=2,
        test_num_crop=3,
    )
    kwargs.update(overrides)
    return VideoListDataset(**kwargs)


def _cfg(mini: dict, *extra: str):
    return load_config(
        None,
        [
            "DATA.NUM_CLASSES", "2", "DATA.CLIP_LEN", "8", "DATA.FRAME_RATE", "2",
            "DATA.CROP_SIZE", "28", "DATA.SHORT_SIDE_SIZE", "32",
            "DATA.TRAIN_SHORT_SIDE_RANGE", "[32, 36]", "DATA.NUM_WORKERS", "0",
            "DATA.TRAIN_ANNO_PATH", mini["train_list"], "DATA.TRAIN_DATA_PATH", mini["root"],
            "DATA.VAL_ANNO_PATH", mini["val_list"], "DATA.VAL_DATA_PATH", mini["root"],
            "TRAIN.BATCH_SIZE", "2", "VAL.BATCH_SIZE", "2", "TEST.BATCH_SIZE", "1",
            "DATA.TEST_NUM_SEGMENT", "2", "DATA.TEST_NUM_CROP", "1",
            *extra,
        ],
    )


# ----------------------------------------------------------------------------- annotations


def test_text_list_with_spaces_comments_and_unknown_frames(tmp_path):
    path = tmp_path / "list.txt"
    path.write_text(
        "# header comment\n"
        "a/b.mp4 300 0\n"
        "\n"
        "folder with spaces/clip 1.mp4  -1\t3\n"
        "   c.mp4 12 1   \n"
    )
    records = read_annotations(str(path))
    assert [(r.path, r.num_frames, r.label) for r in records] == [
        ("a/b.mp4", 300, 0),
        ("folder with spaces/clip 1.mp4", -1, 3),
        ("c.mp4", 12, 1),
    ]


def test_csv_list(tmp_path):
    path = tmp_path / "list.csv"
    path.write_text("path,label,num_frames\n\"x, y.mp4\",2,30\nz.mp4,0,\n")
    records = read_annotations(str(path))
    assert [(r.path, r.num_frames, r.label) for r in records] == [
        ("x, y.mp4", 30, 2),
        ("z.mp4", -1, 0),
    ]
    bad = tmp_path / "bad.csv"
    bad.write_text("file,class\na.mp4,1\n")
    with pytest.raises(AnnotationError, match="bad.csv:1.*'path'"):
        read_annotations(str(bad))


def test_csv_labels_may_be_the_names_classes_txt_gives(tmp_path):
    path = tmp_path / "list.csv"
    path.write_text("path,label\njump/1.mp4,jump\nrun/1.mp4,run\nsit/1.mp4,2\n")
    with pytest.raises(AnnotationError) as e:  # no classes.txt: names mean nothing yet
        read_annotations(str(path))
    assert str(e.value).startswith(f"{path}:2: label 'jump' is a class name, and ")
    assert "classes.txt" in str(e.value) and "\n" not in str(e.value)
    (tmp_path / "classes.txt").write_text("sit\nrun\njump\n")
    assert [r.label for r in read_annotations(str(path))] == [2, 1, 2]
    path.write_text("path,label\nwalk/1.mp4,walk\n")
    with pytest.raises(AnnotationError, match=r"list.csv:2: label 'walk' is not a class id and "
                                              "classes.txt"):
        read_annotations(str(path))


@pytest.mark.parametrize(
    "line, match",
    [("just_a_path.mp4\n", "cannot parse"), ("a.mp4 10 cat\n", "label 'cat'"),
     ("a.mp4 10 -2\n", "label -2"), ("a.mp4 ten 1\n", "num_frames 'ten'")],
)
def test_bad_line_names_file_and_line(tmp_path, line, match):
    path = tmp_path / "list.txt"
    path.write_text("ok.mp4 10 1\n" + line)
    with pytest.raises(AnnotationError, match=rf"list.txt:2: .*{match}.*expected"):
        read_annotations(str(path))


def test_missing_and_empty_lists(tmp_path):
    with pytest.raises(AnnotationError, match="does not exist"):
        read_annotations(str(tmp_path / "nope.txt"))
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(AnnotationError, match="no videos"):
        read_annotations(str(tmp_path / "empty.txt"))


def test_class_names(tmp_path):
    anno = tmp_path / "list.txt"
    assert read_class_names(str(anno), 3) == ["0", "1", "2"]
    (tmp_path / "classes.txt").write_text("cat\n\ndog\n\n")
    assert read_class_names(str(anno), 4) == ["cat", "1", "dog", "3"]


# ----------------------------------------------------------------------------- decoder


def _naive_decode(path: str) -> np.ndarray:
    with av.open(path) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])


def test_decode_matches_naive_decode(ramp_video):
    full = _naive_decode(ramp_video)
    assert full.shape == (40, 32, 48, 3)
    indices = [21, 3, 3, 39, 17, 0, 21]  # unsorted, repeated, across the keyframe at 16/32
    frames = decode_frames(ramp_video, indices)
    assert frames.dtype == torch.uint8 and frames.shape == (7, 32, 48, 3)
    diff = np.abs(frames.numpy().astype(int) - full[indices].astype(int))
    assert diff.max() <= 2
    # The pixels say which frame it is, and red comes first (RGB order).
    levels = frames[:, 16:, 16:].float().mean(dim=(1, 2, 3)) / 6
    assert torch.allclose(levels, torch.tensor(indices, dtype=torch.float), atol=0.6)
    assert frames[0, 2, 2, 0] > 200 and frames[0, 2, 2, 2] < 60


def test_decode_past_end_repeats_last_frame_and_counts(ramp_video):
    # A frame count one or two too high (common) still loads: the last frame is repeated.
    frames = decode_frames(ramp_video, [38, 39, 41, 43])
    assert torch.equal(frames[2], frames[1]) and torch.equal(frames[3], frames[1])
    assert count_frames(ramp_video) == 40
    with pytest.raises(DecodeError, match="frame 60 was needed") as info:
        decode_frames(ramp_video, [38, 60])  # far past the end: truncated file or wrong list
    assert info.value.kind == "short"
    with VideoFile(ramp_video) as video:
        assert video.stream_has_count and video._timestamps()[:2] == [0, 512]


def test_container_without_frame_count(ramp_video, tmp_path):
    """Matroska stores no frame count: it is counted by decoding, and seeking still works."""
    path = str(tmp_path / "ramp.mkv")
    write_video(path, _naive_decode(ramp_video))
    with VideoFile(path) as video:
        assert not video.stream_has_count and video.num_frames == 40
    indices = [33, 5, 20, 20]
    diff = np.abs(decode_frames(path, indices).numpy().astype(int) - _naive_decode(path)[indices])
    assert diff.max() <= 2


@pytest.mark.parametrize("kind", ["missing", "empty", "text"])
def test_decode_errors_are_one_line(tmp_path, kind):
    path = tmp_path / "bad.mp4"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "text":
        path.write_text("this is not a video\n" * 20)
    with pytest.raises(DecodeError) as info:
        decode_frames(str(path), [0])
    message = str(info.value)
    assert "bad.mp4" in message and "\n" not in message


def test_no_video_stream(tmp_path):
    path = write_audio_only(str(tmp_path / "audio.m4a"))
    with pytest.raises(DecodeError, match="no video stream"):
        decode_frames(path, [0])


# ----------------------------------------------------------------------------- sampling


def test_train_window_is_random_and_strided():
    generator = torch.Generator().manual_seed(0)
    starts = set()
    for _ in range(50):
        idx = sampling.train_indices(100, 8, 4, generator)
        assert idx.shape == (8,) and np.all(np.diff(idx) == 4) and idx[-1] <= 99
        starts.add(int(idx[0]))
    assert len(starts) > 10 and min(starts) >= 0 and max(starts) <= 100 - 29


def test_val_and_test_windows():
    assert sampling.val_indices(40, 4, 2).tolist() == [16, 18, 20, 22]
    segments = sampling.test_indices(100, 4, 2, 3)
    assert segments.shape == (3, 4)
    assert segments[:, 0].tolist() == sorted(segments[:, 0].tolist())
    assert np.all(segments >= 0) and np.all(segments <= 99)
    # One segment = the validation window.
    assert sampling.test_indices(40, 4, 2, 1)[0].tolist() == sampling.val_indices(40, 4, 2).tolist()


def test_test_views_start_where_mmaction2_starts_them():
    # MMAction2's SampleFrames(clip_len 32, frame_interval 2, num_clips 10, test_mode=True) on a
    # 300-frame video: the window covers 63 frames, so starts go 237 / 9 apart, rounded.
    views = sampling.test_indices(300, 32, 2, 10)
    assert views[:, 0].tolist() == [0, 26, 53, 79, 105, 132, 158, 184, 211, 237]
    assert views[-1, -1] == 299  # the last view ends on the last frame
    assert np.all(np.diff(views, axis=1) == 2)
    # 3 views of 8 x 1 on 100 frames: starts 0, 46, 92 (slack 92, half of it rounded to even)
    assert sampling.test_indices(100, 8, 1, 3)[:, 0].tolist() == [0, 46, 92]


def test_short_video_is_squeezed_not_frozen():
    # A window longer than the video is spread over all of it instead of ending in repeats.
    assert sampling.val_indices(5, 4, 2).tolist() == [0, 1, 3, 4]
    assert sampling.train_indices(3, 4, 1).tolist() == [0, 1, 1, 2]
    assert sampling.test_indices(2, 3, 2, 2).tolist() == [[0, 0, 1], [0, 0, 1]]
    assert sampling.val_indices(1, 8, 2).tolist() == [0] * 8


def test_tsn_and_uniform_sampling():
    generator = torch.Generator().manual_seed(0)
    tsn = sampling.clip_indices(100, 2, 3, "tsn", num_segment=4, train=True, generator=generator)
    assert tsn.shape == (8,) and np.all(np.diff(tsn[0::2]) > 0)
    for k in range(4):  # each 2-frame snippet, 3 apart, sits in its own quarter
        assert 25 * k <= tsn[2 * k] <= 25 * k + 22 and tsn[2 * k + 1] - tsn[2 * k] == 3
    centre = sampling.clip_indices(100, 1, 1, "tsn", num_segment=4)
    assert centre.tolist() == [12, 37, 62, 87]
    assert sampling.clip_indices(100, 4, 1, "uniform").tolist() == [12, 37, 62, 87]
    views = sampling.test_clip_indices(100, 4, 1, 2, "uniform")
    assert views.tolist() == [[6, 31, 56, 81], [18, 43, 68, 93]]
    assert sampling.clip_indices(3, 8, 1, "uniform").max() == 2  # shorter than the segments
    assert sampling.frames_per_clip(2, "tsn", 4) == 8
    with pytest.raises(ValueError, match="dense, tsn, uniform"):
        sampling.clip_indices(10, 2, 1, "random")


# ----------------------------------------------------------------------------- dataset


def test_dataset_train_and_val_items(mini):
    train = _dataset(mini, "train")
    assert len(train) == 6 and train.num_classes_found == 2
    assert train.classes == ["right", "left"] and train.labels == [0, 0, 0, 1, 1, 1]
    clip, label, index, n_bad = train[4]
    assert clip.shape == (3, 8, 28, 28) and clip.dtype == torch.float32
    assert (label, index, n_bad) == (1, 4, 0)
    val = _dataset(mini, "val")
    first, second = val[0][0], val[0][0]
    assert first.shape == (3, 8, 28, 28) and torch.equal(first, second)  # deterministic


def test_dataset_test_views_decode_once(mini, monkeypatch):
    calls = []
    original = VideoFile.decode

    def counting_decode(self, indices):
        calls.append(self.path)
        return original(self, indices)

    monkeypatch.setattr(VideoFile, "decode", counting_decode)
    test = _dataset(mini, "test")
    views, label, index, n_bad = test[3]
    assert views.shape == (6, 3, 8, 28, 28)
    assert (label, index, n_bad) == (1, 3, 0)
    assert calls == [test.paths[3]]
    # Views are segment-major: the two segments differ, the crops of one segment overlap.
    assert not torch.equal(views[0], views[3])


def test_the_test_split_resizes_to_its_own_short_side(mini, monkeypatch):
    from zoo.data import transforms

    sides = []
    original = transforms.crop_boxes

    def recording(height, width, crop_size, short_side, num_crop):
        sides.append(short_side)
        return original(height, width, crop_size, short_side, num_crop)

    monkeypatch.setattr(transforms, "crop_boxes", recording)
    cfg = _cfg(mini, "DATA.TEST_SHORT_SIDE_SIZE", "28")
    val, test = build_dataset(cfg, "val"), build_dataset(cfg, "test")
    assert val.output_size().short_side == 32 and test.output_size().short_side == 28
    val[0], test[0]
    assert sides == [32, 28]  # the val crop, then the test views (boxes shared by segments)
    # 0 (the default): the test split resizes to SHORT_SIDE_SIZE, as validation does.
    same = build_dataset(_cfg(mini), "test")
    assert same.output_size().short_side == 32
    assert not torch.equal(same[0][0], test[0][0])
    with pytest.raises(ConfigError, match="CONFIG.DATA.CROP_SIZE = 28 is larger than CONFIG.DATA."
                                          "TEST_SHORT_SIDE_SIZE = 24"):
        _cfg(mini, "DATA.TEST_SHORT_SIDE_SIZE", "24")


@pytest.mark.parametrize("kind", ["missing", "empty", "text"])
def test_bad_video_is_replaced_and_counted(mini, tmp_path, kind, caplog):
    lines = open(mini["val_list"]).read().splitlines()
    bad = tmp_path / "broken.mp4"
    if kind == "empty":
        bad.write_bytes(b"")
    elif kind == "text":
        bad.write_text("not a video")
    anno = tmp_path / "list.txt"
    anno.write_text(f"{bad} 16 1\n" + "\n".join(lines) + "\n")  # absolute path: join keeps it
    dataset = _dataset({"val_list": str(anno), "root": mini["root"]}, "val")
    clip, label, index, n_bad = dataset[0]
    assert n_bad == 1 and index != 0 and label == dataset.labels[index]
    assert clip.shape == (3, 8, 28, 28)
    assert "broken.mp4" in caplog.text
    assert dataset[0][2] == index  # evaluation picks the same stand-in every time


def test_all_bad_videos_raise(tmp_path, mini):
    anno = tmp_path / "list.txt"
    anno.write_text("a.mp4 10 0\nb.mp4 10 1\n")
    dataset = _dataset({"val_list": str(anno), "root": str(tmp_path)}, "val", max_tries=3)
    with pytest.raises(RuntimeError, match="3 videos in a row.*a.mp4"):
        dataset[0]


# ----------------------------------------------------------------------------- build


def test_build_dataset_splits_and_errors(mini, tmp_path):
    cfg = _cfg(mini)
    assert len(build_dataset(cfg, "train")) == 6
    test = build_dataset(cfg, "test")  # no TEST_ANNO_PATH: the validation list
    assert len(test) == 4 and test[0][0].shape == (2, 3, 8, 28, 28)
    with pytest.raises(ConfigError, match="CONFIG.DATA.TRAIN_ANNO_PATH is empty: .*SYNTHETIC"):
        build_dataset(_cfg(mini, "DATA.TRAIN_ANNO_PATH", ""), "train")
    with pytest.raises(ConfigError, match="TEST_ANNO_PATH = .* does not exist"):
        build_dataset(_cfg(mini, "DATA.TEST_ANNO_PATH", str(tmp_path / "x.txt")), "test")
    one_class = load_config(None, ["DATA.NUM_CLASSES", "1", "DATA.CROP_SIZE", "28",
                                   "DATA.SHORT_SIDE_SIZE", "32", "DATA.TRAIN_SHORT_SIDE_RANGE",
                                   "[32, 36]", "DATA.VAL_ANNO_PATH", mini["val_list"]])
    with pytest.raises(ConfigError, match="labels up to 1 but CONFIG.DATA.NUM_CLASSES = 1"):
        build_dataset(one_class, "val")


def test_more_classes_than_the_training_list_names_stops_with_one_line(mini, tmp_path):
    """classes.txt names 2 classes and NUM_CLASSES is 5: a 5-way head trained on 2 classes (top-5
    accuracy trivially 100%) without a word; the validation list is not checked (a subset)."""
    import shutil

    train = tmp_path / "train.txt"
    shutil.copy(mini["train_list"], train)
    labels = {int(line.split()[-1]) for line in train.read_text().splitlines() if line.strip()}
    (tmp_path / "classes.txt").write_text("".join(f"class{i}\n" for i in sorted(labels)))
    named = len(labels)
    args = ["DATA.TRAIN_ANNO_PATH", str(train), "DATA.NUM_CLASSES"]
    with pytest.raises(ConfigError) as e:
        build_dataset(_cfg(mini, *args, str(named + 3)), "train")
    assert f"names {named} classes but CONFIG.DATA.NUM_CLASSES = {named + 3}" in str(e.value)
    assert f"set NUM_CLASSES {named} (or 0 to count them)" in str(e.value)
    build_dataset(_cfg(mini, *args, str(named)), "train")


def test_build_loader_single_process(mini):
    loader = build_loader(_cfg(mini), "train")
    assert loader.sampler.__class__.__name__ == "EpochSampler" and loader.drop_last
    # The order is a function of the epoch alone: the same twice, different between epochs.
    orders = []
    for epoch in (0, 0, 1):
        loader.sampler.set_epoch(epoch)
        orders.append([i for _, i in loader.sampler])
    assert orders[0] == orders[1] and sorted(orders[0]) == list(range(6))
    assert orders[0] != orders[2]
    clips, labels, index, n_bad = next(iter(loader))
    assert clips.shape == (2, 3, 8, 28, 28) and labels.shape == (2,) and n_bad.sum() == 0
    val = build_loader(_cfg(mini), "val")
    assert not val.drop_last and [b[2].tolist() for b in val] == [[0, 1], [2, 3]]


def test_training_clips_depend_on_epoch_and_index_only(mini):
    """The same (epoch, index) gives the same augmented clip however often it is loaded, and
    another epoch gives another crop - so resumes and worker counts do not change the data."""
    ds = build_dataset(_cfg(mini), "train")
    a, b = ds[(2, 1)][0], ds[(2, 1)][0]
    torch.manual_seed(123)  # the global RNG plays no part
    c = ds[(2, 1)][0]
    assert torch.equal(a, b) and torch.equal(a, c)
    assert any(not torch.equal(a, ds[(e, 1)][0]) for e in range(3, 8))


def test_build_loader_distributed_sampler(mini, monkeypatch):
    monkeypatch.setattr(data_build.comm, "get_world_size", lambda: 2)
    monkeypatch.setattr(data_build.comm, "get_rank", lambda: 1)
    train = build_loader(_cfg(mini), "train")
    inner = train.sampler.sampler
    assert isinstance(inner, DistributedSampler) and inner.shuffle
    assert inner.num_replicas == 2 and inner.rank == 1
    train.sampler.set_epoch(3)
    assert inner.epoch == 3 and {e for e, _ in train.sampler} == {3}
    assert len(list(train.sampler)) == 3
    test = build_loader(_cfg(mini), "test")
    assert not test.sampler.shuffle and not test.drop_last
    assert list(test.sampler) == [1, 3]


def test_worker_seed_and_batch_size_check(mini, monkeypatch):
    threads = torch.get_num_threads()
    data_workers.seed_worker(2, base_seed=1000)
    first = torch.rand(1), np.random.rand()
    data_workers.seed_worker(2, base_seed=1000)
    assert torch.equal(first[0], torch.rand(1)) and first[1] == np.random.rand()
    torch.set_num_threads(threads)  # undo the worker-only setting in this process
    with pytest.raises(ConfigError, match="TRAIN.BATCH_SIZE = 8 is larger than the 6"):
        build_loader(_cfg(mini, "TRAIN.BATCH_SIZE", "8"), "train")


def test_loader_with_worker_process(mini):
    loader = build_loader(_cfg(mini, "DATA.NUM_WORKERS", "1"), "val")
    assert loader.persistent_workers
    assert sum(len(batch[1]) for batch in loader) == 4


# ----------------------------------------------------------------------------- config wiring


def test_mean_std_default_to_the_model_facts(mini):
    cfg = _cfg(mini)
    assert cfg.CONFIG.DATA.MEAN == [] and data_build.dataset_kwargs(cfg, "val")["mean"] == MEAN
    facts = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
    filled = data_build.fill_normalization(cfg, facts)
    assert filled.CONFIG.DATA.MEAN == facts["mean"] and filled.is_frozen() == cfg.is_frozen()
    assert data_build.dataset_kwargs(filled, "val")["std"] == facts["std"]
    mine = _cfg(mini, "DATA.MEAN", "[0.5, 0.5, 0.5]", "DATA.STD", "[0.5, 0.5, 0.5]")
    assert data_build.fill_normalization(mine, facts) is mine  # set in the config: kept
    assert data_build.fill_normalization(cfg, {}) is cfg


def test_new_data_keys_reach_the_dataset_and_are_validated(mini):
    cfg = _cfg(mini, "DATA.SAMPLING", "tsn", "DATA.NUM_SEGMENT", "3", "DATA.DECODER", "opencv",
               "DATA.DECODE_TIMEOUT", "5", "DATA.COLOR_JITTER", "[0.4, 0.4, 0.4, 0.0]")
    ds = build_dataset(cfg, "train")
    s = ds.settings
    assert (s.sampling, s.num_segment, s.decoder, s.decode_timeout) == ("tsn", 3, "opencv", 5)
    assert ds[0][0].shape == (3, 24, 28, 28)  # 3 segments x 8 frames
    for key, value in [("DATA.SAMPLING", "random"), ("DATA.MAX_BAD_FRACTION", "1.5"),
                       ("DATA.COLOR_JITTER", "[0.1, 0.1]"), ("DATA.OFFICIAL_SPLIT", "4"),
                       ("DATA.MEAN", "[0.5]")]:
        with pytest.raises(ConfigError, match=key.split(".")[1]):
            _cfg(mini, key, value)
    with pytest.raises(KeyError, match="unknown decoder 'ffmpeg'"):
        build_dataset(_cfg(mini, "DATA.DECODER", "ffmpeg"), "train")


def test_loader_is_guarded_and_times_out_stuck_workers(mini):
    loader = build_loader(_cfg(mini, "DATA.NUM_WORKERS", "1", "DATA.LOADER_TIMEOUT", "60"), "val")
    assert isinstance(loader, GuardedLoader) and loader.timeout == 60
    assert loader.max_bad_fraction == 0.1
    assert build_loader(_cfg(mini), "val").timeout == 0  # no workers: nothing to wait for
