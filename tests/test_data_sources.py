"""Every dataset source, read through DATASET_REGISTRY on videos and images the tests write."""

from __future__ import annotations

import logging
import os

import cv2
import numpy as np
import pytest
import torch
from videos_for_tests import has_encoder, ramp_frames, write

from zoo.config import load_config
from zoo.data import DATASET_REGISTRY, build_dataset
from zoo.data.decode.registry import PyAVReader
from zoo.data.lists.annotations import AnnotationError, read_annotations, read_class_names
from zoo.data.lists.sources import kinetics_records, kinetics_stem

MEAN, STD = [0.45, 0.45, 0.45], [0.225, 0.225, 0.225]
COMMON = dict(clip_len=4, frame_rate=2, crop_size=28, short_side_size=32,
              train_short_side_range=[32, 36], random_flip=False, mean=MEAN, std=STD,
              test_num_segment=2, test_num_crop=3)


def _make(name: str, anno_path: str, data_path: str = "", split: str = "val", **extra):
    kwargs = dict(COMMON, anno_path=anno_path, data_path=data_path, split=split)
    kwargs.update(extra)
    return DATASET_REGISTRY.get(name)(**kwargs)


def _video(path: str, frames: int = 40, ext_codec: str = "libx264") -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return write(path, ramp_frames(frames), codec=ext_codec)


@pytest.fixture()
def spy_indices(monkeypatch):
    """Records the frame indices every PyAV decode is asked for."""
    calls = []
    original = PyAVReader.decode

    def decode(self, indices):
        calls.append(list(indices))
        return original(self, indices)

    monkeypatch.setattr(PyAVReader, "decode", decode)
    return calls


def test_gluoncv_list_with_spaces_and_csv_with_times(tmp_path, spy_indices):
    _video(str(tmp_path / "folder with spaces" / "clip 1.mp4"))
    _video(str(tmp_path / "b.mp4"))
    (tmp_path / "list.txt").write_text("folder with spaces/clip 1.mp4 40 1\nb.mp4 -1 0\n")
    ds = _make("VideoListDataset", str(tmp_path / "list.txt"), str(tmp_path))
    clip, label, index, n_bad = ds[0]
    assert clip.shape == (3, 4, 28, 28) and (label, index, n_bad) == (1, 0, 0)
    # CSV with start/end seconds: only frames 10..29 (0.4 s .. 1.2 s at 25 fps) are used.
    (tmp_path / "list.csv").write_text("path,label,start,end\nb.mp4,0,0.4,1.2\n")
    ds = _make("VideoListDataset", str(tmp_path / "list.csv"), str(tmp_path), split="train",
               clip_len=3, frame_rate=5)
    for _ in range(5):
        ds[0]
    assert all(10 <= i < 30 for call in spy_indices[1:] for i in call)
    assert read_annotations(str(tmp_path / "list.csv"))[0].start == 0.4
    # A range that starts after the video's end (1.6 s at 25 fps) is an unreadable video, not
    # a clip of its last frame repeated.
    (tmp_path / "late.csv").write_text("path,label,start,end\nb.mp4,0,3.0,5.0\n")
    ds = _make("VideoListDataset", str(tmp_path / "late.csv"), str(tmp_path))
    with pytest.raises(RuntimeError, match=r"time range starts at 3 s, after the video's end "
                                           r"at 1.6 s \(40 frames at 25 fps\)"):
        ds[0]


