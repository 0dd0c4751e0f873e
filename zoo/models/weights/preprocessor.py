"""The input normalisation pretrained weights were trained with, as a Hugging Face folder's
``preprocessor_config.json`` records it.

transformers' image processors scale pixels by ``rescale_factor`` (1/255 unless ``do_rescale`` is
false) and then subtract ``image_mean`` and divide by ``image_std``; zoo scales to [0, 1] and
then applies ``DATA.MEAN`` / ``DATA.STD``. Both are the same map when zoo's values are the
processor's divided by ``255 * rescale_factor``. ``VideoMAEImageProcessor`` defaults to mean and
std 0.5 where the file leaves them out, while the published VideoMAE weights' files say
ImageNet's values: a checkpoint fine-tuned with either gives wrong scores on the other, so empty
``DATA.MEAN`` / ``STD`` take the file's values and set ones that differ get a warning.

Only a local ``MODEL.PRETRAINED`` is read (a Hub folder, or a weights file with the processor's
file beside it); tags and URLs keep the model's own normalisation.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, List, NamedTuple, Optional, Sequence

from .download import WeightsError
from .folder import file_beside, read_json_object

logger = logging.getLogger("zoo")

PROCESSOR_FILE = "preprocessor_config.json"

# What a processor class uses for keys its file leaves out (transformers' class defaults).
_CLASS_DEFAULTS = {
    "VideoMAEImageProcessor": {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]},
    "VideoMAEFeatureExtractor": {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]},
}
# Values set in a config that differ from the file's by less than this are the same values
# written with fewer digits (0.485 for 0.48500001).
_TOLERANCE = 1e-3


class Normalization(NamedTuple):
    """Mean and std on zoo's [0, 1] scale, and the file that gave them."""

    mean: List[float]
    std: List[float]
    path: str


def find_processor_file(pretrained: Any) -> Optional[str]:
    """``preprocessor_config.json`` in the folder ``pretrained`` or beside the file ``pretrained``
    (a local ``MODEL.PRETRAINED``); None for anything else."""
    value = str(pretrained or "").strip()
    if not value or not os.path.exists(value):
        return None
    return file_beside(value, PROCESSOR_FILE)


def _channels(value: Any, key: str, path: str) -> List[float]:
    values = value if isinstance(value, (list, tuple)) else [value]
    if len(values) == 1:
        values = list(values) * 3
    if len(values) != 3 or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                   for v in values):
        raise WeightsError(f"{path}: {key} is {value!r}, not 3 numbers (one per RGB channel); "
                           "fix the file or set DATA.MEAN and DATA.STD")
    return [float(v) for v in values]


def read_processor(path: str) -> Normalization:
    """The normalisation the processor file ``path`` describes, on zoo's [0, 1] scale.

    Raises:
        WeightsError: the file is not a JSON object, a value is not 3 numbers (or one), a std is
            not positive, or mean / std are left out by a processor class whose defaults zoo does
            not know (one line naming the file and the keys to set instead).
    """
    config = read_json_object(path, WeightsError,
                              "fix it, or remove it and set DATA.MEAN and DATA.STD")
    kind = str(config.get("image_processor_type") or config.get("feature_extractor_type") or "")
    defaults = _CLASS_DEFAULTS.get(kind, {})
    missing = [key for key in ("image_mean", "image_std") if key not in config
               and key not in defaults]
    if config.get("do_normalize", True) and missing:
        raise WeightsError(f"{path}: no {' / '.join(missing)} and processor type {kind or '?'} "
                           "has no default zoo knows; set DATA.MEAN and DATA.STD")
    scale = float(config.get("rescale_factor", 1 / 255)) if config.get("do_rescale", True) else 1.0
    if not scale > 0:
        raise WeightsError(f"{path}: rescale_factor is {scale!r}, not a positive number")
    if config.get("do_normalize", True):
        mean = _channels(config.get("image_mean", defaults.get("image_mean")), "image_mean", path)
        std = _channels(config.get("image_std", defaults.get("image_std")), "image_std", path)
    else:
        mean, std = [0.0] * 3, [1.0] * 3
    if not all(s > 0 for s in std):
        raise WeightsError(f"{path}: image_std is {std!r}; every channel's must be positive")
    factor = 255 * scale
    if abs(factor - 1) > 1e-9:  # another pixel scale: the same map on zoo's [0, 1] scale
        mean, std = [m / factor for m in mean], [s / factor for s in std]
    return Normalization(mean, std, path)


def _differs(given: Sequence[float], found: Sequence[float]) -> bool:
    return len(given) != len(found) or any(abs(float(a) - b) > _TOLERANCE
                                           for a, b in zip(given, found))


def pretrained_normalization(cfg, facts: Dict[str, Any], announce: bool = False
                             ) -> Dict[str, Any]:
    """The mean / std empty ``DATA.MEAN`` / ``STD`` stand for: those of ``MODEL.PRETRAINED``'s
    processor file (:func:`find_processor_file`) where it has one, else ``facts``' (the model's).

    With ``announce`` (the command line and ``zoo.train`` / ``zoo.test``, once per node), the
    values taken from the file are logged in one line, and values the config sets that differ
    from the file's get a warning line naming both; the config's values are used.

    Returns:
        ``facts`` itself, or a copy whose ``mean`` / ``std`` are the file's.

    Raises:
        WeightsError: the processor file cannot be read (:func:`read_processor`).
    """
    data = cfg.CONFIG.DATA
    if data.MEAN and data.STD and not announce:
        return facts  # nothing to fill, nothing to say
    path = find_processor_file(cfg.CONFIG.MODEL.PRETRAINED)
    if path is None:
        return facts
    found = read_processor(path)
    given = {key: list(data[key]) for key in ("MEAN", "STD") if data[key]}
    if announce:
        differ = [f"DATA.{key} {values}" for key, values in given.items()
                  if _differs(values, getattr(found, key.lower()))]
        if differ:
            logger.warning("%s: the pretrained weights were trained with mean %s and std %s; "
                           "%s set in the config %s used instead (leave them empty for the "
                           "file's)", path, _short(found.mean), _short(found.std),
                           " and ".join(differ), "are" if len(differ) > 1 else "is")
        filled = [key for key in ("MEAN", "STD") if key not in given]
        if filled:
            logger.info("DATA.%s from %s: mean %s, std %s", " / ".join(filled), path,
                        _short(found.mean), _short(found.std))
    return {**facts, "mean": found.mean, "std": found.std}


def _short(values: Sequence[float]) -> str:
    return "[" + ", ".join(f"{v:.6g}" for v in values) + "]"
