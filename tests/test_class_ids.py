"""A class id means the same class in every split and after training: class folders (hidden
entries, empty folders, a validation or test folder without some class), Kinetics CSVs, lists
whose classes.txt disagree, and checkpoints that carry the training data's names to testing and
prediction."""

from __future__ import annotations

import csv
import importlib.util
import json
import logging
import os

import pytest
import torch
import yaml
from helpers import ROOT, TOY_MODEL, run_tool
from videos_for_tests import ramp_frames, write

from zoo.config import ConfigError, load_config
from zoo.data import build_dataset
from zoo.data.lists.annotations import AnnotationError, check_same_classes, named_classes
from zoo.data.lists.sources import class_folder_records, kinetics_stem, visible_walk

SMALL = ["DATA.CLIP_LEN", "4", "DATA.FRAME_RATE", "2", "DATA.CROP_SIZE", "28",
         "DATA.SHORT_SIDE_SIZE", "32", "DATA.TRAIN_SHORT_SIDE_RANGE", "[32, 36]",
         "DATA.TEST_NUM_SEGMENT", "1", "DATA.TEST_NUM_CROP", "1", "DATA.NUM_WORKERS", "0",
         "DATA.NUM_CLASSES", "0"]  # count the classes the training data names


def _videos(root, names):
    """One 8-frame video at each relative path in ``names`` under ``root``."""
    for name in names:
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write(path, ramp_frames(8))


def _cfg(train, val, *extra):
    return load_config(None, ["DATA.TRAIN_ANNO_PATH", str(train), "DATA.VAL_ANNO_PATH", str(val),
                              *SMALL, *extra])


def _by_name(dataset):
    """{file name: class name} of a dataset's videos."""
    return {os.path.basename(p): dataset.classes[label]
            for p, label in zip(dataset.paths, dataset.labels)}


def test_hidden_folders_and_files_are_neither_classes_nor_videos(tmp_path):
    root = tmp_path / "videos"
    _videos(root, ["run/a.mp4", "walk/b.mp4", "walk/.cache/c.mp4", ".ipynb_checkpoints/d.mp4"])
    (root / "run" / "._a.mp4").write_bytes(b"\0\5\26\7 AppleDouble resource fork")
    records, classes = class_folder_records(str(root))
    assert classes == ["run", "walk"]
    assert [(r.path, r.label) for r in records] == [("run/a.mp4", 0), ("walk/b.mp4", 1)]

    # The list maker sees the same classes and videos as training on the folder itself.
    spec = importlib.util.spec_from_file_location(
        "build_lists", os.path.join(ROOT, "datasets", "build_lists_from_folders.py"))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.main(["--root", str(root), "--out", str(tmp_path / "lists"),
                      "--val-fraction", "0"]) == 0
    assert (tmp_path / "lists" / "classes.txt").read_text() == "run\nwalk\n"
    assert (tmp_path / "lists" / "train.txt").read_text() == "run/a.mp4 -1 0\nwalk/b.mp4 -1 1\n"


def test_linked_folders_are_followed_once_and_a_folder_in_two_classes_stops(tmp_path):
    shared = tmp_path / "nas"  # videos kept elsewhere, linked into the class folders
    _videos(shared, ["jump/x.mp4", "jump/more/y.mp4"])
    root = tmp_path / "videos"
    _videos(root, ["run/a.mp4"])
    os.symlink(shared / "jump", root / "jump")  # a linked class folder
    os.symlink(shared / "jump" / "more", root / "run" / "linked")  # a linked sub-folder
    os.symlink("..", shared / "jump" / "more" / "up")  # back to a folder the walk is inside
    with pytest.raises(AnnotationError) as e:  # jump/more is linked from run as well
        class_folder_records(str(root))
    assert "'jump/more' (class 'jump') and 'run/linked' (class 'run') are the same folder" in \
        str(e.value) and "\n" not in str(e.value)
    os.remove(root / "run" / "linked")
    os.symlink(root / "run" / "sub", root / "run" / "again")  # a second way to one folder
    _videos(root, ["run/sub/b.mp4"])
    records, classes = class_folder_records(str(root))
    assert classes == ["jump", "run"]
    assert [(r.path, r.label) for r in records] == [  # each video once, no endless loop
        ("jump/more/y.mp4", 0), ("jump/x.mp4", 0), ("run/a.mp4", 1), ("run/again/b.mp4", 1)]