def test_kinetics_csv(tmp_path, spy_indices, caplog):
    root = tmp_path / "k400"
    _video(str(root / "train" / "abseiling" / f"{kinetics_stem('aaa', 1, 11)}.mp4"))
    _video(str(root / "train" / "playing guitar" / f"{kinetics_stem('b-b', 5.0, 15.0)}.mkv"))
    _video(str(root / "full" / "ccc.mp4"), frames=60)  # untrimmed: the row's times select a part
    csv_path = tmp_path / "kinetics_train.csv"
    csv_path.write_text(
        "label,youtube_id,time_start,time_end,split,is_cc\n"
        "abseiling,aaa,1,11,train,0\n"
        '"playing guitar",b-b,5.0,15.0,train,0\n'
        "abseiling,ccc,1.2,2.0,train,0\n"
        "playing guitar,gone,0,10,train,0\n"
    )
    records, classes, missing = kinetics_records(str(csv_path), str(root))
    assert classes == ["abseiling", "playing guitar"] and missing == ["gone_000000_000010"]
    assert [(r.label, r.start) for r in records] == [(0, -1.0), (1, -1.0), (0, 1.2)]
    cfg = load_config(None, [
        "DATA.DATASET", "KineticsDataset", "DATA.NUM_CLASSES", "2",
        "DATA.TRAIN_ANNO_PATH", str(csv_path), "DATA.TRAIN_DATA_PATH", str(root),
        "DATA.VAL_ANNO_PATH", str(csv_path), "DATA.VAL_DATA_PATH", str(root),
        "DATA.CLIP_LEN", "4", "DATA.FRAME_RATE", "2", "DATA.CROP_SIZE", "28",
        "DATA.SHORT_SIDE_SIZE", "32", "DATA.TRAIN_SHORT_SIDE_RANGE", "[32, 36]",
    ])
    with caplog.at_level(logging.WARNING):
        ds = build_dataset(cfg, "val")
        build_dataset(cfg, "train")  # the same CSV again: its missing rows are said once
    said = [r for r in caplog.records if "have no file under" in r.getMessage()]
    assert len(said) == 1 and "1 of 4 videos" in said[0].getMessage()
    assert len(ds) == 3 and ds.classes == classes
    assert ds[1][0].shape == (3, 4, 28, 28)
    spy_indices.clear()
    ds[2]  # frames 30..49 of the untrimmed video
    assert all(30 <= i < 50 for i in spy_indices[0])
    with pytest.raises(AnnotationError, match="KineticsDataset"):
        read_annotations(str(csv_path))
    from zoo.train.finetune import resolve_num_classes

    cfg = load_config(None, ["DATA.DATASET", "KineticsDataset", "DATA.NUM_CLASSES", "0",
                             "DATA.TRAIN_ANNO_PATH", str(csv_path),
                             "DATA.TRAIN_DATA_PATH", str(root)])
    assert resolve_num_classes(cfg).CONFIG.DATA.NUM_CLASSES == 2


def test_ucf101_split_files(tmp_path):
    split_dir = tmp_path / "ucfTrainTestlist"
    split_dir.mkdir()
    (split_dir / "classInd.txt").write_text("1 ApplyEyeMakeup\n2 HandstandPushups\n")
    (split_dir / "trainlist01.txt").write_text(
        "ApplyEyeMakeup/v_ApplyEyeMakeup_g08_c01.avi 1\n"
        "HandstandPushups/v_HandStandPushups_g08_c01.avi 2\n"
    )
    (split_dir / "testlist01.txt").write_text("HandstandPushups/v_HandStandPushups_g01_c01.avi\n")
    videos = tmp_path / "UCF-101"
    for rel in ("ApplyEyeMakeup/v_ApplyEyeMakeup_g08_c01.avi",
                "HandstandPushups/v_HandStandPushups_g08_c01.avi",
                "HandstandPushups/v_HandStandPushups_g01_c01.avi"):
        _video(str(videos / rel), frames=12, ext_codec="mpeg4")
    train = _make("UCF101Dataset", str(split_dir), str(videos), split="train")
    assert train.labels == [0, 1] and train.classes == ["ApplyEyeMakeup", "HandstandPushups"]
    test = _make("UCF101Dataset", str(split_dir / "testlist01.txt"), str(videos), split="test")
    views, label, _, n_bad = test[0]
    assert views.shape == (6, 3, 4, 28, 28) and label == 1 and n_bad == 0
    with pytest.raises(AnnotationError, match="trainlist02"):
        _make("UCF101Dataset", str(split_dir), str(videos), split="train", official_split=2)
    # NUM_CLASSES 0 counts them as the dataset reads them (its labels are 1-based: 2, not 3),
    # from the split file or the folder.
    from zoo.train.finetune import resolve_num_classes

    for anno in (split_dir / "trainlist01.txt", split_dir):
        cfg = load_config(None, ["DATA.DATASET", "UCF101Dataset", "DATA.NUM_CLASSES", "0",
                                 "DATA.TRAIN_ANNO_PATH", str(anno),
                                 "DATA.TRAIN_DATA_PATH", str(videos)])
        assert resolve_num_classes(cfg).CONFIG.DATA.NUM_CLASSES == 2


