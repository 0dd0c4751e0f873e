"""A conformance corpus of small videos, each made the way real files are made, and their reference.

Every case is one short clip (48 frames at 25 fps, mostly 128x96) in one container/codec shape
that has tripped decoders up: B-frames and open GOPs, Xvid's packed B-frames in AVI, AVI's missing
timestamps, a raw H.264 stream with none at all, an MKV whose timestamps are decode-order copies,
variable frame rate, an audio stream, 10-bit, an odd size, a rotation tag. The files come from three
tools, as a user's files do: PyAV's encoders, the ``ffmpeg`` command (Debian's, for what PyAV does
not write: Xvid, AVI, raw streams, rotation tags, audio), and OpenCV's ``VideoWriter``.

Every frame says its own number: eight large black/white blocks hold the number in binary (a
neighbouring frame always differs in at least one block, a mean difference of ~25 grey levels) and a
bar moves across the picture. :func:`read_number` reads it back, so the reference itself is checked
against what was encoded.

The reference (:func:`reference_frames`) is a plain sequential decode with PyAV, every frame from
the start, no seeking, no timestamps used: frame ``i`` is the ``i``-th picture the decoder outputs,
turned upright by the stream's display matrix the way players do. It shares no code with zoo.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Dict, List, Optional, Sequence

import av
import numpy as np

FPS = 25
NUM = 48  # frames per clip
SIZE = (96, 128)  # (height, width)
BITS = 8  # blocks holding the frame number
_SEED_PTS = [0, 40, 80, 100, 180, 190, 260, 300, 420, 430]  # VFR gaps (ms), repeated


def frames(num: int = NUM, size=SIZE, first: int = 0) -> np.ndarray:
    """uint8 RGB ``(num, H, W, 3)``: frame ``t`` shows ``first + t`` (mod 256) in binary blocks
    and a moving bar."""
    h, w = size
    out = np.zeros((num, h, w, 3), np.uint8)
    top = h * 2 // 3  # blocks in the top two thirds, the bar below
    cols = BITS // 2
    for t in range(num):
        number = (first + t) % (1 << BITS)
        for b in range(BITS):
            r, c = divmod(b, cols)
            y0, y1 = r * top // 2, (r + 1) * top // 2
            x0, x1 = c * w // cols, (c + 1) * w // cols
            out[t, y0:y1, x0:x1] = 235 if (number >> b) & 1 else 20
        out[t, top:, :] = (40, 90, 160)
        x = (t * 5) % max(w - 8, 1)
        out[t, top:, x:x + 8] = (250, 200, 40)
    return out


def read_number(image: np.ndarray) -> int:
    """The frame number :func:`frames` drew into an (upright) RGB image."""
    h, w = image.shape[:2]
    top = h * 2 // 3
    cols = BITS // 2
    n = 0
    for b in range(BITS):
        r, c = divmod(b, cols)
        y0, y1 = r * top // 2, (r + 1) * top // 2
        x0, x1 = c * w // cols, (c + 1) * w // cols
        # The centre of the block: codec ringing at the edges stays out.
        dy, dx = (y1 - y0) // 4, (x1 - x0) // 4
        block = image[y0 + dy:y1 - dy, x0 + dx:x1 - dx]
        if block.mean() > 128:
            n |= 1 << b
    return n


# ----------------------------------------------------------------------------- writers


def _pyav(path: str, codec: str, pix_fmt: str = "yuv420p", options=None, pts_ms=None,
          size=SIZE, tag: str = "") -> None:
    """Encode with PyAV (``pts_ms``: per-frame times for variable frame rate)."""
    data = frames(size=size)
    with av.open(path, "w") as container:
        stream = container.add_stream(codec, rate=FPS, options=dict(options or {}))
        stream.height, stream.width = size
        stream.pix_fmt = pix_fmt
        if tag:
            stream.codec_context.codec_tag = tag
        if pts_ms is not None:
            stream.codec_context.time_base = Fraction(1, 1000)
        for i, image in enumerate(data):
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            if pts_ms is not None:
                frame.pts = int(pts_ms[i])
                frame.time_base = Fraction(1, 1000)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def _ffmpeg(path: str, args: List[str], audio: bool = False, size=SIZE, post=(),
            data: Optional[np.ndarray] = None) -> None:
    """Pipe the frames (``data``, else :func:`frames`) as raw RGB into the ``ffmpeg`` command with
    ``args`` (+ a sine track)."""
    h, w = size
    cmd = ["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "rawvideo",
           "-pix_fmt", "rgb24", "-s", f"{w}x{h}", "-r", str(FPS), "-i", "-"]
    if audio:
        cmd += ["-f", "lavfi", "-i", f"sine=frequency=440:sample_rate=22050:duration={NUM / FPS}"]
    cmd += ["-map", "0:v"] + (["-map", "1:a"] if audio else []) + list(args) + [path]
    data = frames(size=size) if data is None else data
    subprocess.run(cmd, input=data.tobytes(), check=True, capture_output=True)
    for step in post:
        step(path)


def _opencv(path: str, fourcc: str) -> None:
    import cv2

    h, w = SIZE
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*fourcc), FPS, (w, h))
    if not writer.isOpened():
        raise RuntimeError(f"OpenCV cannot write {fourcc} to {path}")
    for image in frames():
        writer.write(np.ascontiguousarray(image[:, :, ::-1]))
    writer.release()


def _vfr_pts() -> List[int]:
    """Irregular frame times (ms): gaps of 10 to 120 ms."""
    gaps = np.diff(_SEED_PTS)
    out, t = [], 0
    for i in range(NUM):
        out.append(t)
        t += int(gaps[i % len(gaps)])
    return out


_X264 = {"preset": "ultrafast", "crf": "16", "g": "12", "bf": "3",
         "x264-params": "open-gop=1:keyint=12:min-keyint=12:scenecut=0:bframes=3:b-adapt=0"}
_X264_CLI = ["-c:v", "libx264", "-preset", "ultrafast", "-crf", "16", "-g", "12", "-bf", "3",
             "-x264-params", "open-gop=1:keyint=12:min-keyint=12:scenecut=0:b-adapt=0",
             "-pix_fmt", "yuv420p"]
_X265_PARAMS = "keyint=12:min-keyint=12:scenecut=0:bframes=3:log-level=error:open-gop=1"


def _remux(path: str, args: List[str], input_args: Sequence[str] = ()) -> None:
    """Stream-copy ``path`` through the ``ffmpeg`` command with ``args`` (in place);
    ``input_args`` go before its ``-i``."""
    source = path + ".src" + os.path.splitext(path)[1]
    os.replace(path, source)
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", *input_args, "-i", source,
                    "-map", "0", "-c", "copy"] + args + [path], check=True, capture_output=True)
    os.remove(source)


def _has_display_rotation() -> bool:
    """Whether the ``ffmpeg`` command has the ``-display_rotation`` input option."""
    out = subprocess.run(["ffmpeg", "-hide_banner", "-h", "full"], capture_output=True, text=True)
    return "-display_rotation" in out.stdout


def _broken_pts(path: str) -> None:
    """A file whose timestamps are the decode-order ones (a muxer bug seen in the wild): the B-frame
    stream's pictures carry the wrong times, so no timestamp can say a frame's position."""
    # From 0: negative times would make the MP4 muxer write an edit list that hides frames.
    zeroed = "setts=pts=DTS-STARTDTS:dts=DTS-STARTDTS"
    _ffmpeg(path, _X264_CLI, post=[lambda q: _remux(q, ["-bsf:v", zeroed])])


def _avi_from_mp4(path: str) -> None:
    """H.264 with B-frames written to MP4, then stream-copied to AVI (as people convert files): the
    AVI header then counts empty chunks, twice the real frames."""
    mp4 = path + ".mp4"
    _ffmpeg(mp4, _X264_CLI)
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-i", mp4, "-c", "copy",
                    path], check=True, capture_output=True)
    os.remove(mp4)


def _avi_without_index(path: str) -> None:
    """MPEG-4 in AVI whose writer stopped before the index at the end (a camera that lost power, a
    killed capture): every frame is there, the header still counts them, the index is gone."""
    _ffmpeg(path, ["-c:v", "mpeg4", "-q:v", "2", "-bf", "2", "-g", "12"])
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:data.rindex(b"idx1")])


def _live_mkv(path: str) -> None:
    """H.264 in Matroska written to a pipe, as a live recorder (OBS, a browser's MediaRecorder)
    writes it: no duration, no cues, no frame count."""
    source = path + ".src.mkv"
    _ffmpeg(source, _X264_CLI)
    with open(path, "wb") as out:
        subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-i", source,
                        "-c", "copy", "-f", "matroska", "-"], check=True, stdout=out)
    os.remove(source)


def _ts_cut_mid_gop(path: str) -> None:
    """H.264 in MPEG-TS cut in the middle of a GOP (a recording joined late, a stream dump): the
    file starts with 6 frames' packets that no decoder can show, then the keyframe whose frame
    carries 0."""
    _ffmpeg(path, ["-c:v", "libx264", "-preset", "ultrafast", "-crf", "16", "-g", "12",
                   "-bf", "0", "-pix_fmt", "yuv420p", "-f", "mpegts"],
            data=frames(NUM + 24, first=-24))
    with av.open(path) as container:
        stream = container.streams.video[0]
        starts = [p.pos for p in container.demux(stream) if p.size]
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[starts[18]:])  # frame 18 of GOPs at 0, 12, 24


def _cut_copy(path: str, cut: int = 20) -> None:
    """The usual trim of a downloaded video, ``ffmpeg -ss <t> -i in.mp4 -c copy out.mp4``: the
    packets from the keyframe before the cut are copied (frames 12-19 of the source here) and an
    MP4 edit list hides them; the sample table still counts them. The source's frames are drawn
    so that the first one shown after the cut carries 0."""
    source = path + ".src.mp4"
    _ffmpeg(source, _X264_CLI, data=frames(NUM + cut, first=-cut))
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-ss", str(cut / FPS),
                    "-i", source, "-c", "copy", path], check=True, capture_output=True)
    os.remove(source)


def _still_first(path: str) -> None:
    """H.264 in Matroska after a one-frame still image stream (MJPEG), as a tool that adds a
    thumbnail as a stream writes it: the first video stream is not the one a player shows (the
    H.264 one carries the "default" flag, the still does not)."""
    video = path + ".video.mkv"
    _ffmpeg(video, _X264_CLI)
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                    "color=c=red:s=64x48:d=0.04:r=25", "-i", video, "-map", "0:v", "-map", "1:v",
                    "-c:v:0", "mjpeg", "-c:v:1", "copy", "-disposition:v:0", "0",
                    "-disposition:v:1", "default", path], check=True, capture_output=True)
    os.remove(video)


def _rotated(degrees: int, audio: bool = False) -> Callable[[str], None]:
    """H.264 tagged the way phones tag it: a display matrix (written by a stream copy, as the
    ``rotate`` metadata is only turned into one there)."""
    extra = ["-c:a", "aac"] if audio else []

    def tag(path: str) -> None:
        # FFmpeg 7 no longer turns the rotate tag into a display matrix; its -display_rotation
        # (FFmpeg 6+) writes one and counts counter-clockwise, the tag clockwise.
        if _has_display_rotation():
            _remux(path, [], input_args=["-display_rotation:v:0", str(degrees)])
        else:
            _remux(path, ["-metadata:s:v", f"rotate={degrees}"])

    return lambda p: _ffmpeg(p, _X264_CLI + extra, audio=audio, post=[tag])


@dataclass
class Case:
    """One corpus file: its name (the pytest id), file name, writer and what it exercises."""

    name: str
    filename: str
    write: Callable[[str], None]
    tool: str  # which program wrote it
    about: str
    needs: List[str] = field(default_factory=list)  # encoders that must exist (ffmpeg -encoders)
    # Degrees counter-clockwise a player turns the picture (FFmpeg's display-matrix convention).
    rotation: int = 0


CASES: List[Case] = [
    Case("h264_mp4", "h264.mp4", lambda p: _pyav(p, "libx264", options=_X264), "pyav",
         "H.264, 3 B-frames, open GOP, keyframe every 12"),
    Case("h264_mov_audio", "h264_audio.mov",
         lambda p: _ffmpeg(p, _X264_CLI + ["-c:a", "aac"], audio=True), "ffmpeg",
         "H.264 with B-frames and an interleaved AAC track, QuickTime"),
    Case("h264_mkv", "h264.mkv", lambda p: _pyav(p, "libx264", options=_X264), "pyav",
         "H.264 with B-frames in Matroska (no frame count stored)"),
    Case("h264_mkv_live", "live.mkv", _live_mkv, "ffmpeg",
         "H.264 in Matroska written to a pipe (live recorders): no duration, no cues"),
    Case("hevc_mp4", "hevc.mp4",
         lambda p: _pyav(p, "libx265", options={"preset": "ultrafast", "crf": "18",
                                                "x265-params": _X265_PARAMS}, tag="hvc1"),
         "pyav", "HEVC with B-frames, open GOP (CRA)"),
    Case("hevc_10bit_mkv", "hevc10.mkv",
         lambda p: _ffmpeg(p, ["-c:v", "libx265", "-preset", "ultrafast", "-crf", "18",
                               "-pix_fmt", "yuv420p10le", "-x265-params", _X265_PARAMS]),
         "ffmpeg", "HEVC Main10, yuv420p10le"),
    Case("av1_mp4", "av1.mp4",
         lambda p: _ffmpeg(p, ["-c:v", "libsvtav1", "-preset", "12", "-crf", "20", "-g", "12",
                               "-svtav1-params", "keyint=12:scd=0", "-pix_fmt", "yuv420p"]),
         "ffmpeg", "AV1 in MP4 (SVT-AV1), the codec of many YouTube downloads",
         needs=["libsvtav1"]),
    Case("vp8_webm", "vp8.webm",
         lambda p: _pyav(p, "libvpx", options={"crf": "8", "b": "2M", "g": "12"}), "pyav",
         "VP8 in WebM (alt-ref frames)"),
    Case("vp9_webm_audio", "vp9_audio.webm",
         lambda p: _ffmpeg(p, ["-c:v", "libvpx-vp9", "-crf", "20", "-b:v", "0", "-g", "12",
                               "-deadline", "realtime", "-cpu-used", "8", "-c:a", "libopus"],
                           audio=True),
         "ffmpeg", "VP9 (superframes) with an Opus track in WebM", ["libvpx-vp9", "libopus"]),
    Case("mpeg4_xvid_avi_audio", "mpeg4_audio.avi",
         lambda p: _ffmpeg(p, ["-c:v", "mpeg4", "-q:v", "2", "-bf", "2", "-g", "12",
                               "-vtag", "XVID", "-c:a", "libmp3lame"], audio=True),
         "ffmpeg", "MPEG-4 Part 2 with 2 B-frames tagged XVID, MP3 track, AVI (no pts)",
         ["libmp3lame"]),
    Case("xvid_packed_avi", "xvid_packed.avi",
         lambda p: _ffmpeg(p, ["-c:v", "libxvid", "-q:v", "2", "-bf", "2", "-g", "12"]),
         "ffmpeg", "libxvid with B-frames: packed bitstream (P+B in one chunk, N-VOPs) as "
         "Xvid/DivX write it", ["libxvid"]),
    Case("h264_avi", "h264.avi", lambda p: _ffmpeg(p, _X264_CLI), "ffmpeg",
         "H.264 with B-frames in AVI (no pts, only decode order)"),
    Case("h264_avi_remuxed", "h264_remuxed.avi", _avi_from_mp4, "ffmpeg",
         "H.264 MP4 stream-copied to AVI (header counts empty chunks)"),
    Case("mpeg4_avi_no_index", "no_index.avi", _avi_without_index, "ffmpeg",
         "MPEG-4 in AVI cut before its index (a recording that stopped)"),
    Case("h264_flv", "h264.flv", lambda p: _ffmpeg(p, _X264_CLI + ["-f", "flv"]), "ffmpeg",
         "H.264 with B-frames in FLV (its index lists keyframes only, no frame count)"),
    Case("mjpeg_avi", "mjpeg.avi", lambda p: _opencv(p, "MJPG"), "opencv",
         "MJPEG written by OpenCV's VideoWriter"),
    Case("mp4v_mp4", "mp4v.mp4", lambda p: _opencv(p, "mp4v"), "opencv",
         "MPEG-4 Part 2 written by OpenCV's VideoWriter"),
    Case("vfr_mp4", "vfr.mp4",
         lambda p: _pyav(p, "libx264", options=_X264, pts_ms=_vfr_pts()), "pyav",
         "variable frame rate (10-120 ms gaps), B-frames"),
    Case("vfr_mkv", "vfr.mkv",
         lambda p: _pyav(p, "libx264", options=_X264, pts_ms=_vfr_pts()), "pyav",
         "variable frame rate in Matroska"),
    Case("h264_mp4_cut_copy", "cut_copy.mp4", _cut_copy, "ffmpeg",
         "MP4 cut without decoding (ffmpeg -ss -c copy): an edit list hides the frames from the "
         "keyframe before the cut"),
    Case("h264_mkv_still_first", "still_first.mkv", _still_first, "ffmpeg",
         "H.264 in Matroska behind a one-frame still image stream (MJPEG) that comes first"),
    Case("h264_ts_cut", "cut.ts", _ts_cut_mid_gop, "ffmpeg",
         "H.264 in MPEG-TS cut mid-GOP (packets before the first keyframe show nothing)"),
    Case("h264_raw", "raw.h264", lambda p: _ffmpeg(p, _X264_CLI + ["-f", "h264"]), "ffmpeg",
         "raw H.264 elementary stream: no container, no timestamps"),
    Case("h264_mkv_broken_pts", "broken_pts.mkv", _broken_pts, "ffmpeg",
         "H.264 with B-frames in MKV whose pts are the decode-order times"),
    Case("h264_mp4_broken_pts", "broken_pts.mp4", _broken_pts, "ffmpeg",
         "H.264 with B-frames in MP4 whose pts are the decode-order times (no ctts)"),
    Case("odd_97x61_mp4", "odd.mp4",
         lambda p: _pyav(p, "libx264", pix_fmt="yuv444p", options=_X264, size=(61, 97)), "pyav",
         "odd size 97x61 (H.264 4:4:4)"),
    Case("odd_97x61_webm", "odd.webm",
         lambda p: _ffmpeg(p, ["-c:v", "libvpx-vp9", "-crf", "20", "-b:v", "0", "-g", "12",
                               "-deadline", "realtime", "-cpu-used", "8"], size=(61, 97)),
         "ffmpeg", "odd size 97x61, VP9 4:2:0"),
    Case("rotate90_mp4", "rotate90.mp4", _rotated(90), "ffmpeg",
         "display matrix: 90 degrees (rotate=90, as a phone writes it)", rotation=90),
    Case("rotate270_mov_audio", "rotate270.mov", _rotated(270, audio=True), "ffmpeg",
         "display matrix: 270 degrees, with an AAC track", rotation=-90),
]
CASE_NAMES = [c.name for c in CASES]


def missing_tools(case: Case) -> str:
    """Why ``case`` cannot be built here ('' when it can)."""
    if case.tool == "ffmpeg" and shutil.which("ffmpeg") is None:
        return "the ffmpeg command is not installed (apt-get install ffmpeg)"
    if case.needs:
        listed = subprocess.run(["ffmpeg", "-hide_banner", "-encoders"], capture_output=True,
                                text=True).stdout
        lacking = [n for n in case.needs if f" {n} " not in listed]
        if lacking:
            return f"this ffmpeg lacks the encoders {lacking}"
    return ""


def build(folder: str, names: Optional[List[str]] = None) -> Dict[str, str]:
    """Write the corpus into ``folder``: name -> path (cases that cannot be built are left out)."""
    paths = {}
    for case in CASES:
        if names is not None and case.name not in names:
            continue
        if missing_tools(case):
            continue
        path = os.path.join(folder, case.filename)
        if not os.path.exists(path):
            case.write(path)
        paths[case.name] = path
    return paths


# ----------------------------------------------------------------------------- reference


def upright(image: np.ndarray, ccw_degrees: float) -> np.ndarray:
    """Turn a decoded picture the way a player does, given the display matrix's rotation (degrees
    counter-clockwise, as FFmpeg's ``av_display_rotation_get`` reports it)."""
    k = int(round(ccw_degrees / 90.0)) % 4
    return np.ascontiguousarray(np.rot90(image, k)) if k else image


def reference_frames(path: str) -> np.ndarray:
    """Every frame of ``path`` from a sequential PyAV decode, RGB, upright."""
    out = []
    with av.open(path) as container:
        stream = container.streams.best("video")  # what a player shows: no still image
        stream.thread_type = "NONE"
        for frame in container.decode(stream):
            out.append(upright(frame.to_ndarray(format="rgb24"), frame.rotation or 0))
    return np.stack(out)


@functools.lru_cache(maxsize=None)
def _fps_mode_option() -> str:
    """The ``ffmpeg`` option that sets frame-rate conversion: ``-fps_mode`` from FFmpeg 5.1 (and
    in builds without a release number), ``-vsync`` before (FFmpeg 9 no longer has it)."""
    first = subprocess.run(["ffmpeg", "-version"], capture_output=True, text=True).stdout
    found = re.match(r"ffmpeg version n?(\d+)\.(\d+)", first)
    return "-vsync" if found and (int(found[1]), int(found[2])) < (5, 1) else "-fps_mode"


def ffmpeg_frames(path: str, shape) -> np.ndarray:
    """Every frame from the ``ffmpeg`` command (its own FFmpeg build, auto-rotation, no frame-rate
    conversion) as RGB ``(N, H, W, 3)``: a second, independent decode."""
    h, w = shape
    # The ffmpeg command's own choice of video stream (the one a player shows), no audio.
    cmd = ["ffmpeg", "-hide_banner", "-loglevel", "error", "-i", path, "-an", "-sn", "-dn",
           _fps_mode_option(), "passthrough", "-f", "rawvideo", "-pix_fmt", "rgb24", "-"]
    raw = subprocess.run(cmd, capture_output=True, check=True).stdout
    return np.frombuffer(raw, np.uint8).reshape(-1, h, w, 3)
