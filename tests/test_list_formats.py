"""Annotation list formats (CONFIG.DATA.LIST_FORMAT) and frame folders (CONFIG.DATA.FRAME_TEMPLATE).

The fixture lists are written the way each project documents its format:
- gluon-cv VideoClsCustom: "three items in each line: video path, video length, video label";
- MMAction2 (docs "Use a custom dataset"): video lists ``some/path/000.mp4 1``; rawframe lists
  ``some/directory-1 163 1``; ``with_offset`` lists ``dir offset total_frames label``; multi-class
  lists ``some/directory-1 163 1 3 5``;
- PySlowFast DATASET.md (Kinetics): ``path_to_video_1 label_1`` per line, no header (forks use
  ``path,label``); its frame lists (SSv2, Charades) start ``original_vido_id video_id frame_id
  path labels``.
"""

from __future__ import annotations

import json
import logging
import os
import re

import cv2
import numpy as np
import pytest
from helpers import run_tool
from videos_for_tests import ramp_frames, write

from zoo.config import ConfigError, load_config
from zoo.data.decode.registry import DECODERS, DecodeError
from zoo.data.lists.annotations import AnnotationError, read_annotations
from zoo.data.lists.formats import decide_format

FLOW_COLOUR = (255, 0, 255)  # RGB magenta: never a grey level of the RGB frames below


