"""What one video of the motion dataset looks like: its content drawn from a seed, and its frames.

Class ``k`` is the ``k``-th of :data:`DIRECTIONS` (opposites are adjacent, so any number of
classes from 2 to 8 keeps pairs that mirror each other). :func:`video_spec` draws everything about
a video from ``(seed, split, label, index)`` alone; :func:`render` draws its frames;
:func:`write_video` encodes them (libx264, yuv420p, a keyframe every 16 frames, no B-frames). The
dataset around them (folders, lists, caching) is :mod:`zoo.data.synthetic`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

import av
import numpy as np

DIRECTIONS: List[Tuple[str, Tuple[float, float]]] = [
    ("right", (1.0, 0.0)),
    ("left", (-1.0, 0.0)),
    ("up", (0.0, -1.0)),
    ("down", (0.0, 1.0)),
    ("up_right", (1.0, -1.0)),
    ("down_left", (-1.0, 1.0)),
    ("up_left", (-1.0, -1.0)),
    ("down_right", (1.0, 1.0)),
]
FPS = 25
# ultrafast: encoding speed matters more than file size for 64x64 clips; threads=1 keeps the
# output byte-identical from run to run; g=16 keeps seeks short; bf=0 makes decode order = display.
_ENCODER_OPTIONS = {"crf": "18", "preset": "ultrafast", "threads": "1", "g": "16", "bf": "0"}
_SPLITS = ("train", "val")


@dataclass
class VideoSpec:
    """Everything drawn for one video; centres are in pixels, x to the right, y down."""

    label: int
    target_shape: str
    target_size: float
    target_colour: np.ndarray
    centres: np.ndarray  # (T, 2) target centre per frame
    background: np.ndarray  # (H, W, 3) float32
    distractors: List[Dict[str, Any]]


def _colour(rng: np.random.Generator, away_from: np.ndarray, min_distance: float) -> np.ndarray:
    """A random RGB colour at least ``min_distance`` (L2, 0..255) from ``away_from``."""
    colour = rng.uniform(0, 255, 3)
    for _ in range(20):
        if np.linalg.norm(colour - away_from) >= min_distance:
            break
        colour = rng.uniform(0, 255, 3)
    return colour.astype(np.float32)


def _background(rng: np.random.Generator, size: int) -> np.ndarray:
    if rng.random() < 0.5:
        base = rng.uniform(20, 235, 3).astype(np.float32)
        noise = rng.normal(0.0, 6.0, (size, size, 1)).astype(np.float32)  # static, grey
        return base + noise
    # A linear gradient between two colours along a random angle.
    c0, c1 = rng.uniform(20, 235, (2, 3)).astype(np.float32)
    angle = rng.uniform(0, 2 * np.pi)
    coords = (np.arange(size, dtype=np.float32) + 0.5) / size - 0.5
    ramp = np.cos(angle) * coords[None, :] + np.sin(angle) * coords[:, None]
    ramp = (ramp - ramp.min()) / max(float(ramp.max() - ramp.min()), 1e-6)
    return c0 + (c1 - c0) * ramp[..., None]


def video_spec(
    seed: int, split: str, label: int, index: int, num_frames: int, size: int
) -> VideoSpec:
    """Draw the content of one video from ``(seed, split, label, index)`` alone."""
    rng = np.random.default_rng([seed, _SPLITS.index(split), label, index])
    frames = np.arange(num_frames, dtype=np.float32)
    background = _background(rng, size)
    mean_bg = background.reshape(-1, 3).mean(0)

    target_size = rng.uniform(0.19, 0.31) * size
    # Total path length, a share of the room the target has, drawn the same way for every class.
    travel = rng.uniform(0.45, 0.60) * (size - target_size)
    # The middle position comes from one box for all classes, wide enough for any direction.
    low = target_size / 2 + travel / 2
    middle = rng.uniform(low, size - low, 2)
    direction = np.asarray(DIRECTIONS[label][1], dtype=np.float32)
    direction /= np.linalg.norm(direction)
    phase = frames / max(num_frames - 1, 1) - 0.5  # -0.5 .. 0.5 over the video
    centres = middle[None, :] + phase[:, None] * travel * direction[None, :]

    distractors = []
    for _ in range(int(rng.integers(1, 4))):
        d_size = rng.uniform(0.12, 0.25) * size
        centre = rng.uniform(d_size / 2, size - d_size / 2, 2)
        jitter = rng.random() < 0.5
        offsets = rng.integers(-1, 2, (num_frames, 2)) if jitter else np.zeros((num_frames, 2))
        distractors.append(
            {
                "shape": "disk" if rng.random() < 0.5 else "square",
                "size": d_size,
                "colour": _colour(rng, mean_bg, 60.0),
                # Independent +-1 px steps around a fixed point: flicker, but no drift.
                "centres": np.clip(centre[None, :] + offsets, d_size / 2, size - d_size / 2),
            }
        )
    return VideoSpec(
        label=label,
        target_shape="disk" if rng.random() < 0.5 else "square",
        target_size=float(target_size),
        target_colour=_colour(rng, mean_bg, 120.0),
        centres=centres.astype(np.float32),
        background=background,
        distractors=distractors,
    )


def _span(centre: float, half: float, limit: int) -> Tuple[int, int]:
    """Pixel range ``[lo, hi)`` outside of which a shape of half-size ``half`` covers nothing."""
    lo = max(int(np.floor(centre - half - 0.5)), 0)
    hi = min(int(np.ceil(centre + half + 0.5)) + 1, limit)
    return lo, hi


def render(spec: VideoSpec) -> np.ndarray:
    """Draw a video: uint8 ``(T, H, W, 3)``; the target is drawn last, so it is never hidden.

    Each shape is blended with anti-aliased coverage (1 inside, falling to 0 over one pixel at
    the edge). Coverage is computed only inside each shape's bounding box per frame: outside it
    the coverage is 0 and the blend leaves the pixel exactly as it was, so this is the same
    picture as blending whole frames, about 3x faster.
    """
    num_frames, size = len(spec.centres), spec.background.shape[0]
    video = np.broadcast_to(spec.background, (num_frames, size, size, 3)).copy()
    layers = [(d["shape"], d["size"], d["colour"], d["centres"]) for d in spec.distractors]
    layers.append((spec.target_shape, spec.target_size, spec.target_colour, spec.centres))
    pixels = np.arange(size, dtype=np.float32) + 0.5
    for shape, shape_size, colour, centres in layers:
        half = shape_size / 2
        for t, (cx, cy) in enumerate(centres.astype(np.float32)):
            x0, x1 = _span(cx, half, size)
            y0, y1 = _span(cy, half, size)
            dx = pixels[None, x0:x1] - cx
            dy = pixels[y0:y1, None] - cy
            if shape == "square":
                alpha = np.clip(half + 0.5 - np.abs(dx), 0, 1) * np.clip(
                    half + 0.5 - np.abs(dy), 0, 1
                )
            else:
                alpha = np.clip(half + 0.5 - np.sqrt(dx * dx + dy * dy), 0, 1)
            region = video[t, y0:y1, x0:x1]
            region += alpha[..., None] * (colour - region)
    return np.clip(video + 0.5, 0, 255).astype(np.uint8)


def write_video(path: str, video: np.ndarray, fps: int = FPS) -> None:
    """Encode uint8 ``(T, H, W, 3)`` RGB frames to an H.264 .mp4 at ``path``."""
    with av.open(path, mode="w") as container:
        stream = container.add_stream("libx264", rate=fps, options=dict(_ENCODER_OPTIONS))
        stream.height, stream.width = video.shape[1:3]
        stream.pix_fmt = "yuv420p"
        for image in video:
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():  # flush the encoder
            container.mux(packet)
