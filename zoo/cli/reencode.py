"""Re-encode videos for fast loading: short side 256, a keyframe every 16 frames, H.264 .mp4.

    zoo-reencode --src /data/kinetics400/raw --dst /data/kinetics400/256
    zoo-reencode --src /data/raw --dst /data/256 --list lists/train.txt --workers 8

Why: a clip is decoded from the keyframe before its first frame, so frequent keyframes bound the
frames decoded but not kept, and 256-pixel frames decode ~10x faster than 1080p ones (MMAction2
reports 0.32 vs 1.42 s/iter for cached frames vs raw videos; most of the gap is this). Measured
on 340x256 H.264 with B-frames: GOP 16 or 32 gave ~1.15x the loader's clips per CPU second of GOP
250, as the reader skips the unreferenced B-frames of the lead-in (docs/benchmarks.md, "The
loader per core"): the short side matters most.

* The folder tree under --src is mirrored under --dst; every output is ``.mp4`` (``a/b.avi`` ->
  ``a/b.mp4``), so two sources that differ only in extension stop the tool with one line before
  anything is written. Hidden files and folders (macOS's ``._`` forks) and --dst itself, when it
  lies inside --src, are passed over. With --list only the list's videos are converted (absolute
  paths must lie under --src), and a copy of the list whose paths point at the new files is
  written to --dst.
* Resumable: an output is written to a temporary name and renamed when complete, so a stopped run
  is simply started again; finished files are skipped.
* Videos that fail (unreadable, no video stream) are listed in ``<dst>/reencode_failed.txt``
  and the others go on; an output that cannot be written (a full disk, an FFmpeg without
  libx264) stops the tool with one line, as every video would fail alike.
* A video stored sideways with a display matrix (a phone's portrait video) is written upright, as
  zoo's readers and players show it.
* Times: every frame keeps its presentation time and the video stream its start offset, so a
  variable-rate video keeps its pauses and a time in seconds (a CSV list's start,end, which the
  --list copy keeps) names the same moment before and after. Sources that store no presentation
  times (AVI, which keeps only the decode order; raw streams; a file whose times are the decode
  order's) are written with their frames evenly spaced at the rate zoo's readers give them.
* Pixels keep their shape: the stored picture is made smaller and keeps its sample aspect ratio
  (a 320x240 picture shown 640x240 is written 320x240 shown 640x240, not resized to square
  pixels), as zoo's readers give the stored pixels. Audio is dropped. Sources with a short side
  at or below the target keep their size.
"""

from __future__ import annotations

import itertools
import os
import sys
from fractions import Fraction
from multiprocessing import Pool
from typing import List, Optional, Tuple

import numpy as np

from ..data.lists.records import VIDEO_EXTS, local_path, reencoded_name
from ..utils.errors import UsageError, UserError, one_line
from .command import command
from .parser import tool_parser


def target_size(height: int, width: int, short_side: int, upscale: bool = False) -> Tuple[int, int]:
    """(height, width) with the short side at ``short_side``, aspect kept, both even."""
    scale = short_side / min(height, width)
    if scale > 1 and not upscale:
        scale = 1.0
    return max(2, round(height * scale / 2) * 2), max(2, round(width * scale / 2) * 2)


class UnreadableSource(Exception):
    """A source video that cannot be re-encoded: it does not open or decode, or holds no frame."""


def reencode(src: str, dst: str, short_side: int = 256, gop: int = 16, crf: int = 23,
             preset: str = "veryfast", threads: int = 0, upscale: bool = False) -> int:
    """Re-encode one video; returns the number of frames written. The output appears only when
    complete (written as ``<dst>.part.mp4`` first). Every frame keeps its presentation time (see
    :class:`_SourceTimes`) and the picture keeps its sample aspect ratio.

    Raises:
        UnreadableSource: ``src`` cannot be opened or decoded (a broken video: the caller lists
            it and goes on).
        UserError: The output cannot be written (no disk space, an FFmpeg without libx264):
            every video would fail alike, so the caller stops.
    """
    settings = {"short_side": short_side, "gop": gop, "crf": crf, "preset": preset,
                "threads": threads, "upscale": upscale}
    part = dst + ".part.mp4"
    with _writing(dst):
        os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    try:
        try:
            frames = _encode(src, dst, settings, even=False)
        except _TimesDoNotRise:
            frames = _encode(src, dst, settings, even=True)
        with _writing(dst):
            os.replace(part, dst)
    finally:
        if os.path.exists(part):
            os.remove(part)
    return frames