def test_the_walk_follows_links_but_not_round_in_circles(tmp_path):
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    (tree / "a" / "b").mkdir(parents=True)
    outside.mkdir()
    os.symlink(tree / "a", tree / "a" / "b" / "loop")  # back to a folder above
    os.symlink(tree / "a" / "b", tree / "a" / "again")  # a second way to a/b
    os.symlink(outside, tree / "z")  # a folder kept elsewhere
    walked = [os.path.relpath(d, tree) for d, _, _ in visible_walk(str(tree))]
    assert walked == [".", "a", os.path.join("a", "again"), "z"]  # each real folder once


@pytest.mark.parametrize("where", ["file", "empty class folder"])
def test_a_name_that_is_not_utf8_stops_with_one_line(tmp_path, where):
    """A name from an archive made in Latin-1 cannot be written into a UTF-8 list."""
    root = tmp_path / "videos"
    _videos(root, ["run/a.mp4", "walk/b.mp4"])
    latin1 = os.fsdecode(b"caf\xe9")  # undecodable bytes, kept as surrogates
    try:
        if where == "file":
            os.link(root / "run" / "a.mp4", root / "run" / f"{latin1}.mp4")
        else:
            (root / latin1).mkdir()
    except (OSError, UnicodeError):
        pytest.skip("this file system takes only UTF-8 names")
    with pytest.raises(AnnotationError) as e:
        class_folder_records(str(root))
    message = str(e.value)
    assert "not UTF-8" in message and "caf\\xe9" in message and "\n" not in message


def test_an_empty_class_folder_keeps_its_id_and_is_named_in_a_warning(tmp_path, caplog):
    root = tmp_path / "videos"
    _videos(root, ["a/x.mp4", "c/y.mp4"])
    (root / "b").mkdir()
    (root / "b" / "clip.xyz").write_bytes(b"not a listed extension")
    with caplog.at_level(logging.WARNING):
        records, classes = class_folder_records(str(root))
    assert classes == ["a", "b", "c"] and [r.label for r in records] == [0, 2]
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warning) == 2 and "1 class folder(s) hold no videos (b)" in warning[0], warning
    assert "1 file(s) in the class folders are not read as videos (.xyz x1; e.g. " \
        "'b/clip.xyz')" in warning[1], warning


def test_camcorder_phone_and_broadcast_files_count_and_other_files_are_named(tmp_path, caplog):
    root = tmp_path / "videos"
    _videos(root, ["a/x.MTS", "a/y.3gp", "b/z.m2ts", "b/w.mxf"])
    for name in ("a/notes.txt", "b/readme.txt", "b/clip.xyz", "b/NOEXT"):
        (root / name).write_text("not a video")
    with caplog.at_level(logging.WARNING):
        records, classes = class_folder_records(str(root))
    assert [(r.path, r.label) for r in records] == [
        ("a/x.MTS", 0), ("a/y.3gp", 0), ("b/w.mxf", 1), ("b/z.m2ts", 1)]
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warning) == 1, warning
    assert "4 file(s) in the class folders are not read as videos (.txt x2, " in warning[0]
    assert ".xyz x1" in warning[0] and "no extension x1" in warning[0], warning


def test_a_validation_folder_without_a_class_keeps_the_training_ids(tmp_path):
    _videos(tmp_path / "train", ["archery/t1.mp4", "bowling/t2.mp4", "cycling/t3.mp4"])
    _videos(tmp_path / "val", ["archery/v1.mp4", "cycling/v3.mp4"])  # no bowling here
    cfg = _cfg(tmp_path / "train", tmp_path / "val")
    train = build_dataset(cfg, "train")
    # Alone, the folder numbers cycling 1: bowling's id in training.
    assert build_dataset(cfg, "val").labels == [0, 1] and train.classes[1] == "bowling"
    val = build_dataset(cfg, "val", classes=train.classes)
    assert _by_name(val) == {"v1.mp4": "archery", "v3.mp4": "cycling"}
    assert val.labels == [0, 2] and val.classes == ["archery", "bowling", "cycling"]

    # A folder the training data has no class for stops with one line naming it.
    _videos(tmp_path / "val", ["darts/v4.mp4"])
    with pytest.raises(AnnotationError, match=r"'darts' are not among the 3 classes") as e:
        build_dataset(cfg, "val", classes=train.classes)
    assert "\n" not in str(e.value)


