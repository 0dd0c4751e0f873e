"""Frame-exact decoding: every video reader x every corpus case, every frame against the reference.

The corpus (tests/video_corpus.py) is built once per session; the reference is a sequential PyAV
decode that shares no code with zoo's readers, itself checked twice: the frame numbers drawn into
the pictures read back as 0, 1, 2, ... and the ``ffmpeg`` command (another FFmpeg build) decodes the
same pictures. A reader passes a case when, for indices asked in random order with repeats, in
order, in reverse, near the end and as clips on one open reader, every frame is the reference's.

PyAV (the same FFmpeg as the reference) must be bit-exact. Readers built on another FFmpeg or
another YUV->RGB conversion (OpenCV, decord, torchcodec) get a tolerance of TOLERANCE grey levels of
mean absolute difference, and a test checks that neighbouring frames differ by far more, so a
neighbour can never pass for the right frame.
"""

from __future__ import annotations

import importlib.util
import random
import shutil

import numpy as np
import pytest
import video_corpus as vc

from zoo.data.decode.base import END_SLACK, DecoderLibraryError
from zoo.data.decode.registry import DECODERS, DecodeError, PyAVReader

# Readers registered for something other than video files.
NOT_VIDEO_FILE_READERS = {"frames", "image"}
VIDEO_READERS = sorted(n for n in DECODERS if n not in NOT_VIDEO_FILE_READERS)
# The package each reader imports, where it is not the reader's name.
PACKAGES = {"pyav": "av", "opencv": "cv2", "auto": "av"}
# Readers decoding with the reference's own FFmpeg and conversion: bit-exact expected.
EXACT_READERS = {"pyav", "auto"}  # auto tries PyAV first for every container
# Cases a reader refuses with one DecodeError line instead of decoding (never a wrong frame).
REFUSALS = {
    ("decord", "h264_mkv_still_first"): "decord may read another video stream than the main one",
    # torchcodec 0.17's exact mode returns copies of frame i-1 / i-2 in AVI (shown in
    # tests/test_torchcodec.py), so zoo's reader refuses every AVI, and raw streams it was not
    # checked on; frames whose timestamps do not increase cannot be told apart by its seeks.
    **{("torchcodec", case): "AVI: torchcodec returns neighbouring frames"
       for case in ("mpeg4_xvid_avi_audio", "xvid_packed_avi", "h264_avi", "h264_avi_remuxed",
                    "mjpeg_avi", "mpeg4_avi_no_index")},
    ("torchcodec", "h264_raw"): "raw streams: not checked with torchcodec",
    ("torchcodec", "h264_flv"): "FLV: not checked with torchcodec",
    ("torchcodec", "h264_ts_cut"): "MPEG-TS: torchcodec returns neighbouring frames",
    ("opencv", "h264_mkv_still_first"): "OpenCV reads the first video stream only",
    ("torchcodec", "h264_mkv_broken_pts"): "timestamps that do not increase",
    ("torchcodec", "h264_mp4_broken_pts"): "timestamps that do not increase",
}
# Cases a reader's library may have no decoder for (or reads wrong), and what its refusal says: it
# must then stop with one DecoderLibraryError line saying so (a library's limit, never a bad
# video); a build that decodes it must give the frames. opencv-python's FFmpeg decodes AV1 only
# with hardware.
LIBRARY_LIMITS = {("opencv", "av1_mp4"): "cannot decode av1",
                  ("decord", "av1_mp4"): "cannot decode av1",
                  ("decord", "h264_raw"): "cannot decode h264 or read its container",
                  ("decord", "h264_ts_cut"): "MPEG program or transport stream"}
# Where the pyav reader decodes from the start instead of seeking (docs/datasets.md's table): no
# presentation timestamps (AVI, raw streams) or timestamps that disagree with the decoder.
PYAV_FROM_START = {"mpeg4_xvid_avi_audio", "xvid_packed_avi", "h264_avi", "h264_avi_remuxed",
                   "mjpeg_avi", "mpeg4_avi_no_index", "h264_flv", "h264_ts_cut", "h264_raw",
                   "h264_mkv_broken_pts", "h264_mp4_broken_pts"}
# Mean absolute difference (grey levels) allowed between two FFmpeg builds / RGB conversions.
TOLERANCE = 3.0


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """name -> (path, reference frames), built one case at a time, cached for the session."""
    folder = str(tmp_path_factory.mktemp("conformance"))
    cache = {}

    def get(name):
        if name not in cache:
            case = next(c for c in vc.CASES if c.name == name)
            why = vc.missing_tools(case)
            if why:
                pytest.skip(f"{name} cannot be built here: {why}")
            path = vc.build(folder, [name])[name]
            cache[name] = (path, vc.reference_frames(path))
        return cache[name]

    return get


