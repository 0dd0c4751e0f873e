"""Readers for images instead of video files: folders of extracted frames, and single images.

A frame folder is what frame-extraction tools write for one video: MMAction2's ``build_rawframes``
(denseflow) and the TSN / gluoncv scripts write ``img_00001.jpg, img_00002.jpg, ...`` numbered from
1, and put the optical flow of the same video beside them (``flow_x_00001.jpg`` /
``flow_y_00001.jpg``, or ``x_00001.jpg`` / ``y_00001.jpg``). Frame ``i`` (0-based) of a folder is
therefore the file ``template.format(offset + i + 1)``, never "the ``i``-th image in the folder":
counting every image would feed the flow images as RGB frames. The template is
``CONFIG.DATA.FRAME_TEMPLATE`` and the frame count comes from the annotation list (counted from the
files only when the list gives none).

Like the video readers these need no torch (``decode_array`` returns numpy).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

import numpy as np

from ..lists.records import IMAGE_EXTS
from .base import (
    END_SLACK,
    DecodeError,
    VideoReader,
    as_tensor,
    check_deadline,
    check_file,
    check_indices,
    fill_rows,
)

if TYPE_CHECKING:
    import torch

# MMAction2, TSN and gluoncv name RGB frames img_00001.jpg, ... (numbered from 1).
DEFAULT_FRAME_TEMPLATE = "img_{:05d}.jpg"


class FrameTemplateMismatch(DecodeError):
    """A frame folder holds images but none named as ``CONFIG.DATA.FRAME_TEMPLATE`` says: a
    setting to fix, not a broken video (the dataset stops on it instead of skipping videos)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="empty")


class FrameFolderReader(VideoReader):
    """A folder of extracted frames; frame ``i`` is the file ``template.format(offset + i + 1)``.

    Args:
        path: The folder.
        num_frames_hint: Frame count from the list; <= 0 = count the files (the longest unbroken
            run of template names from ``offset + 1``).
        threads: Unused.
        template: File name pattern of the RGB frames (``CONFIG.DATA.FRAME_TEMPLATE``). When
            frame 1 has the template's name with another image extension (``.png`` for
            ``.jpg``), and only one such, that extension is used.
        offset: Frames of the folder before this video's first one (MMAction2's offset lists,
            clips cut from one long video's folder).
    """

    def __init__(
        self,
        path: str,
        num_frames_hint: int = -1,
        threads: int = 0,
        template: str = DEFAULT_FRAME_TEMPLATE,
        offset: int = 0,
    ) -> None:
        import cv2

        self._cv2 = cv2
        self.path = path
        self.template = template
        self.offset = int(offset)
        if not os.path.isdir(path):
            if os.path.exists(path):
                raise DecodeError(f"{path}: is a file, not a frame folder", "open")
            raise DecodeError(f"{path}: frame folder does not exist", "missing")
        if not os.path.isfile(self._file(0)):
            self.template = self._other_extension() or template
        if not os.path.isfile(self._file(0)):
            self._missing_first()
        self._count = num_frames_hint if num_frames_hint > 0 else self._count_files()
        self._counted = num_frames_hint <= 0

    def _file(self, index: int) -> str:
        return os.path.join(self.path, self.template.format(self.offset + index + 1))

    def _other_extension(self) -> Optional[str]:
        """The template with another image extension when exactly one of them names frame 1
        (``img_00001.png`` for ``img_{:05d}.jpg``): the same names, saved in another format."""
        stem, ext = os.path.splitext(self.template)
        if ext.lower() not in IMAGE_EXTS:
            return None
        found = [stem + e for e in IMAGE_EXTS + tuple(x.upper() for x in IMAGE_EXTS)
                 if e != ext and os.path.isfile(os.path.join(self.path, (stem + e).format(
                     self.offset + 1)))]
        return found[0] if len(found) == 1 else None

    def _missing_first(self) -> None:
        first = os.path.basename(self._file(0))
        images = sorted(n for n in os.listdir(self.path) if n.lower().endswith(IMAGE_EXTS))
        if not images:
            raise DecodeError(f"{self.path}: frame folder has no images (looked for {first})",
                              "empty")
        raise FrameTemplateMismatch(
            f"{self.path}: no frame file {first} (CONFIG.DATA.FRAME_TEMPLATE "
            f"{self.template!r}); the folder holds e.g. {images[0]}: set FRAME_TEMPLATE to match"
        )

    def _count_files(self) -> int:
        """Frames present from the first on: doubling, then bisection (a few stat calls, not a
        listing of a folder that may also hold thousands of flow images)."""
        low, high = 1, 2  # invariant: frame low - 1 exists, frame high - 1 does not
        while os.path.isfile(self._file(high - 1)):
            low, high = high, high * 2
        while high - low > 1:
            mid = (low + high) // 2
            if os.path.isfile(self._file(mid - 1)):
                low = mid
            else:
                high = mid
        return low

    @property
    def num_frames(self) -> int:
        return self._count

    @property
    def count_was_costly(self) -> bool:
        return self._counted

    def decode_array(self, indices: Sequence[int]) -> np.ndarray:
        cv2 = self._cv2
        indices = check_indices(indices)
        last = self._count - 1
        if max(indices) > last + END_SLACK:
            raise DecodeError(
                f"{self.path}: frame {max(indices)} was needed but the folder has {self._count} "
                "frames (a wrong num_frames in the list?)",
                "short",
            )
        rows: Dict[int, List[int]] = {}
        for row, i in enumerate(indices):
            rows.setdefault(min(i, last), []).append(row)
        out = None
        for index in sorted(rows):
            check_deadline()
            name = self._file(index)
            if not os.path.isfile(name):
                raise DecodeError(
                    f"{self.path}: frame file {os.path.basename(name)} does not exist (frame "
                    f"{index} of {self._count} listed, offset {self.offset}, template "
                    f"{self.template!r})",
                    "missing" if index == 0 else "short",
                )
            bgr = cv2.imread(name, cv2.IMREAD_COLOR)
            if bgr is None:
                raise DecodeError(
                    f"{self.path}: frame file {os.path.basename(name)} is unreadable", "decode"
                )
            out = fill_rows(out, len(indices), rows[index], cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
        return out


class ImageReader(VideoReader):
    """A single image read as a one-frame video (the image datasets use it).

    Args:
        path: Image file path.
        num_frames_hint: Unused.
        threads: Unused.
    """

    def __init__(self, path: str, num_frames_hint: int = -1, threads: int = 0) -> None:
        self.path = path
        check_file(path)

    @property
    def num_frames(self) -> int:
        return 1

    def decode_array(self, indices: Sequence[int]) -> np.ndarray:
        rgb, count = self._read(indices)
        # A read-only view: every row is the same image, stored once.
        return np.broadcast_to(rgb, (count, *rgb.shape))

    def decode(self, indices: Sequence[int]) -> torch.Tensor:
        rgb, count = self._read(indices)
        rgb = as_tensor(rgb)
        return rgb.unsqueeze(0).expand(count, *rgb.shape)

    def _read(self, indices: Sequence[int]) -> tuple[np.ndarray, int]:
        """The image as RGB, and how many frames were asked for."""
        import cv2

        indices = check_indices(indices)
        if max(indices) > END_SLACK:
            raise DecodeError(
                f"{self.path}: frame {max(indices)} was needed but an image has 1 frame", "short"
            )
        bgr = cv2.imread(self.path, cv2.IMREAD_COLOR)
        if bgr is None:
            raise DecodeError(f"{self.path}: not an image OpenCV can read", "open")
        return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), len(indices)
