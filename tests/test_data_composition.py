"""Datasets as a records provider plus the one ClipDataset: a user's provider and a user's
read_records subclass (the API before providers), each loaded from a file by config alone; typed
settings that refuse a misspelled keyword; and only decode errors counting as bad videos, while a
bug in a transform or a reader surfaces with its traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import traceback

import av
import pytest
import torch
from videos_for_tests import frame_number, ramp_frames, write

from zoo.config import load_config
from zoo.data import DATASET_REGISTRY, build_dataset, transforms
from zoo.data.clip_settings import ClipSettings
from zoo.data.dataset_recipes import DatasetRecipe, VideoListDataset
from zoo.data.decode.registry import PyAVReader
from zoo.data.lists.annotations import AnnotationError
from zoo.data.lists.providers import AnnotationListRecords, ListSource, RecordsProvider
from zoo.data.video_dataset import ClipDataset
from zoo.utils.env import import_extra_modules

MEAN, STD = [0.45, 0.45, 0.45], [0.225, 0.225, 0.225]
SETTINGS = dict(clip_len=4, frame_rate=2, crop_size=28, short_side_size=32,
                train_short_side_range=[32, 36], random_flip=False, mean=MEAN, std=STD)

# A records provider in a user's file: a list of "label<TAB>path" lines, classes in the header.
PROVIDER_FILE = '''
import os
from zoo.data import RecordsProvider, VideoList, VideoRecord, register_dataset


@register_dataset("TabListTestDataset")
class TabList(RecordsProvider):
    def read(self, source):
        with open(source.anno_path) as f:
            classes = f.readline().split()
            rows = [line.rstrip("\\n").split("\\t") for line in f if line.strip()]
        records = [VideoRecord(path, -1, int(label)) for label, path in rows]
        return VideoList(records, classes, root=source.data_path, where=source.anno_path)
'''

# The documented dataset class before records providers: a ClipDataset subclass.
LEGACY_FILE = '''
import os
from zoo.data import DATASET_REGISTRY
from zoo.data.lists.annotations import VideoRecord
from zoo.data.video_dataset import ClipDataset


@DATASET_REGISTRY.register()
class LegacyTestDataset(ClipDataset):
    def read_records(self, anno_path, data_path, split):
        assert self.decoder == "pyav" and self.list_format == "auto"
        names = sorted(n for n in os.listdir(data_path) if n.endswith(".mp4"))
        records = [VideoRecord(n, -1, int(n[1])) for n in names]  # v<label>_<i>.mp4
        return records, ["zero", "one"], data_path
'''


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    """Four 16-frame ramp videos (frame i shows the number i) named v<label>_<i>.mp4."""
    root = tmp_path_factory.mktemp("composed")
    names = [f"v{label}_{i}.mp4" for label in (0, 1) for i in (0, 1)]
    for name in names:
        write(str(root / name), ramp_frames(16))
    return {"root": str(root), "names": names}


def _cfg(anno: str, root: str, dataset: str, module: str):
    cfg = load_config(None, [
        "DATA.DATASET", dataset, "EXTRA_MODULES", f"['{module}']", "DATA.NUM_CLASSES", "2",
        "DATA.CLIP_LEN", "4", "DATA.FRAME_RATE", "2", "DATA.CROP_SIZE", "28",
        "DATA.SHORT_SIDE_SIZE", "32", "DATA.TRAIN_SHORT_SIDE_RANGE", "[32, 36]",
        "DATA.TRAIN_ANNO_PATH", anno, "DATA.TRAIN_DATA_PATH", root,
        "DATA.VAL_ANNO_PATH", anno, "DATA.VAL_DATA_PATH", root, "DATA.DECODER", "pyav",
    ])
    import_extra_modules(cfg.CONFIG.EXTRA_MODULES)  # what the engine does at start
    return cfg


def test_user_records_provider_selected_by_config(videos, tmp_path):
    module = tmp_path / "tab_list.py"
    module.write_text(PROVIDER_FILE)
    anno = tmp_path / "list.tsv"
    picked = [videos["names"][3], videos["names"][0]]
    anno.write_text("zero one\n1\t" + picked[0] + "\n0\t" + picked[1] + "\n")
    ds = build_dataset(_cfg(str(anno), videos["root"], "TabListTestDataset", str(module)), "val")
    assert isinstance(ds, ClipDataset)
    assert ds.paths == [os.path.join(videos["root"], n) for n in picked]
    assert ds.labels == [1, 0] and ds.classes == ["zero", "one"] and ds.anno_path == str(anno)
    clip, label, index, n_bad = ds[0]
    assert clip.shape == (3, 4, 28, 28) and (label, index, n_bad) == (1, 0, 0)
    # Validation takes the centred window: 4 frames 2 apart in 16 -> frames 4, 6, 8, 10.
    shown = clip * torch.tensor(STD).view(3, 1, 1, 1) + torch.tensor(MEAN).view(3, 1, 1, 1)
    numbers = [round(frame_number((shown[:, t].permute(1, 2, 0) * 255).numpy())) for t in range(4)]
    assert numbers == [4, 6, 8, 10]


def test_read_records_subclass_from_a_user_file_still_works(videos, tmp_path):
    module = tmp_path / "legacy.py"
    module.write_text(LEGACY_FILE)
    anno = tmp_path / "unused.txt"
    anno.write_text("")
    cfg = _cfg(str(anno), videos["root"], "LegacyTestDataset", str(module))
    ds = build_dataset(cfg, "train")
    assert type(ds).__name__ == "LegacyTestDataset" and isinstance(ds, ClipDataset)
    assert [os.path.basename(p) for p in ds.paths] == sorted(videos["names"])
    assert ds.labels == [0, 0, 1, 1] and ds.classes == ["zero", "one"]
    assert ds.settings.clip_len == 4 and ds.anno_path == str(anno)
    # Validation with the training classes: checked against its names, not passed to it.
    assert build_dataset(cfg, "val", classes=ds.classes).classes == ["zero", "one"]
    with pytest.raises(AnnotationError, match="class 0 is 'zero' there but 'null'"):
        build_dataset(cfg, "val", classes=["null", "one"])
    clip, label, index, n_bad = ds[(0, 2)]
    assert clip.shape == (3, 4, 28, 28) and (label, index, n_bad) == (1, 2, 0)
    with pytest.raises(TypeError, match="clip_lenn"):
        type(ds)(anno_path=str(anno), data_path=videos["root"], split="val", clip_lenn=4,
                 **{k: v for k, v in SETTINGS.items() if k != "clip_len"})


def test_misspelled_keyword_is_an_error_not_ignored(videos, tmp_path):
    anno = tmp_path / "list.txt"
    anno.write_text("".join(f"{n} 16 {n[1]}\n" for n in videos["names"]))
    common = dict(anno_path=str(anno), data_path=videos["root"], split="val")
    with pytest.raises(TypeError, match="decode_timout"):
        VideoListDataset(**common, **SETTINGS, decode_timout=5)
    with pytest.raises(TypeError, match="clip_length"):
        DatasetRecipe("Broken", AnnotationListRecords(), {"clip_length": 1})
    # The registry entry is exactly the provider composed with ClipDataset.
    direct = ClipDataset(
        AnnotationListRecords().read(ListSource(str(anno), videos["root"], "val")), "val",
        ClipSettings(**SETTINGS),
    )
    built = VideoListDataset(**common, **SETTINGS)
    assert built.paths == direct.paths and torch.equal(built[1][0], direct[1][0])


@pytest.mark.parametrize("split, transform, error", [
    ("train", "train_transform", ZeroDivisionError),
    ("val", "val_transform", TypeError),
    ("test", "test_views", ZeroDivisionError),
])
def test_a_bug_in_a_transform_propagates(videos, tmp_path, monkeypatch, split, transform, error):
    anno = tmp_path / "list.txt"
    anno.write_text("".join(f"{n} 16 {n[1]}\n" for n in videos["names"]))
    ds = VideoListDataset(anno_path=str(anno), data_path=videos["root"], split=split, **SETTINGS)
    opened = []
    init = PyAVReader.__init__

    def counting_init(self, path, *args, **kwargs):
        opened.append(path)
        init(self, path, *args, **kwargs)

    def buggy(*args, **kwargs):
        raise error("bug in the transform")

    monkeypatch.setattr(PyAVReader, "__init__", counting_init)
    monkeypatch.setattr(transforms, transform, buggy)
    with pytest.raises(error, match="bug in the transform") as caught:
        ds[(0, 1)] if split == "train" else ds[1]
    assert len(opened) == 1  # not retried with other videos
    assert ds.bad_videos.bad_indices() == []  # not counted as an unreadable video
    frames = traceback.extract_tb(caught.value.__traceback__)
    assert frames[-1].name == "buggy"  # the traceback reaches the code that raised


def test_reader_errors_count_as_bad_videos_and_reader_bugs_do_not(videos, tmp_path,
                                                                  monkeypatch):
    anno = tmp_path / "list.txt"
    anno.write_text("".join(f"{n} 16 {n[1]}\n" for n in videos["names"]))
    ds = VideoListDataset(anno_path=str(anno), data_path=videos["root"], split="val", **SETTINGS)
    original = PyAVReader.decode
    failures = {
        "v0_0": av.error.InvalidDataError(1094995529, "Invalid data found"),  # FFmpeg's error
        "v0_1": PermissionError(13, "Permission denied"),  # the file system's
    }

    def decode(self, indices):
        for stem, exc in failures.items():
            if stem in self.path:
                raise exc
        return original(self, indices)

    monkeypatch.setattr(PyAVReader, "decode", decode)
    assert ds[0][2:][1] == 1 and ds[1][2:][1] == 1  # replaced
    assert ds[0][2] in (2, 3) and ds[1][2] in (2, 3)
    assert ds.bad_videos.examples(ds.paths) == [
        f"{ds.paths[0]} (other)", f"{ds.paths[1]} (other)"]
    failures["v1_0"] = TypeError("a bug in a reader")  # neither: a bug
    with pytest.raises(TypeError, match="a bug in a reader"):
        ds[2]
    assert not ds.bad_videos.is_bad(2)


def test_records_providers_do_not_import_torch():
    code = ("import sys, zoo.data.lists.providers, zoo.data.lists.sources; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(__file__)))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_every_builtin_dataset_is_a_provider_with_clip_dataset():
    import zoo.data.build  # noqa: F401  (registers the built-in datasets)

    builtin = ["VideoListDataset", "KineticsDataset", "UCF101Dataset", "HMDB51Dataset",
               "VideoFolderDataset", "FrameFolderDataset", "ImageFolderDataset",
               "ImageListDataset"]  # the table of docs/datasets.md
    for name in builtin:
        entry = DATASET_REGISTRY.get(name)
        assert isinstance(entry, DatasetRecipe), name
        assert isinstance(entry.provider, RecordsProvider), name


def test_the_registry_entries_import_from_their_old_module_with_a_warning():
    import zoo.data.dataset_recipes as recipes
    import zoo.data.video_dataset as old

    for name in ("register_dataset", "DatasetRecipe", "VideoListDataset"):
        with pytest.warns(DeprecationWarning, match=f"moved to zoo.data.dataset_recipes.{name}"):
            assert getattr(old, name) is getattr(recipes, name)
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        old.NoSuchName  # noqa: B018
