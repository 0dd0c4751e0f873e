"""The dataset preparation scripts in datasets/ and tools/benchmark_data.py, on generated files
(each script is loaded from its file, as a thin wrapper around the main() in zoo/cli/)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess

import av
import numpy as np
import pytest
from videos_for_tests import ramp_frames, write

from zoo.data.lists.annotations import read_annotations
from zoo.data.lists.sources import kinetics_stem

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _script(rel: str):
    spec = importlib.util.spec_from_file_location(rel.replace("/", "_")[:-3],
                                                  os.path.join(ROOT, rel))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kinetics_lists(tmp_path, capsys, monkeypatch):
    from zoo.data.lists import sources

    opened, walked = [], []  # a Kinetics folder holds ~300k files: walked once for all CSVs
    read, walk = sources.open_text, sources.visible_walk
    monkeypatch.setattr(sources, "open_text", lambda path, *a, **k: opened.append(
        os.path.basename(path)) or read(path, *a, **k))
    monkeypatch.setattr(sources, "visible_walk", lambda root: walked.append(root) or walk(root))
    videos = tmp_path / "videos"
    for label, vid in (("abseiling", "a1"), ("air drumming", "b2")):
        folder = videos / label.replace(" ", "_")
        folder.mkdir(parents=True)
        write(str(folder / f"{kinetics_stem(vid, 3, 13)}.mp4"), ramp_frames(4))
    train = tmp_path / "train.csv"
    train.write_text("label,youtube_id,time_start,time_end,split\nabseiling,a1,3,13,train\n"
                     "air drumming,b2,3,13,train\nair drumming,zz,0,10,train\n")
    val = tmp_path / "validate.csv"
    val.write_text("label,youtube_id,time_start,time_end,split\nair drumming,b2,3,13,val\n")
    out = tmp_path / "lists"
    rc = _script("datasets/build_kinetics_lists.py").main(
        ["--csv", str(train), str(val), "--videos", str(videos), "--out", str(out)])
    assert rc == 0
    assert (out / "classes.txt").read_text() == "abseiling\nair drumming\n"
    assert (out / "train.txt").read_text().splitlines() == [
        "abseiling/a1_000003_000013.mp4 -1 0", "air_drumming/b2_000003_000013.mp4 -1 1"]
    assert (out / "train_missing.txt").read_text() == "zz_000000_000010\n"
    assert [r.label for r in read_annotations(str(out / "validate.txt"))] == [1]
    assert "1 missing" in capsys.readouterr().out
    assert sorted(opened) == ["train.csv", "validate.csv"] and walked == [str(videos)]


def test_ucf101_and_hmdb51_lists(tmp_path):
    ucf = tmp_path / "ucfTrainTestlist"
    ucf.mkdir()
    (ucf / "classInd.txt").write_text("1 Archery\n2 Bowling\n")
    for n in (1, 2, 3):
        (ucf / f"trainlist0{n}.txt").write_text("Archery/v_Archery_g01_c01.avi 1\n"
                                                "Bowling/v_Bowling_g01_c01.avi 2\n")
        (ucf / f"testlist0{n}.txt").write_text("Bowling/v_Bowling_g02_c01.avi\n")
    script = _script("datasets/build_split_lists.py")
    assert script.main(["ucf101", "--splits", str(ucf), "--out", str(tmp_path / "u")]) == 0
    assert (tmp_path / "u" / "val_split2.txt").read_text() == "Bowling/v_Bowling_g02_c01.avi -1 1\n"
    assert (tmp_path / "u" / "classes.txt").read_text() == "Archery\nBowling\n"
    hmdb = tmp_path / "splits"
    hmdb.mkdir()
    (hmdb / "wave_test_split1.txt").write_text("w1.avi 1\nw2.avi 2\nw3.avi 0\n")
    (hmdb / "climb_test_split1.txt").write_text("c1.avi 2\nc2.avi 1\n")
    videos = tmp_path / "hmdb"
    (videos / "climb").mkdir(parents=True)
    (videos / "climb" / "c2.avi").write_bytes(b"x")
    rc = script.main(["hmdb51", "--splits", str(hmdb), "--out", str(tmp_path / "h"),
                      "--split-ids", "1", "--videos", str(videos)])
    assert rc == 0
    assert (tmp_path / "h" / "train_split1.txt").read_text() == "climb/c2.avi -1 0\n"
    assert (tmp_path / "h" / "classes.txt").read_text() == "climb\nwave\n"


def _make_lists(tmp_path, *extra):
    out = tmp_path / "l"
    rc = _script("datasets/build_lists_from_folders.py").main(
        ["--root", str(tmp_path / "v"), "--out", str(out), *extra])
    assert rc == 0
    return [{(r.path, r.label) for r in read_annotations(str(out / split))}
            for split in ("train.txt", "val.txt")]


def _touch(folder, names):
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"x")


def test_lists_from_class_folders(tmp_path):
    _touch(tmp_path / "v", [f"{c}/clip {i}.mp4" for c in ("b", "a") for i in range(40)])
    train, val = _make_lists(tmp_path, "--val-fraction", "0.2")
    assert (tmp_path / "l" / "classes.txt").read_text() == "a\nb\n"
    assert not train & val and len(train | val) == 80 and " " in next(iter(val))[0]
    for label in (0, 1):  # about a fifth of each class (the draws are fixed by path and seed)
        assert 3 <= sum(1 for _, lab in val if lab == label) <= 14
    assert _make_lists(tmp_path, "--val-fraction", "0.2") == [train, val]  # deterministic
    other_train, other_val = _make_lists(tmp_path, "--val-fraction", "0.2", "--seed", "1")
    assert other_val != val


def test_adding_videos_moves_no_other_video_between_train_and_val(tmp_path):
    _touch(tmp_path / "v", [f"{c}/{i:03d}.mp4" for c in ("a", "b", "c") for i in range(30)])
    train, val = _make_lists(tmp_path)
    # More videos in every class, a new class sorted after the others (ids stay), one removed.
    _touch(tmp_path / "v", [f"{c}/{i:03d}.mp4" for c in ("a", "b", "c", "d") for i in range(30, 60)]
           + [f"d/{i:03d}.mp4" for i in range(30)])
    (tmp_path / "v" / "b" / "007.mp4").unlink()
    new_train, new_val = _make_lists(tmp_path)
    old = train | val
    assert {v for v in new_val if v in old} == val - {("b/007.mp4", 1)}
    assert {v for v in new_train if v in old} == train - {("b/007.mp4", 1)}


def test_a_group_stays_on_one_side_and_every_class_gets_both_sides(tmp_path):
    # Three recordings per class, each cut into five clips, and a class of two videos.
    _touch(tmp_path / "v", [f"{c}/cam{k}_clip{j}.mp4" for c in ("a", "b") for k in range(3)
                            for j in range(5)] + ["tiny/x.mp4", "tiny/y.mp4", "solo/z.mp4"])
    train, val = _make_lists(tmp_path, "--group", "^(.*)_clip[0-9]+")
    recording = lambda path: path.split("_clip")[0]  # noqa: E731
    assert not {recording(p) for p, _ in train} & {recording(p) for p, _ in val}
    classes = (tmp_path / "l" / "classes.txt").read_text().split()
    for name in ("a", "b", "tiny"):  # two groups or more: one on each side at least
        label = classes.index(name)
        assert any(lab == label for _, lab in train) and any(lab == label for _, lab in val)
    # Without --group the clips of one recording are split up.
    train, val = _make_lists(tmp_path, "--val-fraction", "0.5")
    assert {recording(p) for p, _ in train} & {recording(p) for p, _ in val}


def test_a_link_and_its_target_stay_on_one_side_and_links_to_nothing_are_left_out(tmp_path,
                                                                                   capsys):
    """A symbolic link beside its target (or another link to it) is one video: it went to train
    while its target went to val. A link to nothing was listed as a video."""
    _touch(tmp_path / "v", [f"a/{i:02d}.mp4" for i in range(30)] + ["b/x.mp4", "b/y.mp4"])
    for i in range(30):
        os.symlink(f"{i:02d}.mp4", tmp_path / "v" / "a" / f"link{i:02d}.mp4")
    os.symlink("gone.mp4", tmp_path / "v" / "b" / "dangling.mp4")
    train, val = _make_lists(tmp_path, "--val-fraction", "0.5")
    real = lambda path: os.path.realpath(tmp_path / "v" / path)  # noqa: E731
    assert not {real(p) for p, _ in train} & {real(p) for p, _ in val}
    assert any("link" in p for p, _ in val) or any("link" in p for p, _ in train)
    assert all("dangling" not in p for p, _ in train | val)
    assert "left out 1 symbolic link(s) to nothing, e.g. b/dangling.mp4" in capsys.readouterr().out


def test_a_group_pattern_that_matches_nothing_or_does_not_compile_stops(tmp_path, capsys):
    _touch(tmp_path / "v", ["a/x.mp4", "b/y.mp4"])
    main = _script("datasets/build_lists_from_folders.py").main
    for pattern, says in (("_clip[0-9]+", "matches none of the 2 video paths (e.g. 'a/x.mp4')"),
                          ("(unclosed", "is not a regular expression")):
        assert main(["--root", str(tmp_path / "v"), "--out", str(tmp_path / "l"),
                     "--group", pattern]) == 2
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1, err
    assert not (tmp_path / "l").exists()  # nothing written


def test_reencode_is_resumable(tmp_path, capsys):
    src = tmp_path / "src"
    (src / "x").mkdir(parents=True)
    write(str(src / "x" / "wide clip.mp4"), ramp_frames(40, 96, 160))
    write(str(src / "small.avi"), ramp_frames(10, 32, 48), codec="mpeg4")
    (src / "broken.mp4").write_text("not a video")
    (src / "list.txt").write_text("x/wide clip.mp4 40 0\nsmall.avi 10 1\nbroken.mp4 5 1\n")
    dst = tmp_path / "dst"
    script = _script("datasets/reencode.py")
    args = ["--src", str(src), "--dst", str(dst), "--short-side", "48", "--gop", "8"]
    assert script.main(args) == 1  # one input is broken
    assert "2 re-encoded, 0 already done, 1 failed" in capsys.readouterr().out
    assert "broken.mp4" in (dst / "reencode_failed.txt").read_text()
    with av.open(str(dst / "x" / "wide clip.mp4")) as container:
        stream = container.streams.video[0]
        assert (stream.codec_context.height, stream.codec_context.width) == (48, 80)
        keys = [i for i, p in enumerate(container.demux(stream)) if p.size and p.is_keyframe]
        assert stream.frames == 40 and len(keys) >= 5  # at most 8 frames between keyframes
    with av.open(str(dst / "small.mp4")) as container:  # smaller than the target: kept
        assert container.streams.video[0].codec_context.height == 32
    os.remove(dst / "small.mp4")
    assert script.main(args + ["--list", str(src / "list.txt")]) == 1
    out = capsys.readouterr().out
    assert "1 re-encoded, 1 already done, 1 failed" in out
    assert (dst / "list.txt").read_text().splitlines()[:2] == ["x/wide clip.mp4 -1 0",
                                                               "small.mp4 -1 1"]
    assert not [n for n in os.listdir(dst) if n.endswith(".part.mp4")]


@pytest.mark.slow
def test_benchmark_script_on_a_tiny_list(tmp_path, capsys):
    for i in range(2):
        write(str(tmp_path / f"v{i}.mp4"), ramp_frames(60, 64, 64), options={"g": "8"})
    (tmp_path / "list.txt").write_text("v0.mp4 60 0\nv1.mp4 -1 1\n")
    report = tmp_path / "bench.json"
    rc = _script("tools/benchmark_data.py").main([
        "--list", str(tmp_path / "list.txt"), "--decoders", "naive", "pyav",
        "--clip-len", "8", "--seconds", "0.2", "--min-clips", "3", "--rounds", "1",
        "--json", str(report)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "vs naive" in out and "pyav" in out
    results = {r["decoder"]: r for r in json.loads(report.read_text())["clips"]}
    for name in ("naive", "pyav"):
        assert results[name]["clips"] >= 3 and results[name]["clips_per_s"] > 0
        assert results[name]["peak_rss_mb"] > 0


def test_reencode_lists_broken_sources_but_stops_on_output_errors_and_bugs(tmp_path, capsys,
                                                                           monkeypatch):
    from zoo.cli import reencode

    src = tmp_path / "src"
    src.mkdir()
    write(str(src / "good.mp4"), ramp_frames(10, 32, 48))
    (src / "broken.mp4").write_text("not a video")
    args = ["--src", str(src), "--dst", str(tmp_path / "dst")]
    real_replace = os.replace

    def disk_full(a, b):
        if str(b).endswith(".mp4"):
            raise OSError(28, "No space left on device")
        return real_replace(a, b)

    monkeypatch.setattr(reencode.os, "replace", disk_full)
    assert reencode.main(args) == 1
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln and "re-encoding:" not in ln]
    assert len(lines) == 1, lines  # one line, not one failure per video
    assert lines[0].startswith("error: cannot write") and "No space left on device" in lines[0]
    monkeypatch.setattr(reencode.os, "replace", real_replace)

    # A bug in zoo's own code (a builtin's TypeError, raised where zoo calls it): its traceback,
    # not a list of "broken" videos.
    import functools
    import operator

    monkeypatch.setattr(reencode, "target_size", functools.partial(operator.add, 1, None))
    assert reencode.main(args) == 1
    err = capsys.readouterr().err
    assert "unexpected TypeError: add expected 2 arguments" in err and "your code" not in err
    assert not (tmp_path / "dst" / "reencode_failed.txt").exists()


@pytest.mark.parametrize("size, expected", [
    ((256, 340), (256, 340)), ((720, 1280), (256, 456)), ((1080, 608), (454, 256)),
    ((121, 161), (120, 160)),  # smaller than the target: kept, made even
])
def test_reencode_target_size(size, expected):
    from zoo.cli.reencode import target_size

    assert target_size(*size, 256) == expected


def test_reencode_passes_over_hidden_files_and_its_own_outputs(tmp_path, capsys):
    from zoo.cli import reencode

    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    write(str(src / "a" / "x.mp4"), ramp_frames(6, 32, 48))
    (src / "a" / "._x.mp4").write_text("macOS resource fork")  # not a video: passed over
    args = ["--src", str(src), "--dst", str(src / "small")]  # the outputs lie inside --src
    for run in range(2):
        assert reencode.main(args) == 0
        done = "1 re-encoded, 0 already done" if run == 0 else "0 re-encoded, 1 already done"
        assert f"{done}, 0 failed" in capsys.readouterr().out
    assert not (src / "small" / "small").exists()  # its own outputs were not re-encoded again


def test_reencode_stops_before_two_sources_share_an_output(tmp_path, capsys):
    from zoo.cli import reencode

    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    write(str(src / "a" / "x.mp4"), ramp_frames(6, 32, 48))
    write(str(src / "a" / "x.avi"), ramp_frames(6, 32, 48), codec="mpeg4")
    assert reencode.main(["--src", str(src), "--dst", str(tmp_path / "dst")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "a/x.avi and a/x.mp4 would both be written to" in err, err
    assert not (tmp_path / "dst").exists()  # nothing written
    assert reencode.main(["--src", str(src), "--dst", str(src / "a" / "..")]) == 2  # --src
    err = capsys.readouterr().err.strip()
    assert "is --src" in err and err.count("\n") == 0, err
    # A list naming one of the two: a later run with the other's list into this --dst would
    # take the first's .mp4 as its own, "already done".
    (tmp_path / "val.txt").write_text("a/x.avi 6 0\n")
    assert reencode.main(["--src", str(src), "--dst", str(tmp_path / "dst"),
                          "--list", str(tmp_path / "val.txt")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "a/x.avi and a/x.mp4 would both be written to" in err, err
    assert not (tmp_path / "dst").exists()


def test_reencode_list_with_absolute_paths_and_repeated_videos(tmp_path, capsys):
    from zoo.cli import reencode

    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    write(str(src / "v.avi"), ramp_frames(6, 32, 48), codec="mpeg4")
    listed = tmp_path / "segments.csv"  # one video, two time ranges
    listed.write_text(f"path,label,start,end\n{src / 'v.avi'},0,0,0.2\n{src / 'v.avi'},1,0.2,0.5\n"
                      "./v.avi,1,0.5,0.6\n")  # the same video, written another way
    args = ["--src", str(src), "--dst", str(dst), "--list", str(listed)]
    assert reencode.main(args) == 0
    assert "1 re-encoded, 0 already done, 0 failed" in capsys.readouterr().out
    assert not (src / "v.mp4").exists()  # written under --dst, not beside the source
    rows = (dst / "segments.csv").read_text().splitlines()[1:]
    assert rows == [f"{dst / 'v.mp4'},0,0.0,0.2", f"{dst / 'v.mp4'},1,0.2,0.5",
                    "v.mp4,1,0.5,0.6"], rows
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text(f"{tmp_path / 'other' / 'v.avi'} 6 0\n")
    assert reencode.main(args[:4] + ["--list", str(elsewhere)]) == 1
    err = capsys.readouterr().err
    assert "is not under --src" in err and err.count("\n") == 1, err


def test_reencode_list_keeps_the_class_names_beside_it(tmp_path, capsys):
    from zoo.cli import reencode

    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    write(str(src / "v.avi"), ramp_frames(6, 32, 48), codec="mpeg4")
    (src / "classes.txt").write_text("archery\nbowling\n")
    (src / "train.csv").write_text("path,label\nv.avi,bowling\n")
    args = ["--src", str(src), "--dst", str(dst), "--list", str(src / "train.csv")]
    assert reencode.main(args) == 0
    capsys.readouterr()
    assert (dst / "classes.txt").read_text() == "archery\nbowling\n"
    assert (dst / "train.csv").read_text().splitlines() == ["path,label,start,end", "v.mp4,1,,"]
    (dst / "classes.txt").write_text("bowling\n")
    assert reencode.main(args) == 1
    err = capsys.readouterr().err
    assert f"{dst / 'classes.txt'} differs from {src / 'classes.txt'}" in err
    assert err.count("\n") == 1


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg command")
def test_reencode_writes_a_phone_portrait_video_upright(tmp_path, capsys):
    """A portrait video stored sideways with a display matrix comes out stored upright: read by
    any reader it shows what the source shows, not the picture turned on its side."""
    import cv2
    import video_corpus as vc

    from zoo.cli import reencode
    from zoo.data.decode.pyav import PyAVReader

    src = tmp_path / "src"
    src.mkdir()
    vc.CASES[[c.name for c in vc.CASES].index("rotate90_mp4")].write(str(src / "phone.mp4"))
    assert reencode.main(["--src", str(src), "--dst", str(tmp_path / "dst"), "--short-side",
                          "48"]) == 0
    with PyAVReader(str(src / "phone.mp4")) as video:
        shown = video.decode_array([0, 20])  # upright, 128 x 96
    with av.open(str(tmp_path / "dst" / "phone.mp4")) as container:
        context = container.streams.video[0].codec_context
        assert (context.height, context.width) == (64, 48)  # stored upright
    with PyAVReader(str(tmp_path / "dst" / "phone.mp4")) as video:
        out = video.decode_array([0, 20])
    assert shown.shape[1:3] == (128, 96) and out.shape[1:3] == (64, 48)
    for a, b in zip(shown, out):
        small = cv2.resize(a, (48, 64), interpolation=cv2.INTER_AREA).astype(np.int16)
        assert np.abs(small - b).mean() < 6 < np.abs(small[::-1, ::-1] - b).mean()


def _probe(path: str) -> dict:
    """ffprobe's view of the first video stream of ``path``: the stream and every frame."""
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
         "stream=width,height,start_time,sample_aspect_ratio:frame=pts_time,sample_aspect_ratio",
         "-of", "json", path], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