def _difference(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:
        return float("inf")
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


def _check(reader: str, got: np.ndarray, indices, reference: np.ndarray, what: str) -> None:
    """Every row of ``got`` must be the reference frame at its index (exact or within TOLERANCE)."""
    assert got.dtype == np.uint8 and got.shape == (len(indices), *reference.shape[1:]), (
        f"{reader} {what}: shape {got.shape}, expected {(len(indices), *reference.shape[1:])}")
    tolerance = 0.0 if reader in EXACT_READERS else TOLERANCE
    wrong = []
    for row, index in enumerate(indices):
        if _difference(got[row], reference[index]) > tolerance:
            closest = min(range(len(reference)), key=lambda j: _difference(got[row], reference[j]))
            wrong.append(f"{index}->{closest}")
    assert not wrong, (f"{reader} {what}: {len(wrong)} of {len(indices)} frames wrong "
                       f"(asked->closest reference frame): {', '.join(wrong[:12])}")


def _open(reader: str, path: str, **kwargs):
    package = PACKAGES.get(reader, reader)
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"reader {reader!r} needs the {package!r} package, which is not installed")
    try:
        return DECODERS[reader](path, **kwargs)
    except ImportError as e:
        pytest.skip(f"reader {reader!r} is not installed: {e}")


def _decodes(reader: str, path: str, says: str) -> bool:
    """Whether ``reader`` decodes ``path``; if not, it said so as a library's limit."""
    try:
        with _open(reader, path) as video:
            video.decode_array([0])
        return True
    except DecoderLibraryError as e:
        message = str(e)
        assert path in message and says in message and "\n" not in message
        assert "not a bad video" in message
        return False


def _opens(reader: str, path: str, says: str) -> bool:
    """Whether ``reader`` opens ``path``; if not, it said so as a library's limit (decord refuses
    what it cannot read at open)."""
    try:
        with _open(reader, path):
            return True
    except DecoderLibraryError as e:
        assert path in str(e) and says in str(e) and "\n" not in str(e)
        return False


def _check_refusal(reader: str, path: str, n: int = 2) -> None:
    """A refusal is one DecodeError line naming the file, raised at open or when the first ``n``
    frames are asked for in one call (torchcodec refuses a file whose timestamps do not increase
    only once the frames it is asked for show it)."""
    with pytest.raises(DecodeError) as info:
        with _open(reader, path) as video:
            video.decode_array(list(range(n)))
    message = str(info.value)
    assert path in message and "\n" not in message