class _TimesDoNotRise(Exception):
    """A decoded frame has no presentation time, or one not after the frame before it."""


class _SourceTimes:
    """Each frame's own presentation time and duration, in the source stream's time base: a
    variable-rate video keeps its pauses and the stream keeps its start offset, so a time in
    seconds (a CSV list's start,end) names the same moment in the output."""

    def __init__(self, stream) -> None:
        self.time_base = Fraction(stream.time_base)
        self.rate = stream.average_rate or stream.guessed_rate or 25
        self.last: Optional[int] = None

    def __call__(self, frame, index: int) -> Tuple[int, int]:
        pts = frame.pts
        if pts is None or (self.last is not None and pts <= self.last):
            raise _TimesDoNotRise
        duration = frame.duration or (pts - self.last if self.last is not None else 0)
        self.last = pts
        return pts, duration


class _EvenTimes:
    """Frame ``i`` at ``start + i / rate`` seconds, for sources whose frames carry no
    presentation times (AVI stores only the decode order; raw streams nothing; some muxers write
    decode-order times): the rate is the one zoo's readers give the source."""

    TICKS = 90000  # per second (the MPEG clock): 25, 30 and 30000/1001 fps fall on whole ticks

    def __init__(self, src: str, stream) -> None:
        from ..data.decode.base import DecodeError
        from ..data.decode.pyav import PyAVReader

        try:
            with PyAVReader(src) as video:
                fps = video.fps
        except DecodeError:
            fps = None
        fps = fps or float(stream.average_rate or stream.guessed_rate or 25)
        self.rate = Fraction(fps).limit_denominator(1001)
        self.time_base = Fraction(1, self.TICKS)
        start = stream.start_time if stream.start_time is not None else 0
        self.start = round(start * Fraction(stream.time_base) * self.TICKS)
        self.step = self.TICKS / fps

    def __call__(self, frame, index: int) -> Tuple[int, int]:
        pts = self.start + round(index * self.step)
        return pts, self.start + round((index + 1) * self.step) - pts


def _encode(src: str, dst: str, settings: dict, even: bool) -> int:
    """Writes ``src``'s main video stream to ``<dst>.part.mp4``; returns the number of frames
    written. ``even``: frames evenly spaced (:class:`_EvenTimes`), else at their own times
    (raises :class:`_TimesDoNotRise` where the source's times cannot be kept; AVI is always
    evenly spaced)."""
    import av

    from ..data.decode.pyav_streams import OPEN_OPTIONS, main_video_stream

    source_errors = (av.FFmpegError, OSError, UnicodeDecodeError)
    try:
        inp = av.open(src, **OPEN_OPTIONS)
    except source_errors as e:
        raise UnreadableSource(f"cannot open: {one_line(e)}") from None
    frames = 0
    with inp:
        if not inp.streams.video:
            raise UnreadableSource("no video stream")
        stream = main_video_stream(inp)  # the one zoo's readers read
        stream.thread_type = "AUTO"
        avi = "avi" in inp.format.name.split(",")
        times = _EvenTimes(src, stream) if even or avi else _SourceTimes(stream)
        decoded = _decoded(inp, stream, source_errors)
        first = next(decoded, None)
        if first is None:
            raise UnreadableSource("no frame could be decoded")
        # A phone's portrait video is stored sideways with a display matrix; the output is
        # stored upright (no matrix to lose or to be ignored), as zoo's readers show it.
        turns = int(round((first.rotation or 0) / 90.0)) % 4
        shown = (first.width, first.height) if turns % 2 else (first.height, first.width)
        height, width = target_size(*shown, settings["short_side"], settings["upscale"])
        # Pixels that are not square (a 320x240 picture shown 640x240) stay so: zoo's readers
        # give the stored pixels, players stretch them by this ratio.
        aspect = stream.sample_aspect_ratio or stream.codec_context.sample_aspect_ratio
        if aspect and turns % 2:
            aspect = 1 / aspect
        options = {"crf": str(settings["crf"]), "preset": settings["preset"],
                   "g": str(settings["gop"]), "keyint_min": str(min(settings["gop"], 25))}
        if settings["threads"]:
            options["threads"] = str(settings["threads"])
        with _writing(dst), av.open(dst + ".part.mp4", "w") as out:
            video = out.add_stream("libx264", rate=times.rate, options=options)
            video.height, video.width, video.pix_fmt = height, width, "yuv420p"
            video.codec_context.time_base = times.time_base
            if aspect:
                video.codec_context.sample_aspect_ratio = aspect
            durations = {}
            for frame in itertools.chain([first], decoded):
                pts, duration = times(frame, frames)
                durations[pts] = duration
                small = _upright(frame, turns, height, width)
                small.pts, small.time_base = pts, times.time_base
                for packet in video.encode(small):
                    _mux(out, packet, durations)
                frames += 1
            for packet in video.encode():
                _mux(out, packet, durations)
    return frames