def test_a_kinetics_validation_csv_without_a_class_keeps_the_training_ids(tmp_path):
    header = "label,youtube_id,time_start,time_end,split\n"
    rows = {"train": [("abseiling", "a1"), ("bowling", "b1"), ("cycling", "c1")],
            "val": [("abseiling", "a2"), ("cycling", "c2")]}
    for split, videos in rows.items():
        (tmp_path / split).mkdir()
        (tmp_path / split / f"{split}.csv").write_text(
            header + "".join(f"{label},{vid},0,10,{split}\n" for label, vid in videos))
        _videos(tmp_path / split / "videos",
                [f"{kinetics_stem(vid, 0, 10)}.mp4" for _, vid in videos])
    # A deleted copy in a hidden trash folder, which a sorted walk would find first.
    _videos(tmp_path / "val" / ".Trash-1000", [f"{kinetics_stem('a2', 0, 10)}.mp4"])
    cfg = _cfg(tmp_path / "train" / "train.csv", tmp_path / "val" / "val.csv",
               "DATA.DATASET", "KineticsDataset")
    train = build_dataset(cfg, "train")
    val = build_dataset(cfg, "val", classes=train.classes)
    assert val.labels == [0, 2] and val.classes[2] == "cycling"
    assert all(os.sep + "videos" + os.sep in p for p in val.paths), val.paths


def test_a_class_name_for_two_ids_stops_data_that_labels_by_name(tmp_path):
    _videos(tmp_path / "val", ["run/v1.mp4"])
    with pytest.raises(AnnotationError, match=r"'run' stands for ids 1 and 2 \(lines 2 and 3"):
        class_folder_records(str(tmp_path / "val"), classes=["walk", "run", "run"])


def test_lists_whose_classes_txt_disagree_stop_with_one_line(tmp_path):
    _videos(tmp_path, ["x.mp4", "y.mp4"])
    for split, names in (("train", "cat\ndog\n"), ("val", "dog\ncat\n")):
        (tmp_path / split).mkdir()
        (tmp_path / split / "list.txt").write_text("../x.mp4 -1 0\n../y.mp4 -1 1\n")
        (tmp_path / split / "classes.txt").write_text(names)
    cfg = _cfg(tmp_path / "train" / "list.txt", tmp_path / "val" / "list.txt")
    train = build_dataset(cfg, "train")
    with pytest.raises(AnnotationError) as e:
        build_dataset(cfg, "val", classes=train.classes)
    assert str(e.value).startswith("CONFIG.DATA.VAL_ANNO_PATH = ") and "\n" not in str(e.value)
    assert "class 0 is 'dog' there but 'cat' in the training data" in str(e.value)

    # Without a classes.txt a list names no class: nothing to disagree with.
    (tmp_path / "val" / "classes.txt").unlink()
    assert build_dataset(cfg, "val", classes=train.classes).labels == [0, 1]


def test_training_classes_that_are_only_numbers_name_nothing(tmp_path):
    """A training list without classes.txt: a validation folder numbers its own classes, as it
    would alone (nothing says which folder is which number)."""
    _videos(tmp_path / "videos", ["x.mp4", "y.mp4"])
    (tmp_path / "train.txt").write_text("videos/x.mp4 -1 0\nvideos/y.mp4 -1 1\n")
    _videos(tmp_path / "val", ["walk/v1.mp4", "run/v2.mp4"])
    cfg = _cfg(tmp_path / "train.txt", tmp_path / "val")
    train = build_dataset(cfg, "train")
    assert train.classes == ["0", "1"] and named_classes(train.classes) == []
    val = build_dataset(cfg, "val", classes=train.classes)
    assert val.classes == ["run", "walk"] and _by_name(val) == {"v1.mp4": "walk", "v2.mp4": "run"}


def test_only_ids_both_sides_name_are_compared():
    check_same_classes(["cat", "1", "bird"], ["cat", "dog", "2"], "val")  # numbers name nothing
    assert named_classes(["0", "dog"]) == ["0", "dog"] and named_classes([0, 1]) == []
    check_same_classes(["cat"], ["cat", "dog"], "val")  # a split may have fewer classes
    with pytest.raises(AnnotationError, match="class 1 is 'bird' there but 'dog'"):
        check_same_classes(["cat", "bird"], ["cat", "dog"], "val")