def _write(path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def _rows(records):
    return [(r.path, r.num_frames, r.label, r.offset) for r in records]


# ----------------------------------------------------------------------------- each format

GLUONCV = "some/path/000.mp4 300 1\nsome dir/clip 1.mp4 -1 2\nsome/path/002.mp4 -1 0\n"
MMACTION2 = "some/path/000.mp4 1\nsome/path/001.mp4 1\nsome/path/002.mp4 2\n"
RAWFRAMES = "some/directory-1 163 1\nsome/directory-2 122 1\nsome/directory-3 258 2\n"
RAWFRAMES_OFFSET = ("some/directory-1 1 163 1\nsome/directory-1 164 122 1\n"
                    "some/directory-3 0 258 2\n")
PYSLOWFAST = "abseiling/a.mp4 0\narchery/b.mp4 1\n"
PYSLOWFAST_COMMA = "abseiling/a.mp4,0\narchery/b.mp4,1\n"
PYSLOWFAST_COMMA_SPACES = "air drumming/a 1.mp4,0\narchery/b.mp4,1\n"

EXPECTED = {
    "gluoncv": [("some/path/000.mp4", 300, 1, 0), ("some dir/clip 1.mp4", -1, 2, 0),
                ("some/path/002.mp4", -1, 0, 0)],
    "mmaction2": [("some/path/000.mp4", -1, 1, 0), ("some/path/001.mp4", -1, 1, 0),
                  ("some/path/002.mp4", -1, 2, 0)],
    "rawframes": [("some/directory-1", 163, 1, 0), ("some/directory-2", 122, 1, 0),
                  ("some/directory-3", 258, 2, 0)],
    "rawframes_offset": [("some/directory-1", 163, 1, 1), ("some/directory-1", 122, 1, 164),
                         ("some/directory-3", 258, 2, 0)],
    "pyslowfast": [("abseiling/a.mp4", -1, 0, 0), ("archery/b.mp4", -1, 1, 0)],
    "pyslowfast_spaces": [("air drumming/a 1.mp4", -1, 0, 0), ("archery/b.mp4", -1, 1, 0)],
}
CASES = [  # (fixture text, explicit LIST_FORMAT, expected rows, format auto must choose)
    (GLUONCV, "gluoncv", "gluoncv", "gluoncv"),
    (MMACTION2, "mmaction2", "mmaction2", "mmaction2"),
    (RAWFRAMES, "mmaction2_rawframes", "rawframes", "gluoncv"),  # the same meaning
    (RAWFRAMES_OFFSET, "mmaction2_rawframes", "rawframes_offset", "mmaction2_rawframes"),
    (PYSLOWFAST, "pyslowfast", "pyslowfast", "mmaction2"),  # the same meaning
    (PYSLOWFAST_COMMA, "pyslowfast", "pyslowfast", "pyslowfast"),
    (PYSLOWFAST_COMMA_SPACES, "pyslowfast", "pyslowfast_spaces", "pyslowfast"),
]


@pytest.mark.parametrize("text, fmt, expected, auto", CASES,
                         ids=[f"{c[1]}-{c[2]}-{i}" for i, c in enumerate(CASES)])
def test_each_format_parses_its_fixture_explicitly_and_with_auto(tmp_path, text, fmt, expected,
                                                                 auto):
    path = _write(tmp_path / "train.txt", text)
    assert _rows(read_annotations(path, fmt)) == EXPECTED[expected]
    assert _rows(read_annotations(path)) == EXPECTED[expected]  # LIST_FORMAT auto
    lines = [(f"x:{i}", line) for i, line in enumerate(text.splitlines(), 1)]
    assert decide_format(lines) == auto


def test_pyslowfast_csv_without_header_is_read_as_a_list(tmp_path):
    # PySlowFast names its lists train.csv / val.csv although they have no header.
    for text in (PYSLOWFAST, PYSLOWFAST_COMMA):
        path = _write(tmp_path / "train.csv", text)
        assert _rows(read_annotations(path)) == EXPECTED["pyslowfast"]
        assert _rows(read_annotations(path, "pyslowfast")) == EXPECTED["pyslowfast"]


# ----------------------------------------------------------------------------- auto


def test_auto_refuses_a_list_that_is_gluoncv_or_two_sorted_labels(tmp_path):
    path = _write(tmp_path / "l.txt", "a.mp4 1 3\nb.mp4 0 2\n")
    with pytest.raises(AnnotationError) as e:
        read_annotations(path)
    msg = str(e.value)
    assert "l.txt:1" in msg and "CONFIG.DATA.LIST_FORMAT" in msg
    assert "gluoncv" in msg and "mmaction2" in msg and "\n" not in msg
    # Said explicitly, it reads; a -1 count or a middle number above the last settles it too.
    assert _rows(read_annotations(path, "gluoncv")) == [("a.mp4", 1, 3, 0), ("b.mp4", 0, 2, 0)]
    for text in ("a.mp4 -1 3\nb.mp4 0 2\n", "a.mp4 300 3\nb.mp4 0 2\n"):
        assert decide_format([("x:1", ln) for ln in text.splitlines()]) == "gluoncv"


@pytest.mark.parametrize("text, line", [
    ("some/path/000.mp4 1\nsome/path/001.mp4 1 3 5\n", 2),  # MMAction2 multi_class video list
    ("some/directory-1 163 1 3 5\nsome/directory-2 122 1\n", 2),  # multi_class rawframes
    ("some/path/000.mp4 1 3 5\nsome/path/001.mp4 2 4 6\n", 1),  # three labels each
    ("a.mp4 1 2 3 4\n", 1),
])
def test_auto_refuses_multi_label_lists(tmp_path, text, line):
    path = _write(tmp_path / "m.txt", text)
    with pytest.raises(AnnotationError) as e:
        read_annotations(path)
    msg = str(e.value)
    assert f"m.txt:{line}" in msg and "multi-label" in msg and "CONFIG.DATA.LIST_FORMAT" in msg


@pytest.mark.parametrize("fmt, text", [
    ("mmaction2", "a.mp4 1\nb.mp4 1 3\n"),
    ("pyslowfast", "a.mp4,1\nb.mp4,1,3\n"),
    ("pyslowfast", "a.mp4 1\nb.mp4 1 3\n"),
    ("mmaction2_rawframes", "d1 163 1\nd2 122 1 3\n"),
    ("gluoncv", "a.mp4 30 1\nb.mp4 1 3 5\n"),  # would be the path "b.mp4 1"
])
def test_every_format_refuses_multi_label_lines(tmp_path, fmt, text):
    path = _write(tmp_path / "m.txt", text)
    with pytest.raises(AnnotationError, match=r"m.txt:2: .*multi-label.*LIST_FORMAT"):
        read_annotations(path, fmt)


def test_auto_settles_a_folder_with_a_space_by_looking_on_disk(tmp_path):
    # "sit/v 2 12 1" is the folder "sit/v 2" (gluoncv) or "sit/v" with more numbers.
    text = "jump/v1 12 0\nsit/v 2 12 1\n"
    (tmp_path / "frames" / "sit" / "v 2").mkdir(parents=True)
    (tmp_path / "frames" / "jump" / "v1").mkdir(parents=True)
    path = _write(tmp_path / "l.txt", text)
    assert _rows(read_annotations(path, data_root=str(tmp_path / "frames"))) == [
        ("jump/v1", 12, 0, 0), ("sit/v 2", 12, 1, 0)]
    with pytest.raises(AnnotationError, match="l.txt:2: .*LIST_FORMAT"):
        read_annotations(path)  # no folder to look in: two readings remain
    # Every path ends in a number: the folders decide, else a count of -1 is no offset line.
    (tmp_path / "frames" / "v 1").mkdir()
    path = _write(tmp_path / "l2.txt", "v 1 -1 0\n")
    assert _rows(read_annotations(path, data_root=str(tmp_path / "frames"))) == [("v 1", -1, 0, 0)]
    with pytest.raises(AnnotationError, match="l2.txt:1: .*LIST_FORMAT"):
        read_annotations(path)


def test_list_format_values_are_validated():
    with pytest.raises(ConfigError, match="CONFIG.DATA.LIST_FORMAT.*mmaction2_rawframes"):
        load_config(None, ["CONFIG.DATA.LIST_FORMAT", "mmaction"])
    with pytest.raises(ConfigError, match="CONFIG.DATA.FRAME_TEMPLATE"):
        load_config(None, ["CONFIG.DATA.FRAME_TEMPLATE", "img.jpg"])
    cfg = load_config(None, ["CONFIG.DATA.FRAME_TEMPLATE", "{:06d}.png"])
    assert cfg.CONFIG.DATA.LIST_FORMAT == "auto"


# ----------------------------------------------------------------------------- headers


def test_a_header_line_is_skipped_or_read_as_csv(tmp_path, caplog):
    path = _write(tmp_path / "h.txt", "video label\n" + MMACTION2)
    with caplog.at_level(logging.WARNING):
        assert _rows(read_annotations(path)) == EXPECTED["mmaction2"]
    assert "h.txt:1: skipping the header line 'video label'" in caplog.text
    # Any format: a header is never a video (no integer label).
    assert _rows(read_annotations(path, "mmaction2")) == EXPECTED["mmaction2"]
    # "path,label" columns: the CSV reader, whatever the file is called.
    path = _write(tmp_path / "h2.txt", "path,label\n" + PYSLOWFAST_COMMA)
    assert _rows(read_annotations(path)) == EXPECTED["pyslowfast"]


@pytest.mark.parametrize("text, match", [
    ("original_vido_id video_id frame_id path labels\nv1 1 0 v1/000001.jpg \"\"\n",
     "h.txt:1: .*PySlowFast frame list.*not supported"),
    (MMACTION2 + "video label\n", "h.txt:4: .*'video label'.*header is only recognised as the "
     "first line"),
])
def test_headers_that_cannot_be_skipped_are_named(tmp_path, text, match):
    with pytest.raises(AnnotationError, match=match):
        read_annotations(_write(tmp_path / "h.txt", text))


# ----------------------------------------------------------------------------- frame folders


def _frame_folder(folder, levels, flow: bool = True, template: str = "img_{:05d}.jpg"):
    """RGB frames of solid grey ``levels[i]`` as files 1, 2, ...; optical-flow images of another
    colour beside them, under both names the extraction tools use."""
    os.makedirs(folder, exist_ok=True)
    for i, level in enumerate(levels, start=1):
        cv2.imwrite(os.path.join(folder, template.format(i)), np.full((24, 32, 3), level, np.uint8))
        if flow:
            bgr = np.full((24, 32, 3), FLOW_COLOUR[::-1], np.uint8)
            for name in (f"flow_x_{i:05d}.jpg", f"flow_y_{i:05d}.jpg", f"x_{i:05d}.jpg",
                         f"y_{i:05d}.jpg"):
                cv2.imwrite(os.path.join(folder, name), bgr)
    return str(folder)


LEVELS = [10 * (i + 1) for i in range(12)]  # file i (from 1) has grey level 10 * i


def test_frame_reader_reads_only_template_files_with_the_list_count_and_offset(tmp_path):
    folder = _frame_folder(tmp_path / "v", LEVELS)
    reader_cls = DECODERS["frames"]
    with reader_cls(folder) as video:  # no count in the list: the img_ files are counted
        assert video.num_frames == 12  # 60 images in the folder, 12 of them RGB frames
        frames = video.decode_array(list(range(12)))
    assert np.abs(frames.reshape(12, -1).mean(1) - LEVELS).max() < 2
    assert (np.abs(frames.astype(int) - FLOW_COLOUR).sum(-1) > 60).all()  # no flow image
    with reader_cls(folder, num_frames_hint=5, offset=4) as video:  # files 5..9
        assert video.num_frames == 5
        frames = video.decode_array([0, 4, 2])
    assert np.abs(frames.reshape(3, -1).mean(1) - [50, 90, 70]).max() < 2


def test_a_missing_frame_file_is_a_decode_error_naming_it(tmp_path):
    folder = _frame_folder(tmp_path / "v", LEVELS, flow=False)
    os.remove(os.path.join(folder, "img_00007.jpg"))
    with DECODERS["frames"](folder, num_frames_hint=12) as video:
        with pytest.raises(DecodeError, match="img_00007.jpg does not exist"):
            video.decode_array([0, 6])
    other = _frame_folder(tmp_path / "w", LEVELS[:3], flow=False, template="{:06d}.jpg")
    with pytest.raises(DecodeError, match=r"no frame file img_00001.jpg .*FRAME_TEMPLATE.*"
                                          r"000001.jpg"):
        DECODERS["frames"](other)
    with DECODERS["frames"](other, template="{:06d}.jpg") as video:
        assert video.num_frames == 3
    # The template's names saved as PNG: read when only that extension matches.
    png = _frame_folder(tmp_path / "p", LEVELS[:4], flow=False, template="img_{:05d}.png")
    with DECODERS["frames"](png) as video:
        assert video.num_frames == 4
        assert abs(float(video.decode_array([3]).mean()) - LEVELS[3]) < 1


def _dataset(anno: str, root: str, **extra):
    from zoo.data import DATASET_REGISTRY

    kwargs = dict(anno_path=anno, data_path=root, split="val", clip_len=4, frame_rate=1,
                  crop_size=20, short_side_size=24, train_short_side_range=[24, 26],
                  random_flip=False, mean=[0.5] * 3, std=[0.25] * 3)
    kwargs.update(extra)
    return DATASET_REGISTRY.get("VideoListDataset")(**kwargs)


def test_dataset_reads_offset_clips_and_stops_early_on_a_template_mismatch(tmp_path):
    root = tmp_path / "frames"
    _frame_folder(root / "long", LEVELS)
    anno = _write(tmp_path / "l.txt", "long 0 4 0\nlong 8 4 1\n")
    ds = _dataset(anno, str(root), decoder="frames")
    # The val clip of 4 frames from a 4-frame video is the whole clip: files 9..12 for video 1.
    clip = ds[1][0] * 0.25 + 0.5  # undo the normalisation: (C, T, H, W) in 0..1
    assert np.abs(clip.mean(dim=(0, 2, 3)).numpy() * 255 - LEVELS[8:12]).max() < 2
    with pytest.raises(AnnotationError, match="frame offset.*CONFIG.DATA.DECODER"):
        _dataset(anno, str(root))  # offsets mean frame folders
    # "auto" (the config's default) reads a folder as "frames" does: offsets and template too.
    clip = _dataset(anno, str(root), decoder="auto")[1][0] * 0.25 + 0.5
    assert np.abs(clip.mean(dim=(0, 2, 3)).numpy() * 255 - LEVELS[8:12]).max() < 2
    _frame_folder(root / "ffmpeg", LEVELS[:4], flow=False, template="{:06d}.jpg")
    anno = _write(tmp_path / "f.txt", "ffmpeg 4 0\n")
    for decoder in ("frames", "auto"):
        with pytest.raises(AnnotationError, match="no frame file img_00001.jpg.*000001.jpg"):
            _dataset(anno, str(root), decoder=decoder)
        ds = _dataset(anno, str(root), decoder=decoder, frame_template="{:06d}.jpg")
        clip = ds[0][0] * 0.25 + 0.5
        assert np.abs(clip.mean(dim=(0, 2, 3)).numpy() * 255 - LEVELS[:4]).max() < 2


# ----------------------------------------------------------------------------- training runs

TRAIN = [
    "DDP_CONFIG.DISTRIBUTED", "False", "MODEL.NAME", "toy_conv3d", "TRAIN.EPOCH_NUM", "1",
    "DATA.NUM_CLASSES", "2", "DATA.CLIP_LEN", "4", "DATA.FRAME_RATE", "1",
    "DATA.CROP_SIZE", "20", "DATA.SHORT_SIDE_SIZE", "24", "DATA.TRAIN_SHORT_SIDE_RANGE", "[24, 26]",
    "DATA.NUM_WORKERS", "0", "TRAIN.BATCH_SIZE", "2", "VAL.BATCH_SIZE", "2", "TRAIN.LR", "0.01",
    "LOG.DISPLAY_FREQ", "1",
]


def _videos(root) -> None:
    for name in ("a.mp4", "b.mp4", "c.mp4", "d.mp4"):
        os.makedirs(root, exist_ok=True)
        write(os.path.join(root, name), ramp_frames(8, 24, 32))


LISTS = {  # list format -> (list text, extra overrides)
    "gluoncv": ("a.mp4 8 0\nb.mp4 -1 1\nc.mp4 8 0\nd.mp4 -1 1\n", []),
    "mmaction2": ("a.mp4 0\nb.mp4 1\nc.mp4 0\nd.mp4 1\n", []),
    "pyslowfast": ("a.mp4,0\nb.mp4,1\nc.mp4,0\nd.mp4,1\n", []),
    "mmaction2_rawframes": ("long 0 6 0\nlong 6 6 1\nlong 2 6 0\nlong 5 6 1\n", []),
}


def _train(tmp_path, toy_model_file, list_format: str, text: str, extra, name: str = "run"):
    data = tmp_path / "data"
    anno = _write(tmp_path / "lists" / "train.txt", text)
    return run_tool("train_ddp.py", [
        "--extra-modules", toy_model_file, *TRAIN, *extra,
        "DATA.LIST_FORMAT", list_format,
        "DATA.TRAIN_ANNO_PATH", anno, "DATA.TRAIN_DATA_PATH", str(data),
        "DATA.VAL_ANNO_PATH", anno, "DATA.VAL_DATA_PATH", str(data),
        "LOG.BASE_PATH", str(tmp_path / "runs"), "LOG.EXP_NAME", name,
    ], timeout=180)


@pytest.mark.slow
@pytest.mark.parametrize("list_format", sorted(LISTS))
def test_each_format_trains_one_epoch(tmp_path, toy_model_file, list_format):
    text, extra = LISTS[list_format]
    if list_format == "mmaction2_rawframes":
        _frame_folder(tmp_path / "data" / "long", LEVELS)  # 4 clips of one long video
    else:
        _videos(tmp_path / "data")
    r = _train(tmp_path, toy_model_file, list_format, text, extra)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [json.loads(ln) for ln in
            (tmp_path / "runs" / "run" / "metrics.jsonl").read_text().splitlines()]
    val = [row for row in rows if row.get("split") == "val"]
    assert val and val[-1]["num_videos"] == 4 and val[-1]["skipped_videos"] == 0
    assert all(row.get("skipped_videos", 0) == 0 for row in rows)


@pytest.mark.slow
@pytest.mark.parametrize("text, match", [
    ("a.mp4 0\nb.mp4 1 0\nc.mp4 0\nd.mp4 1\n", "train.txt:2: .*multi-label.*LIST_FORMAT"),
    ("original_vido_id video_id frame_id path labels\na 1 0 a/000001.jpg 1\n",
     "train.txt:1: .*PySlowFast frame list"),
])
def test_multi_label_and_header_errors_are_one_console_line(tmp_path, toy_model_file, text,
                                                            match):
    _videos(tmp_path / "data")
    r = _train(tmp_path, toy_model_file, "auto", text, [])
    console = r.stdout + r.stderr
    assert r.returncode != 0
    errors = [ln for ln in console.splitlines() if "error:" in ln]
    assert len(errors) == 1, console
    assert "Traceback" not in console
    assert re.search(match, errors[0]), errors[0]


def test_class_count_from_the_list_uses_list_format_and_data_path(tmp_path):
    from zoo.train.finetune import resolve_num_classes

    (tmp_path / "frames" / "sit" / "v 2").mkdir(parents=True)
    anno = _write(tmp_path / "l.txt", "jump/v1 12 0\nsit/v 2 12 4\n")
    base = ["CONFIG.DATA.NUM_CLASSES", "0", "CONFIG.DATA.TRAIN_ANNO_PATH", anno]
    cfg = load_config(None, base + ["CONFIG.DATA.TRAIN_DATA_PATH", str(tmp_path / "frames")])
    assert resolve_num_classes(cfg).CONFIG.DATA.NUM_CLASSES == 5  # labels 0 and 4
    cfg = load_config(None, base + ["CONFIG.DATA.LIST_FORMAT", "gluoncv"])
    assert resolve_num_classes(cfg).CONFIG.DATA.NUM_CLASSES == 5
    with pytest.raises(AnnotationError, match="l.txt:2: .*LIST_FORMAT"):
        resolve_num_classes(load_config(None, base))  # no folder "sit/v 2" beside the list


def test_official_ucf101_and_hmdb51_split_files_read_as_lists_stop(tmp_path):
    # trainlist01.txt's second column is a 1-based class id and an HMDB51 split file's a
    # train/test flag: read as a list's label, every id would be silently wrong.
    (tmp_path / "classInd.txt").write_text("1 ApplyEyeMakeup\n2 Archery\n")
    ucf = tmp_path / "trainlist01.txt"
    ucf.write_text("ApplyEyeMakeup/v_ApplyEyeMakeup_g08_c01.avi 1\n"
                   "Archery/v_Archery_g08_c01.avi 2\n")
    hmdb = tmp_path / "brush_hair_test_split1.txt"
    hmdb.write_text("April_09_brush_hair_u_nm_np1_ba_goo_0.avi 1 \n")
    with pytest.raises(AnnotationError) as err:
        read_annotations(str(ucf))
    assert str(err.value).startswith(
        f"{ucf} is UCF101's official split file (1-based ids from classInd.txt): set "
        "CONFIG.DATA.DATASET 'UCF101Dataset' to read it")
    with pytest.raises(AnnotationError, match="one of HMDB51's official split files .* set "
                                              "CONFIG.DATA.DATASET 'HMDB51Dataset'"):
        read_annotations(str(hmdb))
    # A list of that name without UCF101's classInd.txt beside it is a list like any other.
    (tmp_path / "classInd.txt").unlink()
    assert [r.label for r in read_annotations(str(ucf))] == [1, 2]


def test_a_json_label_file_given_as_a_list_stops_with_one_line(tmp_path):
    path = tmp_path / "something-something-v2-train.json"
    path.write_text('[{"id": "78687", "label": "holding potato next to vicks vaporub bottle"}]')
    with pytest.raises(AnnotationError) as err:
        read_annotations(str(path))
    assert str(err.value).startswith(f"{path} is a JSON file")