def test_hmdb51_split_files(tmp_path):
    splits = tmp_path / "testTrainMulti_7030_splits"
    splits.mkdir()
    (splits / "brush_hair_test_split1.txt").write_text("a b.avi 1\nc.avi 2\nd.avi 0\n")
    (splits / "cartwheel_test_split1.txt").write_text("e.avi 2\nf.avi 1\n")
    (splits / "cartwheel_test_split2.txt").write_text("e.avi 1\nf.avi 2\n")
    videos = tmp_path / "hmdb51"
    for rel in ("brush_hair/a b.avi", "brush_hair/c.avi", "cartwheel/e.avi", "cartwheel/f.avi"):
        _video(str(videos / rel), frames=10, ext_codec="mpeg4")
    train = _make("HMDB51Dataset", str(splits), str(videos), split="train")
    assert [os.path.relpath(p, videos) for p in train.paths] == ["brush_hair/a b.avi",
                                                                 "cartwheel/f.avi"]
    val = _make("HMDB51Dataset", str(splits), str(videos), split="val")
    assert val.labels == [0, 1] and val.classes == ["brush_hair", "cartwheel"]
    assert val[1][0].shape == (3, 4, 28, 28)


def test_hmdb51_ids_follow_the_sorted_class_names_not_the_split_file_names(tmp_path):
    # "climb_stairs_test_split1.txt" sorts before "climb_test_split1.txt"; MMAction2's and
    # gluoncv's ids put climb (the shorter name) first.
    from zoo.data.lists.sources import hmdb51_records

    for cls in ("climb", "climb_stairs", "kick", "kick_ball"):
        (tmp_path / f"{cls}_test_split1.txt").write_text(f"{cls}_1.avi 1 \n")
    records, classes = hmdb51_records(str(tmp_path), train=True)
    assert classes == ["climb", "climb_stairs", "kick", "kick_ball"]
    assert [(r.path, r.label) for r in records] == [
        ("climb/climb_1.avi", 0), ("climb_stairs/climb_stairs_1.avi", 1),
        ("kick/kick_1.avi", 2), ("kick_ball/kick_ball_1.avi", 3)]


def test_an_official_split_file_of_another_split_than_official_split_stops(tmp_path):
    from zoo.data.lists.sources import hmdb51_records, ucf101_records

    (tmp_path / "classInd.txt").write_text("1 Walk\n")
    (tmp_path / "trainlist01.txt").write_text("Walk/v_Walk_g01_c01.avi 1\n")
    (tmp_path / "brush_hair_test_split1.txt").write_text("a.avi 1\n")
    (tmp_path / "brush_hair_test_split2.txt").write_text("a.avi 2\n")
    with pytest.raises(AnnotationError) as err:
        ucf101_records(str(tmp_path / "trainlist01.txt"), train=True, split_id=2)
    assert str(err.value) == (
        f"{tmp_path / 'trainlist01.txt'} is split 1's file, and CONFIG.DATA.OFFICIAL_SPLIT is 2: "
        "set OFFICIAL_SPLIT 1, or give the folder of the split files and OFFICIAL_SPLIT picks "
        "them")
    with pytest.raises(AnnotationError, match="is split 2's file, and CONFIG.DATA.OFFICIAL_SPLIT "
                                              "is 1: set OFFICIAL_SPLIT 2"):
        hmdb51_records(str(tmp_path / "brush_hair_test_split2.txt"), train=True, split_id=1)
    assert len(ucf101_records(str(tmp_path / "trainlist01.txt"), True, 1)[0]) == 1
    assert len(hmdb51_records(str(tmp_path / "brush_hair_test_split2.txt"), False, 2)[0]) == 1