@pytest.mark.slow
def test_a_trained_checkpoint_carries_its_class_names_to_testing_and_prediction(tmp_path):
    """Training on class folders whose validation and test folders each lack a class: validation,
    test and prediction all use the training ids and names, the test folder's through the
    checkpoint alone (the training folder is gone by then, and the config before prediction)."""
    _videos(tmp_path / "train", [f"{c}/t{i}.mp4" for c in ("a", "b", "c") for i in range(2)])
    _videos(tmp_path / "val", ["a/v1.mp4", "c/v2.mp4"])
    _videos(tmp_path / "test", ["b/s1.mp4", "c/s2.mp4"])
    (tmp_path / "toy.py").write_text(TOY_MODEL)
    config = {"CONFIG": {
        "EXTRA_MODULES": [str(tmp_path / "toy.py")],
        "MODEL": {"NAME": "toy_conv3d"},
        "DATA": {"TRAIN_ANNO_PATH": str(tmp_path / "train"),
                 "VAL_ANNO_PATH": str(tmp_path / "val"),
                 "TEST_ANNO_PATH": str(tmp_path / "test"), "NUM_CLASSES": 0},
        "TRAIN": {"BATCH_SIZE": 2, "EPOCH_NUM": 1}, "VAL": {"BATCH_SIZE": 2},
        "TEST": {"BATCH_SIZE": 2},
        "LOG": {"BASE_PATH": str(tmp_path / "runs"), "EXP_NAME": "ids"},
    }}
    yaml_path = tmp_path / "ids.yaml"
    yaml_path.write_text(yaml.safe_dump(config))
    args = ["--config-file", str(yaml_path), *SMALL, "DDP_CONFIG.DISTRIBUTED", "False"]
    r = run_tool("train_ddp.py", args)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run = tmp_path / "runs" / "ids"
    ckpt = run / "checkpoints" / "epoch_1.pth"
    assert torch.load(ckpt, map_location="cpu", weights_only=True)["classes"] == ["a", "b", "c"]
    val = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()
           if json.loads(x).get("split") == "val"]
    assert val[-1]["num_videos"] == 2

    os.rename(tmp_path / "train", tmp_path / "train_gone")
    r = run_tool("test_ddp.py", args)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with open(run / "predictions.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    truth = {os.path.basename(r["video"]): (r["label"], r["label_name"]) for r in rows}
    assert truth == {"s1.mp4": ("1", "b"), "s2.mp4": ("2", "c")}, rows  # the training ids

    # Prediction needs the checkpoint alone: its config and its class names. A folder stands
    # for the videos under it.
    os.remove(yaml_path)
    r = run_tool("predict.py", ["--checkpoint", str(ckpt), "--json", str(tmp_path / "test")])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    results = json.loads(r.stdout)
    assert [os.path.relpath(x["video"], tmp_path / "test") for x in results] == [
        os.path.join("b", "s1.mp4"), os.path.join("c", "s2.mp4")]
    assert {t["name"] for t in results[0]["top"]} == {"a", "b", "c"}, r.stdout


def test_the_list_maker_refuses_to_write_its_lists_among_the_classes(tmp_path, capsys):
    """Lists written into the class folders' root would be read as a class on the next run."""
    from zoo.cli.build_lists_from_folders import main

    root = tmp_path / "videos"
    _videos(root, ["run/a.mp4", "walk/b.mp4"])
    assert main(["--root", str(root), "--out", str(root / "lists")]) == 2
    err = capsys.readouterr().err.strip()
    assert "lies inside --root" in err and err.count("\n") == 0, err
    assert not (root / "lists").exists()
    assert main(["--root", str(root), "--out", str(tmp_path / "lists")]) == 0


def test_the_data_check_warns_when_validation_videos_are_training_videos(tmp_path, caplog):
    from zoo.cli.data_preflight import check_data

    root = tmp_path / "videos"
    _videos(root, ["run/a.mp4", "run/b.mp4", "walk/c.mp4", "walk/d.mp4"])
    train, held_out = tmp_path / "train.txt", tmp_path / "val.txt"
    train.write_text("run/a.mp4 8 0\nwalk/c.mp4 8 1\n")
    held_out.write_text("run/b.mp4 8 0\nwalk/d.mp4 8 1\n")
    # The folder twice; the training list twice; a held-out list.
    for train_path, val, shared in ((root, root, 4), (train, train, 2), (train, held_out, 0)):
        cfg = _cfg(train_path, val, "DATA.TRAIN_DATA_PATH", str(root), "DATA.VAL_DATA_PATH",
                   str(root), "TRAIN.BATCH_SIZE", "1", "DDP_CONFIG.DISTRIBUTED", "False")
        caplog.clear()
        with caplog.at_level("WARNING"):
            check_data(cfg, ("train", "val"))
        said = [r.getMessage() for r in caplog.records if "are training videos too" in
                r.getMessage()]
        assert len(said) == int(shared > 0), said
        if shared:
            assert said[0].startswith(f"data check: {shared} of the {shared} validation videos")


def test_the_data_check_passes_over_a_data_path_a_folder_of_class_folders_does_not_use(
        tmp_path):
    # A class-folder dataset finds its videos in its ANNO_PATH folder: a TRAIN_DATA_PATH left
    # by a base config (the custom recipe's 'videos') names nothing it reads.
    from zoo.cli.data_preflight import check_data

    root = tmp_path / "videos"
    _videos(root, ["run/a.mp4", "walk/c.mp4"])
    for dataset in ("VideoFolderDataset", "VideoListDataset"):
        cfg = _cfg(root, "", "DATA.DATASET", dataset, "DATA.TRAIN_DATA_PATH",
                   str(tmp_path / "not_there"), "TRAIN.BATCH_SIZE", "1",
                   "DDP_CONFIG.DISTRIBUTED", "False")
        check_data(cfg, ("train",))
    (tmp_path / "train.txt").write_text("run/a.mp4 8 0\nwalk/c.mp4 8 1\n")
    cfg = _cfg(tmp_path / "train.txt", "", "DATA.TRAIN_DATA_PATH", str(tmp_path / "not_there"),
               "TRAIN.BATCH_SIZE", "1", "DDP_CONFIG.DISTRIBUTED", "False")
    with pytest.raises(ConfigError, match="TRAIN_DATA_PATH = .* does not exist"):
        check_data(cfg, ("train",))  # a list's paths are relative to it: still checked
    # A list of absolute paths written on another machine: the data path does not apply.
    (tmp_path / "train.txt").write_text("/home/else/run/a.mp4 8 0\n/home/else/walk/c.mp4 8 1\n")
    cfg = _cfg(tmp_path / "train.txt", "", "DATA.TRAIN_DATA_PATH", str(root),
               "TRAIN.BATCH_SIZE", "1", "DDP_CONFIG.DISTRIBUTED", "False")
    with pytest.raises(ConfigError) as err:
        check_data(cfg, ("train",))
    assert str(err.value) == (
        "none of the first 2 videos of the train list exists (e.g. '/home/else/run/a.mp4'), "
        "and its paths are absolute, so CONFIG.DATA.TRAIN_DATA_PATH does not apply to them: "
        "write the list's paths relative to the data folder and set "
        "CONFIG.DATA.TRAIN_DATA_PATH to it")
    # Absolute paths that exist need no data path at all.
    (tmp_path / "train.txt").write_text(f"{root / 'run' / 'a.mp4'} 8 0\n"
                                        f"{root / 'walk' / 'c.mp4'} 8 1\n")
    cfg = _cfg(tmp_path / "train.txt", "", "DATA.TRAIN_DATA_PATH", "", "TRAIN.BATCH_SIZE", "1",
               "DDP_CONFIG.DISTRIBUTED", "False")
    check_data(cfg, ("train",))


def test_a_validation_label_the_training_classes_lack_stops_with_one_fix(tmp_path):
    # Training names 4 classes; validation has a label 4. Whatever NUM_CLASSES is, the one line
    # says the label is not a training class (it advised raising NUM_CLASSES, then lowering it).
    from zoo.cli.data_preflight import check_data

    root = tmp_path / "videos"
    _videos(root, ["a/1.mp4", "b/2.mp4", "c/3.mp4", "d/4.mp4", "e/5.mp4"])
    (tmp_path / "classes.txt").write_text("a\nb\nc\nd\n")
    (tmp_path / "train.txt").write_text("a/1.mp4 8 0\nb/2.mp4 8 1\nc/3.mp4 8 2\nd/4.mp4 8 3\n")
    (tmp_path / "val.txt").write_text("a/1.mp4 8 0\ne/5.mp4 8 4\n")
    for count in ("0", "4", "5"):
        cfg = _cfg(tmp_path / "train.txt", tmp_path / "val.txt", "DATA.TRAIN_DATA_PATH",
                   str(root), "DATA.VAL_DATA_PATH", str(root), "DATA.NUM_CLASSES", count,
                   "TRAIN.BATCH_SIZE", "1", "DDP_CONFIG.DISTRIBUTED", "False")
        if count == "5":
            with pytest.raises(ConfigError, match="names 4 classes but CONFIG.DATA.NUM_CLASSES"):
                check_data(cfg, ("train", "val"))
            continue
        with pytest.raises(ConfigError) as err:
            check_data(cfg, ("train", "val"))
        assert str(err.value) == (
            f"CONFIG.DATA.VAL_ANNO_PATH = {str(tmp_path / 'val.txt')!r} has labels up to 4, but "
            "the training data names 4 classes (ids 0 to 3): a val label must be one of the "
            "training classes; leave those videos out of the list, or give the training data "
            "that class")


def test_the_data_check_warns_when_a_training_video_has_two_labels(tmp_path, caplog):
    from zoo.cli.data_preflight import check_data

    root = tmp_path / "videos"
    _videos(root, ["run/a.mp4", "walk/c.mp4"])
    (tmp_path / "classes.txt").write_text("run\nwalk\n")
    for lines, torn in (("run/a.mp4 8 0\nwalk/c.mp4 8 1\n./run/a.mp4 8 1\n", 1),
                        ("run/a.mp4 8 0\nwalk/c.mp4 8 1\nrun/a.mp4 8 0\n", 0)):  # a repeat
        (tmp_path / "train.txt").write_text(lines)
        cfg = _cfg(tmp_path / "train.txt", "", "DATA.TRAIN_DATA_PATH", str(root),
                   "TRAIN.BATCH_SIZE", "1", "DDP_CONFIG.DISTRIBUTED", "False")
        caplog.clear()
        with caplog.at_level("WARNING"):
            check_data(cfg, ("train",))
        said = [r.getMessage() for r in caplog.records if "two or more labels" in r.getMessage()]
        assert len(said) == torn, said
        if torn:
            assert f"{root / 'run' / 'a.mp4'}: run, walk" in said[0]


def test_the_data_check_tells_a_frame_folders_runs_apart(tmp_path, caplog):
    """MMAction2's offset lists cut one folder of frames into runs, each its own video: runs with
    other labels, or held out for validation, are not the same video twice."""
    import cv2

    from zoo.cli.data_preflight import check_data

    folder = tmp_path / "frames" / "long"
    folder.mkdir(parents=True)
    for i, frame in enumerate(ramp_frames(24, 24, 32)):
        cv2.imwrite(str(folder / f"img_{i + 1:05d}.jpg"), frame[:, :, ::-1])
    train, val = tmp_path / "train.txt", tmp_path / "val.txt"
    train.write_text("long 0 8 0\nlong 8 8 1\n")
    val.write_text("long 16 8 0\n")
    cfg = _cfg(train, val, "DATA.TRAIN_DATA_PATH", str(tmp_path / "frames"),
               "DATA.VAL_DATA_PATH", str(tmp_path / "frames"), "TRAIN.BATCH_SIZE", "1",
               "DDP_CONFIG.DISTRIBUTED", "False")
    with caplog.at_level("WARNING"):
        check_data(cfg, ("train", "val"))
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("data check")]
    assert said == [], said