@pytest.mark.parametrize("case", vc.CASE_NAMES)
def test_reference_is_the_encoded_sequence(corpus, case):
    """The reference's pictures carry the numbers 0, 1, 2, ... (upright after rotation)."""
    _, reference = corpus(case)
    rotation = next(c.rotation for c in vc.CASES if c.name == case)
    numbers = [vc.read_number(np.rot90(image, -rotation // 90)) for image in reference]
    assert numbers == list(range(len(reference)))
    # Xvid's packed B-frames lose the last frames at the encoder's flush; nothing else may.
    assert len(reference) >= vc.NUM - 2


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg command")
@pytest.mark.parametrize("case", vc.CASE_NAMES)
def test_reference_agrees_with_ffmpeg_command(corpus, case):
    """A second decode (the ffmpeg command, Debian's FFmpeg, its own auto-rotation) agrees, so the
    reference's frame order and its handling of the rotation tag are what a player shows."""
    path, reference = corpus(case)
    other = vc.ffmpeg_frames(path, reference.shape[1:3])
    assert len(other) == len(reference)
    worst = max(_difference(a, b) for a, b in zip(other, reference))
    assert worst <= TOLERANCE


@pytest.mark.parametrize("case", vc.CASE_NAMES)
def test_neighbours_differ_far_beyond_tolerance(corpus, case):
    """The test can fail: a neighbouring frame is always far outside the tolerance."""
    _, reference = corpus(case)
    closest = min(_difference(a, b) for a, b in zip(reference[:-1], reference[1:]))
    assert closest > 4 * TOLERANCE


@pytest.mark.parametrize("case", vc.CASE_NAMES)
@pytest.mark.parametrize("reader", VIDEO_READERS)
def test_frames_are_exact(corpus, reader, case):
    path, reference = corpus(case)
    if (reader, case) in REFUSALS:
        _check_refusal(reader, path, len(reference))
        return
    if (reader, case) in LIBRARY_LIMITS and not _decodes(reader, path,
                                                         LIBRARY_LIMITS[(reader, case)]):
        return
    n = len(reference)
    rng = random.Random(f"{reader}-{case}")
    shuffled = list(range(n)) + [rng.randrange(n) for _ in range(n // 3)]
    rng.shuffle(shuffled)
    orders = {
        "random order with repeats": shuffled,
        "in order": list(range(n)),
        "reverse": list(range(n - 1, -1, -1)),
        "near the end": [n - 1, n - 2, n - 3, n - 1],
        "sparse": [n - 2, 3, n // 2, 0, n // 2 + 1],
    }
    for what, indices in orders.items():
        with _open(reader, path) as video:
            _check(reader, video.decode_array(indices), indices, reference, what)
    # As the datasets open it: with the annotation list's frame count as a hint.
    with _open(reader, path, num_frames_hint=n) as video:
        indices = orders["sparse"]
        _check(reader, video.decode_array(indices), indices, reference, "sparse, with a count hint")
    # Clips from one open reader, in random order: its seek state carries over between calls.
    starts = [0, n - 8, n // 2, 5, n // 3, n - 4, 1]
    rng.shuffle(starts)
    with _open(reader, path) as video:
        for start in starts:
            indices = list(range(start, min(start + 6, n), 2)) + [start]
            _check(reader, video.decode_array(indices), indices, reference, f"clip at {start}")


@pytest.mark.parametrize("case", vc.CASE_NAMES)
@pytest.mark.parametrize("reader", VIDEO_READERS)
def test_frame_count(corpus, reader, case):
    """num_frames is the decoded count, or a few more (the sampler repeats the last frame there)."""
    path, reference = corpus(case)
    if (reader, case) in REFUSALS:
        try:  # a reader that refuses the file's frames may still count them, but never wrongly
            with _open(reader, path) as video:
                count = video.num_frames
        except DecodeError as e:
            assert path in str(e) and "\n" not in str(e)
            return
        assert len(reference) <= count <= len(reference) + END_SLACK
        return
    if (reader, case) in LIBRARY_LIMITS and not _opens(reader, path,
                                                       LIBRARY_LIMITS[(reader, case)]):
        return
    with _open(reader, path) as video:
        assert len(reference) <= video.num_frames <= len(reference) + END_SLACK
        if (reader, case) not in LIBRARY_LIMITS:  # counting leaves the reader able to decode
            indices = [0, len(reference) - 1]
            _check(reader, video.decode_array(indices), indices, reference, "after counting")


@pytest.mark.parametrize("case", vc.CASE_NAMES)
@pytest.mark.parametrize("reader", VIDEO_READERS)
def test_frame_rate_is_the_average_the_frames_show(corpus, reader, case):
    """fps (what time ranges and CONFIG.DATA.TARGET_FPS turn seconds into frames with) is the
    average rate of the frames shown, not the rate a header declares: 25 for the clips written
    at 25 fps, frames over their time span for the variable-rate ones. Within 3%: readers count
    the last frame's duration or not, and Xvid's packed B-frames leave a placeholder chunk."""
    path, reference = corpus(case)
    if (reader, case) in REFUSALS:
        return  # refused with one line (test_frames_are_exact)
    if (reader, case) in LIBRARY_LIMITS and not _opens(reader, path,
                                                       LIBRARY_LIMITS[(reader, case)]):
        return
    if case.startswith("vfr_"):
        times = vc._vfr_pts()
        expected = (len(times) - 1) / (times[-1] / 1000.0)
    else:
        expected = vc.FPS
    with _open(reader, path) as video:
        assert video.fps == pytest.approx(expected, rel=0.03), (video.fps, expected)


@pytest.mark.parametrize("case", vc.CASE_NAMES)
def test_pyav_seeks_where_it_can(corpus, case):
    """Exactness costs no speed where timestamps are trustworthy: a frame near the end is reached
    with a seek (a keyframe every 12 frames), and only the cases in PYAV_FROM_START decode from the
    start (as docs/datasets.md says)."""
    path, reference = corpus(case)
    n = len(reference)
    with PyAVReader(path) as video:
        _check("pyav", video.decode_array([n - 4]), [n - 4], reference, "one frame near the end")
        decoded = video._frames_decoded
    if case in PYAV_FROM_START:
        assert decoded >= n - 4
    else:
        assert decoded <= 12 + 4  # one keyframe interval and the reorder delay