@pytest.mark.skipif(shutil.which("ffprobe") is None, reason="needs the ffprobe command")
def test_reencode_keeps_every_frames_time_and_the_stream_start(tmp_path, capsys):
    """A variable-rate video that starts 2 s in and pauses 4.6 s: every frame is shown at the
    same second before and after, so a CSV list's start,end name the same moment in both."""
    from zoo.cli import reencode

    src = tmp_path / "src"
    src.mkdir()
    pts_ms = [2000 + 40 * i for i in range(10)] + [7000 + 40 * i for i in range(10)]
    write(str(src / "pause.mp4"), ramp_frames(20, 32, 48), pts_ms=pts_ms)
    assert reencode.main(["--src", str(src), "--dst", str(tmp_path / "dst")]) == 0
    before, after = _probe(str(src / "pause.mp4")), _probe(str(tmp_path / "dst" / "pause.mp4"))
    times = [float(f["pts_time"]) for f in after["frames"]]
    assert [float(f["pts_time"]) for f in before["frames"]] == pytest.approx(times, abs=1e-3)
    assert times == pytest.approx([t / 1000 for t in pts_ms], abs=1e-3)
    assert float(after["streams"][0]["start_time"]) == pytest.approx(2.0)


@pytest.mark.skipif(shutil.which("ffprobe") is None, reason="needs the ffprobe command")
def test_reencode_keeps_the_sample_aspect_ratio(tmp_path, capsys):
    """Pixels shown twice as wide as high stay so: the output is the stored picture made
    smaller (what zoo's readers give) and players show it at the source's shape."""
    from fractions import Fraction

    from zoo.cli import reencode

    src = tmp_path / "src"
    src.mkdir()
    write(str(src / "wide.mp4"), ramp_frames(6, 64, 96), sample_aspect_ratio=Fraction(2))
    assert reencode.main(["--src", str(src), "--dst", str(tmp_path / "dst"), "--short-side",
                          "32"]) == 0
    stream = _probe(str(src / "wide.mp4"))["streams"][0]
    assert stream["sample_aspect_ratio"] == "2:1"  # the source is what the test means
    after = _probe(str(tmp_path / "dst" / "wide.mp4"))
    stream = after["streams"][0]
    assert (stream["height"], stream["width"], stream.get("sample_aspect_ratio")) == (32, 48, "2:1")
    assert {f["sample_aspect_ratio"] for f in after["frames"]} == {"2:1"}


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg command")
def test_reencode_spaces_frames_evenly_where_the_source_has_no_times(tmp_path, capsys):
    """An MP4 stream-copied to AVI (its frames two ticks of a 50 fps clock apart) and an MKV
    whose times are the decode order's carry no presentation times to keep: their frames come
    out in order, one per 1/25 s, the rate zoo's readers give the source."""
    import video_corpus as vc

    from zoo.cli import reencode

    src = tmp_path / "src"
    src.mkdir()
    for name in ("h264_avi_remuxed", "h264_mkv_broken_pts"):
        case = vc.CASES[vc.CASE_NAMES.index(name)]
        case.write(str(src / f"{name}{os.path.splitext(case.filename)[1]}"))
    assert reencode.main(["--src", str(src), "--dst", str(tmp_path / "dst")]) == 0
    for name in ("h264_avi_remuxed", "h264_mkv_broken_pts"):
        out = str(tmp_path / "dst" / f"{name}.mp4")
        with av.open(out) as container:
            times = [f.time for f in container.decode(video=0)]
        assert times == pytest.approx([i / vc.FPS for i in range(vc.NUM)], abs=1e-3), name
        numbers = [vc.read_number(image) for image in vc.reference_frames(out)]
        assert numbers == list(range(vc.NUM)), name