def test_a_list_finds_files_whose_names_the_disk_holds_in_the_other_unicode_form(tmp_path):
    import unicodedata

    from zoo.data.lists.records import local_path

    composed = "caf\u00e9/cr\u00e8me.mp4"
    decomposed = unicodedata.normalize("NFD", composed)
    _videos(tmp_path / "macos", [decomposed])
    _videos(tmp_path / "linux", [composed])
    assert local_path(str(tmp_path / "macos"), composed) == str(tmp_path / "macos" / decomposed)
    assert local_path(str(tmp_path / "linux"), decomposed) == str(tmp_path / "linux" / composed)
    assert local_path(str(tmp_path / "none"), composed) == str(tmp_path / "none" / composed)


def test_class_folders_named_in_decomposed_unicode_are_the_same_classes(tmp_path):
    """macOS writes names decomposed (NFD); the same names typed on Linux are composed (NFC)."""
    import unicodedata

    composed = ["mandelbr\u00f6t", "z\u00fcrich"]
    decomposed = [unicodedata.normalize("NFD", c) for c in composed]
    assert decomposed != composed
    train_root, val_root = tmp_path / "train", tmp_path / "val"
    _videos(train_root, [f"{c}/a.mp4" for c in composed])
    _videos(val_root, [f"{c}/b.mp4" for c in decomposed])
    records, classes = class_folder_records(str(val_root), classes=composed)
    assert classes == composed and sorted(r.label for r in records) == [0, 1]
    assert {os.path.dirname(r.path): r.label for r in records} == {
        decomposed[0]: 0, decomposed[1]: 1}  # the files as they are on disk
    check_same_classes(decomposed, composed, "val")  # the same names
    with pytest.raises(AnnotationError, match="class 0 is"):
        check_same_classes(composed[::-1], composed, "val")