def test_class_folders_write_classes_txt(tmp_path):
    root = tmp_path / "videos"
    _video(str(root / "walk" / "x.mp4"), frames=8)
    _video(str(root / "run" / "deeper dir" / "y 1.mp4"), frames=8)
    if has_encoder("libvpx-vp9"):
        _video(str(root / "run" / "z.webm"), frames=8, ext_codec="libvpx-vp9")
    else:
        _video(str(root / "run" / "z.mp4"), frames=8)
    (root / "walk" / "notes.txt").write_text("not a video")
    ds = _make("VideoFolderDataset", str(root), split="train")
    assert ds.classes == ["run", "walk"] and ds.labels == [0, 0, 1]
    assert (root / "classes.txt").read_text() == "run\nwalk\n"
    assert read_class_names(str(root), 2) == ["run", "walk"]
    assert ds[0][0].shape == (3, 4, 28, 28)
    # The plain list dataset reads the same folder.
    assert _make("VideoListDataset", str(root)).paths == ds.paths


def _frame_folder(folder, frames: np.ndarray) -> None:
    os.makedirs(folder, exist_ok=True)
    for t, image in enumerate(frames):
        cv2.imwrite(os.path.join(folder, f"img_{t + 1:05d}.jpg"), image[..., ::-1],
                    [cv2.IMWRITE_JPEG_QUALITY, 100])


def test_frame_folders(tmp_path, monkeypatch):
    root = tmp_path / "frames"
    _frame_folder(root / "jump" / "v1", ramp_frames(12))
    _frame_folder(root / "sit" / "v 2", ramp_frames(12))
    ds = _make("FrameFolderDataset", str(root), split="val")
    assert ds.settings.decoder == "frames" and ds.labels == [0, 1]
    (tmp_path / "list.txt").write_text("jump/v1 12 0\nsit/v 2 12 1\n")
    listed = _make("FrameFolderDataset", str(tmp_path / "list.txt"), str(root), split="test")
    assert listed[1][0].shape == (6, 3, 4, 28, 28)
    seen = []
    monkeypatch.setattr(cv2, "imread", lambda p, *a: seen.append(os.path.basename(p)) or
                        np.zeros((32, 48, 3), np.uint8))
    ds[0]
    # The centred window of 12 frames is frames 2, 4, 6, 8: files 3, 5, 7, 9 (numbered from 1).
    assert seen == ["img_00003.jpg", "img_00005.jpg", "img_00007.jpg", "img_00009.jpg"]


def test_image_folder_and_list(tmp_path):
    root = tmp_path / "images"
    for cls, level in (("cat", 40), ("dog", 200)):
        (root / cls).mkdir(parents=True)
        for i in range(2):
            image = np.full((40, 60, 3), level + i, np.uint8)
            cv2.imwrite(str(root / cls / f"im {i}.png"), image)
    train = _make("ImageFolderDataset", str(root), split="train", clip_len=16)
    clip, label, _, _ = train[3]
    assert clip.shape == (3, 1, 28, 28) and label == 1 and train.classes == ["cat", "dog"]
    (tmp_path / "images.txt").write_text("cat/im 0.png 0\ndog/im 1.png 1\n")
    test = _make("ImageListDataset", str(tmp_path / "images.txt"), str(root), split="test")
    views, label, _, _ = test[1]
    assert views.shape == (3, 3, 1, 28, 28) and label == 1
    level = views[1].mean() * STD[0] + MEAN[0]
    assert float(level) == pytest.approx(201 / 255, abs=0.01)
    assert torch.isfinite(views).all()


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16"])
def test_lists_saved_by_spreadsheets_are_read(tmp_path, encoding):
    """A byte-order mark (Excel's "CSV UTF-8") and UTF-16 (its "Unicode Text", tab-separated,
    CRLF) are read as the same list."""
    from zoo.data.lists.annotations import read_annotations

    csv_list, text_list = tmp_path / "l.csv", tmp_path / "l.txt"
    csv_list.write_bytes("path,label\r\ncafé/x.mp4,0\r\nb/y.mp4,1\r\n".encode(encoding))
    text_list.write_bytes("café/x.mp4\t10\t0\r\nb/y.mp4\t12\t1\r\n".encode(encoding))
    for path in (csv_list, text_list):
        records = read_annotations(str(path))
        assert [(r.path, r.label) for r in records] == [("café/x.mp4", 0), ("b/y.mp4", 1)]