def test_kinetics_videos_named_by_yt_dlp_are_found(tmp_path):
    """yt-dlp's default name, '<title> [<id>].<ext>', is an untrimmed video of that id."""
    from zoo.data.lists.sources import kinetics_records

    videos = tmp_path / "videos"
    videos.mkdir()
    write(str(videos / "Learn to abseil! [a1b2c3d4e5F].webm"), ramp_frames(4), codec="libvpx")
    write(str(videos / "not an id [short].mp4"), ramp_frames(4))
    csv_path = tmp_path / "train.csv"
    csv_path.write_text("label,youtube_id,time_start,time_end,split\n"
                        "abseiling,a1b2c3d4e5F,3,13,train\nabseiling,short,0,10,train\n")
    records, classes, missing = kinetics_records(str(csv_path), str(videos))
    assert [(r.path, r.start, r.end) for r in records] == [
        ("Learn to abseil! [a1b2c3d4e5F].webm", 3.0, 13.0)]
    assert missing == ["short_000000_000010"]


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


def test_kinetics_lists_stop_before_writing_over_an_input_csv(tmp_path, capsys):
    """Untrimmed videos give '<out>/<csv name>.csv': with --out the CSVs' folder, the CSV."""
    k400 = tmp_path / "k400"
    (k400 / "videos").mkdir(parents=True)
    write(str(k400 / "videos" / "a1.mp4"), ramp_frames(4))
    text = "label,youtube_id,time_start,time_end,split\nabseiling,a1,0,1,train\n"
    (k400 / "train.csv").write_text(text)
    script = _script("datasets/build_kinetics_lists.py")
    for out in (str(k400), str(k400 / "videos" / "..")):
        rc = script.main(["--csv", str(k400 / "train.csv"), "--videos", str(k400 / "videos"),
                          "--out", out])
        assert rc != 0
        err = _error_line(capsys)
        assert "train.csv" in err and "--out" in err
        assert (k400 / "train.csv").read_text() == text
        assert sorted(os.listdir(k400)) == ["train.csv", "videos"]  # nothing written
    out = tmp_path / "lists"
    assert script.main(["--csv", str(k400 / "train.csv"), "--videos", str(k400 / "videos"),
                        "--out", str(out)]) == 0
    assert (out / "train.csv").read_text().splitlines() == ["path,label,start,end",
                                                           "a1.mp4,0,0.0,1.0"]