def _mux(out, packet, durations: dict) -> None:
    """Writes ``packet`` with its frame's duration (the last frame's is the container's only
    record of when the video ends)."""
    duration = durations.pop(packet.pts, 0)
    if duration > 0:
        packet.duration = duration
    out.mux(packet)


def _upright(frame, turns: int, height: int, width: int):
    """``frame`` as a player shows it (``turns`` quarter turns counter-clockwise), at
    ``height`` x ``width``, in yuv420p."""
    import av

    if not turns:
        return frame.reformat(width=width, height=height, format="yuv420p", interpolation="AREA")
    stored = (width, height) if turns % 2 else (height, width)
    rgb = frame.reformat(width=stored[1], height=stored[0], format="rgb24",
                         interpolation="AREA").to_ndarray()
    shown = np.ascontiguousarray(np.rot90(rgb, turns))
    return av.VideoFrame.from_ndarray(shown, format="rgb24").reformat(format="yuv420p")


def _decoded(container, stream, source_errors):
    """The frames of ``stream``; a decoding error is the source's (:class:`UnreadableSource`)."""
    frames = container.decode(stream)
    while True:
        try:
            frame = next(frames)
        except StopIteration:
            return
        except source_errors as e:
            raise UnreadableSource(f"cannot decode: {one_line(e)}") from None
        yield frame


class _writing:
    """Turns an error writing ``dst`` (FFmpeg's or the file system's) into one UserError line."""

    def __init__(self, dst: str) -> None:
        self.dst = dst

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, tb) -> bool:
        import av

        unwritable = (av.FFmpegError, OSError, av.codec.codec.UnknownCodecError)
        if isinstance(error, unwritable):
            raise UserError(f"cannot write {self.dst}: {one_line(error)} (every video would "
                            "fail alike: free disk space, or use an FFmpeg with libx264)"
                            ) from None
        return False


def _job(task: Tuple[str, str, dict]) -> Tuple[str, Optional[str]]:
    src, dst, options = task
    try:
        reencode(src, dst, **options)
        return src, None
    except UnreadableSource as e:  # one broken video must not stop the others
        return src, str(e)


def _sources(src_root: str, list_path: str, dst_root: str) -> List[str]:
    """The videos to convert, each once, as paths relative to ``src_root``: the list's (an
    absolute path must lie under ``src_root``), else every visible video under ``src_root``
    except those in ``dst_root`` (outputs are never sources, even when --dst lies inside --src).

    Raises:
        UserError: Two sources would be written to one output (``a/x.avi`` and ``a/x.mp4``), or
            an absolute list path is not under ``src_root``.
    """
    if list_path:
        from ..data.lists.annotations import read_annotations

        rels = [_relative(r.path, src_root, list_path) for r in read_annotations(list_path)]
        rels = list(dict.fromkeys(rels))  # a video listed twice (two time ranges) is one job
        # A video beside a listed one that maps to the same output counts too: run with its own
        # list into this --dst, it would find its .mp4 "already done" and get the other's.
        _refuse_shared_outputs(list(dict.fromkeys(rels + _siblings(rels, src_root))), dst_root)
    else:
        from ..data.lists.sources import visible_walk

        outputs = os.path.realpath(dst_root)
        rels = []
        for dirpath, dirnames, names in visible_walk(src_root):
            dirnames[:] = [d for d in dirnames
                           if os.path.realpath(os.path.join(dirpath, d)) != outputs]
            rels += [os.path.relpath(os.path.join(dirpath, n), src_root) for n in names
                     if n.lower().endswith(VIDEO_EXTS)]
        _refuse_shared_outputs(rels, dst_root)
    return rels