def test_a_list_that_is_not_utf8_stops_with_one_line(tmp_path):
    from zoo.data.lists.annotations import read_annotations

    path = tmp_path / "latin1.txt"
    path.write_bytes("a/x.mp4 10 0\ncafé/y.mp4 10 1\n".encode("latin-1"))
    with pytest.raises(AnnotationError) as e:
        read_annotations(str(path))
    assert str(e.value).startswith(f"{path}:2: not UTF-8 text (byte 0xe9)")
    assert "\n" not in str(e.value)


def test_a_video_given_as_the_list_stops_with_one_line(tmp_path):
    from zoo.data.lists.annotations import read_annotations

    video = write(str(tmp_path / "clip.mp4"), ramp_frames(4))
    with pytest.raises(AnnotationError) as e:
        read_annotations(video)
    assert str(e.value).startswith(f"{video} holds binary data, not text")


def test_a_list_written_on_windows_finds_its_videos(tmp_path):
    r"""'a\b.mp4' names a/b.mp4 where only that exists; a file whose name holds a backslash is
    still the file it names."""
    root = tmp_path / "videos"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    write(str(root / "a" / "x.mp4"), ramp_frames(8))
    write(str(root / "b" / "y.mp4"), ramp_frames(8))
    write(str(root / "b\\y.mp4"), ramp_frames(8))  # a legal file name here
    listed = tmp_path / "list.txt"
    listed.write_text("a\\x.mp4 8 0\r\nb\\y.mp4 8 1\r\n")
    cfg = load_config(None, ["DATA.TRAIN_ANNO_PATH", str(listed), "DATA.TRAIN_DATA_PATH",
                             str(root), "DATA.NUM_CLASSES", "2"])
    dataset = build_dataset(cfg, "train")
    assert dataset.paths == [str(root / "a" / "x.mp4"), str(root / "b\\y.mp4")]


def test_official_avi_splits_read_the_reencoded_mp4_folder(tmp_path):
    """UCF101's split files name .avi; after zoo-reencode the folder holds .mp4 files."""
    splits = tmp_path / "ucfTrainTestlist"
    splits.mkdir()
    (splits / "classInd.txt").write_text("1 Archery\n2 Bowling\n")
    (splits / "trainlist01.txt").write_text("Archery/v_Archery_g01_c01.avi 1\n"
                                            "Bowling/v_Bowling_g01_c01.avi 2\n")
    videos = tmp_path / "UCF-101"
    for name in ("Archery/v_Archery_g01_c01", "Bowling/v_Bowling_g01_c01"):
        (videos / name).parent.mkdir(parents=True, exist_ok=True)
        write(str(videos / f"{name}.mp4"), ramp_frames(8))
    cfg = load_config(None, ["DATA.DATASET", "UCF101Dataset", "DATA.TRAIN_ANNO_PATH",
                             str(splits), "DATA.TRAIN_DATA_PATH", str(videos),
                             "DATA.NUM_CLASSES", "2"])
    assert [os.path.relpath(p, videos) for p in build_dataset(cfg, "train").paths] == [
        "Archery/v_Archery_g01_c01.mp4", "Bowling/v_Bowling_g01_c01.mp4"]
    # An .avi that is there is read as listed (the folder is not the re-encoded one).
    write(str(videos / "Archery" / "v_Archery_g01_c01.avi"), ramp_frames(8), codec="mpeg4")
    assert [os.path.relpath(p, videos) for p in build_dataset(cfg, "train").paths] == [
        "Archery/v_Archery_g01_c01.avi", "Bowling/v_Bowling_g01_c01.avi"]
