"""Videos the data tests generate: ramps whose pixels say their frame number, every codec and
container the tests cover, each kind of broken file, and a long 720p video made fast by remuxing."""

from __future__ import annotations

import fractions
import gc
import os
from typing import Dict, List, Optional, Sequence

import av
import numpy as np

FPS = 25


def ramp_frames(num: int, height: int = 32, width: int = 48) -> np.ndarray:
    """uint8 ``(num, H, W, 3)``: frame ``t`` is grey level ``6 * t`` (mod 246) with a red top-left
    corner and a horizontal gradient, so its index and channel order can be read back."""
    frames = np.zeros((num, height, width, 3), np.uint8)
    gradient = (np.arange(width) * 40 // max(width - 1, 1)).astype(np.uint8)
    for t in range(num):
        frames[t] = (6 * t) % 246
        frames[t, height // 2 :, :, 1] = np.minimum(frames[t, height // 2 :, :, 1] + gradient, 255)
        frames[t, : height // 4, : width // 4] = (255, 0, 0)
    return frames


def frame_number(image: np.ndarray) -> float:
    """The frame index written by :func:`ramp_frames` (from the grey top-right quarter)."""
    h, w = image.shape[:2]
    return float(image[: h // 2, w // 2 :].astype(np.float32).mean() / 6.0)


def write(
    path: str,
    frames: np.ndarray,
    codec: str = "libx264",
    pix_fmt: str = "yuv420p",
    options: Optional[Dict[str, str]] = None,
    pts_ms: Optional[Sequence[int]] = None,
    container_options: Optional[Dict[str, str]] = None,
    sample_aspect_ratio: Optional[fractions.Fraction] = None,
) -> str:
    """Encode RGB ``frames`` to ``path``. ``pts_ms`` gives each frame's time in milliseconds
    (variable frame rate); otherwise the rate is a constant 25 fps. ``container_options`` go to
    the muxer (``{"movflags": "faststart"}``: an MP4's index first). ``sample_aspect_ratio``:
    pixels that are not square (2: each shown twice as wide as high)."""
    opts = {"g": "8", "bf": "0", "preset": "ultrafast"} if codec == "libx264" else {}
    opts.update(options or {})
    with av.open(path, "w", options=container_options or {}) as container:
        stream = container.add_stream(codec, rate=FPS, options=opts)
        stream.height, stream.width = frames.shape[1:3]
        stream.pix_fmt = pix_fmt
        if sample_aspect_ratio is not None:
            stream.codec_context.sample_aspect_ratio = sample_aspect_ratio
        if pts_ms is not None:
            stream.codec_context.time_base = fractions.Fraction(1, 1000)
        for i, image in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
            if pts_ms is not None:
                frame.pts = int(pts_ms[i])
                frame.time_base = fractions.Fraction(1, 1000)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def has_encoder(name: str) -> bool:
    try:
        av.codec.Codec(name, "w")
        return True
    except Exception:
        return False


def write_audio_only(path: str) -> str:
    """An .mp4 holding only an AAC audio stream."""
    _encode_silence(path)
    # PyAV 12's audio encoder leaves its resampler's filter graph in a reference cycle: freed by
    # a later garbage collection in a forked DataLoader worker, where the graph's threads do not
    # exist, FFmpeg waits for them forever. Free it here, in the process that made it.
    gc.collect()
    return path


def _encode_silence(path: str) -> None:
    with av.open(path, "w") as container:
        stream = container.add_stream("aac", rate=8000, layout="mono")
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp",
                                           layout="mono")
        frame.sample_rate = 8000
        for packet in list(stream.encode(frame)) + list(stream.encode()):
            container.mux(packet)


def corrupt_packet(src: str, dst: str, packet_index: int) -> str:
    """Copy ``src`` to ``dst`` with the payload of one video packet overwritten by noise."""
    with av.open(src) as container:
        packets = [(p.pos, p.size) for p in container.demux(video=0) if p.size]
    data = bytearray(open(src, "rb").read())
    pos, size = packets[packet_index]
    rng = np.random.default_rng(0)
    data[pos + 4 : pos + size] = rng.integers(0, 256, size - 4, dtype=np.uint8).tobytes()
    with open(dst, "wb") as f:
        f.write(bytes(data))
    return dst


def bad_videos(folder: str, good: str) -> Dict[str, str]:
    """One file per bad case, named after it; ``good`` is a valid H.264 .mp4 to derive some from.

    Returns:
        kind -> path: missing, empty, truncated, text, audio_only, unreadable_frame, short.
    """
    os.makedirs(folder, exist_ok=True)
    out = {"missing": os.path.join(folder, "missing.mp4")}
    out["empty"] = os.path.join(folder, "empty.mp4")
    open(out["empty"], "wb").close()
    out["truncated"] = os.path.join(folder, "truncated.mp4")
    data = open(good, "rb").read()
    with open(out["truncated"], "wb") as f:
        f.write(data[: len(data) // 2])  # moov atom (at the end) lost
    out["text"] = os.path.join(folder, "text.mp4")
    with open(out["text"], "w") as f:
        f.write("this is not a video\n" * 50)
    out["audio_only"] = write_audio_only(os.path.join(folder, "audio_only.mp4"))
    # Every frame after the first keyframe depends on the broken one: any clip needs it.
    noisy = write(os.path.join(folder, "noisy_src.mp4"), noise_frames(8), options={"g": "100"})
    out["unreadable_frame"] = corrupt_packet(noisy, os.path.join(folder, "unreadable.mp4"), 0)
    os.remove(noisy)
    # 2 frames in a Matroska file (no frame count stored): a list that claims 300 asks too much.
    out["short"] = write(os.path.join(folder, "short.mkv"), ramp_frames(2))
    return out


def noise_frames(num: int, size: int = 32, seed: int = 0) -> np.ndarray:
    """Frames of shifting noise (large packets, so a corrupted one fails to decode)."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
    return np.stack([np.roll(base, t, axis=1) for t in range(num)])


def long_video(path: str, seconds: int, height: int = 720, width: int = 1280) -> str:
    """A ``seconds``-long H.264 .mp4 made fast: 2 s are encoded once (a keyframe every second),
    then their packets are muxed again and again with shifted timestamps."""
    base = path + ".part.mp4"
    rng = np.random.default_rng(0)
    texture = rng.integers(0, 256, (height // 8, width // 8, 3), dtype=np.uint8)
    texture = np.kron(texture, np.ones((8, 8, 1), np.uint8))
    frames = [np.roll(texture, 4 * t, axis=1) for t in range(2 * FPS)]
    write(base, np.stack(frames), options={"g": str(FPS), "bf": "0", "preset": "ultrafast",
                                           "crf": "35"})
    with av.open(base) as src, av.open(path, "w") as dst:
        in_stream = src.streams.video[0]
        out_stream = dst.add_stream_from_template(in_stream)
        packets: List[av.Packet] = [p for p in src.demux(in_stream) if p.size]
        step = packets[1].pts - packets[0].pts
        span = step * len(packets)
        for copy in range(seconds // 2):
            for packet in packets:
                clone = av.Packet(bytes(packet))
                clone.pts = packet.pts + copy * span
                clone.dts = packet.dts + copy * span
                clone.time_base = packet.time_base
                clone.is_keyframe = packet.is_keyframe
                clone.stream = out_stream
                dst.mux(clone)
    os.remove(base)
    return path