def _siblings(rels: List[str], src_root: str) -> List[str]:
    """The visible videos in the folders of ``rels`` (relative to ``src_root``)."""
    found = []
    for folder in dict.fromkeys(os.path.dirname(r) for r in rels):
        try:
            names = os.listdir(os.path.join(src_root, folder))
        except OSError:
            continue  # a missing video is reported when it is encoded
        found += [os.path.join(folder, n) for n in sorted(names)
                  if not n.startswith(".") and n.lower().endswith(VIDEO_EXTS)]
    return found


def _relative(path: str, src_root: str, list_path: str) -> str:
    """A list's path relative to ``src_root``, normalised (``./a/x.mp4`` is ``a/x.mp4``; a
    Windows list's ``a\\x.mp4`` is ``a/x.mp4`` where only that exists)."""
    if not os.path.isabs(path):
        return os.path.normpath(os.path.relpath(local_path(src_root, path), src_root))
    rel = os.path.relpath(path, src_root)
    if rel == os.pardir or rel.startswith(os.pardir + os.sep):
        raise UserError(f"{list_path} names {path}, which is not under --src {src_root}: give "
                        "the --src that holds the list's videos")
    return rel


def _refuse_shared_outputs(rels: List[str], dst_root: str) -> None:
    """Stops when two sources map to one ``.mp4`` (one would silently replace the other)."""
    first: dict = {}
    shared = []
    for rel in rels:
        kept = first.setdefault(reencoded_name(rel), rel)
        if kept != rel:
            shared.append((kept, rel))
    if shared:
        (a, b), more = shared[0], len(shared) - 1
        raise UserError(
            f"{a} and {b} would both be written to {os.path.join(dst_root, reencoded_name(a))}"
            + (f" ({more} more such pair{'s' if more > 1 else ''})" if more else "")
            + ": every output is .mp4, so rename one of each pair or re-encode them into "
            "separate --dst folders")


def _rewrite_list(list_path: str, src_root: str, dst_root: str) -> str:
    """A copy of a list whose paths end in .mp4, written into ``dst_root``: a text list (any
    LIST_FORMAT auto recognises) is written in the gluoncv format, a CSV list as a CSV. A
    relative path stays relative (to ``dst_root`` now); an absolute one points into
    ``dst_root``. A ``classes.txt`` beside the list (the names of its ids) is copied beside the
    copy."""
    from ..data.lists.annotations import read_annotations

    def new_path(path: str) -> str:
        rel = reencoded_name(_relative(path, src_root, list_path))
        return os.path.join(os.path.abspath(dst_root), rel) if os.path.isabs(path) else rel

    out = os.path.join(dst_root, os.path.basename(list_path))
    records = read_annotations(list_path)
    with open(out, "w", encoding="utf-8", newline="") as f:
        if list_path.lower().endswith(".csv"):
            import csv

            writer = csv.writer(f)
            writer.writerow(["path", "label", "start", "end"])
            for r in records:
                writer.writerow([new_path(r.path), r.label, r.start if r.start >= 0 else "",
                                 r.end if r.end >= 0 else ""])
        else:
            f.writelines(f"{new_path(r.path)} -1 {r.label}\n" for r in records)
    names = _class_names_to_copy(list_path, dst_root)
    if names:
        import shutil

        shutil.copyfile(names, os.path.join(dst_root, "classes.txt"))
    return out