def test_kinetics_csv_with_spaces_after_the_commas(tmp_path):
    """A header and rows written 'label, youtube_id, ...' (pandas' sep=', ', a hand edit)."""
    from zoo.data.lists.sources import kinetics_records

    videos = tmp_path / "videos"
    videos.mkdir()
    write(str(videos / f"{kinetics_stem('a1', 3, 13)}.mp4"), ramp_frames(4))
    write(str(videos / "b2.mp4"), ramp_frames(4))
    csv_path = tmp_path / "train.csv"
    csv_path.write_text("label, youtube_id, time_start, time_end, split\n"
                        "abseiling, a1, 3, 13, train\ntai chi, b2, 25, 35, train\n")
    records, classes, missing = kinetics_records(str(csv_path), str(videos))
    assert classes == ["abseiling", "tai chi"] and missing == []
    assert [(r.path, r.label, r.start) for r in records] == [
        ("a1_000003_000013.mp4", 0, -1.0), ("b2.mp4", 1, 25.0)]
    out = tmp_path / "lists"
    rc = _script("datasets/build_kinetics_lists.py").main(
        ["--csv", str(csv_path), "--videos", str(videos), "--out", str(out)])
    assert rc == 0
    assert (out / "classes.txt").read_text() == "abseiling\ntai chi\n"
    assert (out / "train.csv").read_text().splitlines()[1:] == [
        "a1_000003_000013.mp4,0,,", "b2.mp4,1,25.0,35.0"]