def _class_names_to_copy(list_path: str, dst_root: str) -> Optional[str]:
    """``classes.txt`` beside ``list_path`` (the names of its ids), which the copied list needs
    beside it in ``dst_root``; None when there is none or it is there already.

    Raises:
        UserError: ``dst_root`` holds another ``classes.txt``.
    """
    import filecmp

    names = os.path.join(os.path.dirname(os.path.abspath(list_path)), "classes.txt")
    there = os.path.join(dst_root, "classes.txt")
    if not os.path.isfile(names) or os.path.abspath(names) == os.path.abspath(there):
        return None
    if os.path.isfile(there) and not filecmp.cmp(names, there, shallow=False):
        raise UserError(f"{there} differs from {names}, the class names of the list's ids: move "
                        "it away, or re-encode into another --dst")
    return names


@command
def main(argv: Optional[List[str]] = None) -> int:
    p = tool_parser(
        __doc__.splitlines()[0].strip('"'),
        epilog="With --list, a copy of the list with .mp4 paths is written beside the videos: "
        "a text list in the gluoncv format ('relative/path -1 label', whatever format the "
        "input list had), a CSV list as a CSV with a header (path,label,start,end).",
    )
    p.add_argument("--src", required=True, help="folder with the original videos")
    p.add_argument("--dst", required=True, help="folder for the re-encoded videos")
    p.add_argument("--list", default="", help="only the videos of this annotation list")
    p.add_argument("--short-side", type=int, default=256)
    p.add_argument("--gop", type=int, default=16,
                   help="frames between keyframes. A clip decodes from the keyframe before it: "
                   "on 340x256 H.264 with B-frames, GOP 16 or 32 gave ~1.15x the loader's clips "
                   "per CPU second of GOP 250 (docs/benchmarks.md, 'The loader per core'); more "
                   "on streams without B-frames")
    p.add_argument("--crf", type=int, default=23, help="x264 quality (lower = better, bigger)")
    p.add_argument("--preset", default="veryfast", help="x264 speed preset")
    p.add_argument("--upscale", action="store_true", help="also enlarge smaller videos")
    p.add_argument("--workers", type=int, default=1, help="videos encoded in parallel")
    args = p.parse_args(argv)
    if os.path.realpath(args.src) == os.path.realpath(args.dst):
        raise UsageError(f"--dst {args.dst} is --src: the .mp4 outputs would stand for (or "
                         "beside) their sources; give another folder")
    from tqdm import tqdm

    rels = _sources(args.src, args.list, args.dst)
    if args.list:
        _class_names_to_copy(args.list, args.dst)  # a conflict stops before any encoding
    options = {"short_side": args.short_side, "gop": args.gop, "crf": args.crf,
               "preset": args.preset, "upscale": args.upscale,
               "threads": 1 if args.workers > 1 else 0}
    todo = []
    for rel in rels:
        dst = os.path.join(args.dst, reencoded_name(rel))
        if not os.path.isfile(dst):  # finished earlier: skipped (resumable)
            todo.append((os.path.join(args.src, rel), dst, options))
    os.makedirs(args.dst, exist_ok=True)
    failed = []
    with Pool(args.workers) if args.workers > 1 else _Serial() as pool:
        for src, error in tqdm(pool.imap_unordered(_job, todo), total=len(todo), unit="video",
                               desc="re-encoding", dynamic_ncols=True):
            if error:
                failed.append(f"{os.path.relpath(src, args.src)}\t{error}\n")
    with open(os.path.join(args.dst, "reencode_failed.txt"), "w", encoding="utf-8") as f:
        f.writelines(sorted(failed))
    if args.list:
        print(f"list for the new files: {_rewrite_list(args.list, args.src, args.dst)}")
    print(f"{len(todo) - len(failed)} re-encoded, {len(rels) - len(todo)} already done, "
          f"{len(failed)} failed (see {os.path.join(args.dst, 'reencode_failed.txt')})")
    return 1 if failed else 0


class _Serial:
    """Stands in for a Pool with one worker: runs the jobs here, in order."""

    def __enter__(self) -> "_Serial":
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def imap_unordered(self, fn, items):
        return map(fn, items)


if __name__ == "__main__":
    sys.exit(main())