def test_kinetics_lists_stop_when_no_video_has_a_name_of_the_csv(tmp_path, capsys):
    """piaxar/kinetics-downloader names a clip '<id>_<start>_<end - start>.mp4': none is found,
    which stops with one line instead of writing empty lists."""
    videos = tmp_path / "videos" / "abseiling"
    videos.mkdir(parents=True)
    for vid in ("a1", "b2"):
        (videos / f"{vid}_3_10.mp4").write_bytes(b"x")
    csv_path = tmp_path / "train.csv"
    csv_path.write_text("label,youtube_id,time_start,time_end,split\n"
                        "abseiling,a1,3,13,train\nabseiling,b2,3,13,train\n")
    out = tmp_path / "lists"
    script = _script("datasets/build_kinetics_lists.py")
    assert script.main(["--csv", str(csv_path), "--videos", str(tmp_path / "videos"),
                        "--out", str(out)]) != 0
    err = _error_line(capsys)
    assert str(tmp_path / "videos") in err and "abseiling/a1_3_10.mp4" in err
    assert "<youtube_id>_<start:06d>_<end:06d>" in err and "a1_000003_000013.mp4" in err
    assert not out.exists()
    (videos / "a1_3_10.mp4").rename(videos / "a1_000003_000013.mp4")  # one found: a list
    assert script.main(["--csv", str(csv_path), "--videos", str(tmp_path / "videos"),
                        "--out", str(out)]) == 0
    assert (out / "train_missing.txt").read_text() == "b2_000003_000013\n"


def test_split_lists_find_the_mp4_files_zoo_reencode_wrote(tmp_path, capsys):
    ucf = tmp_path / "ucfTrainTestlist"
    ucf.mkdir()
    (ucf / "classInd.txt").write_text("1 Archery\n2 Bowling\n")
    (ucf / "trainlist01.txt").write_text("Archery/v_Archery_g01_c01.avi 1\n"
                                         "Bowling/v_Bowling_g01_c01.avi 2\n"
                                         "Bowling/v_Bowling_g03_c01.avi 2\n")
    (ucf / "testlist01.txt").write_text("Bowling/v_Bowling_g02_c01.avi\n")
    reencoded = tmp_path / "ucf_256"
    _touch(reencoded, ["Archery/v_Archery_g01_c01.mp4", "Bowling/v_Bowling_g01_c01.mp4",
                       "Bowling/v_Bowling_g02_c01.mp4"])
    script = _script("datasets/build_split_lists.py")
    out = tmp_path / "lists"
    assert script.main(["ucf101", "--splits", str(ucf), "--split-ids", "1", "--out", str(out),
                        "--videos", str(reencoded)]) == 0
    assert (out / "train_split1.txt").read_text() == ("Archery/v_Archery_g01_c01.mp4 -1 0\n"
                                                      "Bowling/v_Bowling_g01_c01.mp4 -1 1\n")
    assert (out / "val_split1.txt").read_text() == "Bowling/v_Bowling_g02_c01.mp4 -1 1\n"
    assert "1 missing videos left out" in capsys.readouterr().out
    # A folder with none of the split's videos stops with one line, and writes nothing.
    other = tmp_path / "other"
    _touch(other, ["clips/x.mkv"])
    assert script.main(["ucf101", "--splits", str(ucf), "--split-ids", "1", "--out",
                        str(tmp_path / "l2"), "--videos", str(other)]) != 0
    err = _error_line(capsys)
    assert str(other) in err and "clips/x.mkv" in err and "Archery/v_Archery_g01_c01.avi" in err
    assert not (tmp_path / "l2").exists()
