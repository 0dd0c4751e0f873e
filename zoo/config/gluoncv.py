"""gluoncv.torch YAML keys read with gluoncv's meaning, before the YAML is merged into zoo's config.

gluoncv.torch (``scripts/action-recognition/configuration/*.yaml``) writes the same sections as
zoo, plus a few keys zoo has no key for and a few defaults that differ. :func:`adapt_gluoncv`
rewrites the raw YAML mapping of a gluoncv file so that it means in zoo what it meant in gluoncv:

* ``DATA.NUM_SEGMENT`` > 1 (TSN): gluoncv cuts the video into that many segments and takes a
  ``CLIP_LEN`` snippet from each; zoo's ``DATA.SAMPLING "tsn"`` does the same, so it is set.
* ``DATA.SHORT_SIDE_SIZE`` S: gluoncv trains on frames resized to short side S and then scaled
  at random by 1 to 1.25; zoo's ``DATA.TRAIN_SHORT_SIDE_RANGE`` becomes ``[S, 1.25 S]``.
* ``TRAIN.LR_POLICY`` absent: gluoncv's default is a misspelt key (``LR_POLICY: 'Cosine'`` in its
  defaults file never existed) and its trainer stepped the LR at ``LR_MILESTONE``; zoo uses "Step".
* ``TRAIN.WARMUP_END_LR``: gluoncv never read it (its ``GradualWarmupScheduler`` has
  ``multiplier=1.0``: the warmup ends on ``LR``, where its Cosine or Step schedule starts), so it
  is dropped and zoo's warmup ends on the schedule's LR too (``WARMUP_END_LR`` 0).
* ``TRAIN.WARMUP_START_LR``: gluoncv's warmup starts at 0 whatever the file says, so zoo's is
  set to 0 (also for a file without ``USE_WARMUP`` True, should the warmup be turned on).
* ``MODEL.LOAD`` True with ``MODEL.PRETRAINED_PATH``: load that checkpoint = zoo's
  ``MODEL.PRETRAINED``.
* ``DATA.KEEP_ASPECT_RATIO`` absent: gluoncv's default False (frames resized to NEW_WIDTH x
  NEW_HEIGHT, aspect ratio ignored, before the short-side resize), which zoo's data loader does
  too when the key is False; zoo's own default is True.
* ``MODEL.PRETRAINED_BASE`` (True by default): gluoncv's I3D and TPN nets start from an
  inflated ImageNet ResNet; zoo downloads none, so such a file without whole-model weights or
  ``inflate_from`` gets one warning that it starts from random weights.
* ``DATA.NUM_CROP`` 1 and ``DATA.MULTIGRID`` False: what zoo does anyway (gluoncv's loader never
  read NUM_CROP); other values get one warning each saying what zoo does instead.

Keys zoo deliberately does not use are in ``zoo.config.config._GLUONCV_UNUSED_KEYS`` (warned and
dropped while merging).
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List

from .tree import lookup_key
from .validation import ConfigError

logger = logging.getLogger(__name__)

# gluoncv's spelling of DDP_CONFIG.WORLD_URLS, which every gluoncv file writes. zoo once read it
# too, so it marks a gluoncv file only in a file that is not evidently zoo's (no _BASE_, no
# VERSION: gluoncv has neither).
_SPELLING_MARKER = "DDP_CONFIG.WOLRD_URLS"

# Keys only gluoncv writes; one of them marks a YAML as a gluoncv file.
_MARKERS = (
    "CONFIG.DATA.NUM_CROP",
    "CONFIG.DATA.MULTIGRID",
    "CONFIG.LOG.EVAL_DIR",
    "CONFIG.MODEL.LOAD",
    "CONFIG.MODEL.PRETRAINED_PATH",
)

# gluoncv's RandomResize(ratio=(1, 1.25)) after the short-side resize in training.
_TRAIN_SCALE_MAX = 1.25


def _gluoncv_keys(data: Any, markers=_MARKERS) -> List[str]:
    """The keys of ``markers`` that the YAML mapping sets."""
    if not isinstance(data, dict):
        return []
    return [k for k in markers if lookup_key(data, k, None) is not None]


def is_gluoncv_yaml(data: Any, zoo_file: bool = False) -> bool:
    """True when the YAML mapping carries a key that only gluoncv.torch configs write
    (``zoo_file``: the file has a ``_BASE_`` or a ``VERSION``, so ``WOLRD_URLS`` is only a
    misspelling there)."""
    return bool(_gluoncv_keys(data, _MARKERS if zoo_file else (_SPELLING_MARKER, *_MARKERS)))


def refuse_in_zoo_file(data: Any, source: str) -> None:
    """A file with a ``_BASE_`` or a ``VERSION`` (gluoncv files have neither) is a zoo file: a
    gluoncv-only key written there would turn the whole config into a gluoncv one (frames
    squashed, warmup from 0), or be dropped, and which one the user means is not clear.

    Raises:
        ConfigError: the file's own mapping sets a gluoncv-only key.
    """
    foreign = _gluoncv_keys(data)
    if foreign:
        raise ConfigError(
            f"{source}: {foreign[0]} is a gluoncv.torch key, and this file has a _BASE_ or a "
            "VERSION (gluoncv files have neither), so it is read as a zoo config, which has no "
            "such key: remove it, or name the gluoncv file as the _BASE_ to read it with "
            "gluoncv's meaning (docs/migrating.md)")


def _section(data: Dict[str, Any], name: str) -> Dict[str, Any]:
    config = data.get("CONFIG")
    if not isinstance(config, dict):
        return {}
    section = config.get(name)
    return section if isinstance(section, dict) else {}


def _adapt_data(d: Dict[str, Any], source: str, notes: List[str]) -> None:
    num_crop = d.pop("NUM_CROP", 1)
    if num_crop != 1:
        logger.warning("%s: CONFIG.DATA.NUM_CROP = %r has no effect (gluoncv's loader never read "
                       "it either); training takes one random crop per clip", source, num_crop)
    if d.pop("MULTIGRID", False):
        logger.warning("%s: CONFIG.DATA.MULTIGRID True is not supported; zoo trains with one clip "
                       "shape (CLIP_LEN x CROP_SIZE), which is gluoncv's MULTIGRID False", source)
    if "KEEP_ASPECT_RATIO" not in d:
        d["KEEP_ASPECT_RATIO"] = False  # gluoncv's default: frames squashed to NEW_WIDTH x HEIGHT
        notes.append("no KEEP_ASPECT_RATIO -> False (frames resized to NEW_WIDTH x NEW_HEIGHT)")
    if int(d.get("NUM_SEGMENT", 1) or 1) > 1 and "SAMPLING" not in d:
        d["SAMPLING"] = "tsn"
        notes.append(f"NUM_SEGMENT {d['NUM_SEGMENT']} -> CONFIG.DATA.SAMPLING tsn")
    if "SHORT_SIDE_SIZE" in d and "TRAIN_SHORT_SIDE_RANGE" not in d:
        side = int(d["SHORT_SIDE_SIZE"])
        d["TRAIN_SHORT_SIDE_RANGE"] = [side, int(round(side * _TRAIN_SCALE_MAX))]
        notes.append(f"SHORT_SIDE_SIZE {side} -> CONFIG.DATA.TRAIN_SHORT_SIDE_RANGE "
                     f"{d['TRAIN_SHORT_SIDE_RANGE']}")


def _adapt_train(t: Dict[str, Any], notes: List[str], source: str) -> None:
    if isinstance(t.get("MULTIGRID"), dict):
        # gluoncv's section (USE_LONG_CYCLE, USE_SHORT_CYCLE, LONG_CYCLE_EPOCH) that its trainer
        # never read; zoo's CONFIG.TRAIN.MULTIGRID is a string and stays off.
        t.pop("MULTIGRID")
        logger.warning("%s: ignoring gluoncv section CONFIG.TRAIN.MULTIGRID (gluoncv never "
                       "trained with it); set CONFIG.TRAIN.MULTIGRID long, short or long+short "
                       "for zoo's multigrid training", source)
    if "LR_POLICY" not in t and "LR_MILESTONE" in t:
        t["LR_POLICY"] = "Step"
        notes.append("no LR_POLICY -> Step at LR_MILESTONE (gluoncv's trainer)")
    # Neither is read by gluoncv, whose warmup (on or off) goes from 0 to LR.
    t.pop("WARMUP_END_LR", None)
    t["WARMUP_START_LR"] = 0.0
    if t.get("USE_WARMUP") is True:
        notes.append("USE_WARMUP -> linear warmup from 0 to LR (gluoncv's warmup)")


def _adapt_model(m: Dict[str, Any], notes: List[str], source: str) -> None:
    load, path = m.pop("LOAD", False), m.pop("PRETRAINED_PATH", "")
    if load and path:
        m["PRETRAINED"] = path
        notes.append(f"MODEL.LOAD + PRETRAINED_PATH -> CONFIG.MODEL.PRETRAINED {path}")
    _warn_inflated_start(m, source)


def _warn_inflated_start(m: Dict[str, Any], source: str) -> None:
    """gluoncv's I3D and TPN nets without whole-model weights start from torchvision's ImageNet
    ResNet inflated to 3D (``PRETRAINED_BASE``, True by default; False is an error there), which
    zoo does not download: say that this run starts from random weights unless ``inflate_from``
    names such a file. The warning stands for gluoncv's ``PRETRAINED_BASE`` key, dropped here."""
    name = str(m.get("NAME", "")).lower()
    if not name.startswith(("i3d_resnet", "i3d_nl", "tpn_")) or m.get("PRETRAINED"):
        return
    if m.get("PRETRAINED_BASE", True) is False or "inflate_from" in list(m.get("KWARGS") or []):
        return
    m.pop("PRETRAINED_BASE", None)
    depth = 101 if "resnet101" in name else 50
    logger.warning(
        "%s: gluoncv starts %s from torchvision's ImageNet ResNet-%d inflated to 3D "
        "(MODEL.PRETRAINED_BASE, True by default); zoo downloads no 2D weights, so this run "
        "starts from random weights (expect lower accuracy than gluoncv's) unless "
        "CONFIG.MODEL.KWARGS ['inflate_from', PATH] names a torchvision resnet%d file",
        source, name, depth, depth)


def adapt_gluoncv(data: Any, source: str, zoo_file: bool = False) -> Any:
    """Rewrite a gluoncv.torch YAML mapping in place so zoo reads it with gluoncv's meaning.

    A mapping without gluoncv-only keys is returned unchanged.

    Args:
        data: The mapping ``yaml.safe_load`` returned.
        source: The file name, for messages.
        zoo_file: The file (or one it builds on) has a ``_BASE_`` or a ``VERSION``: a zoo file,
            which ``WOLRD_URLS`` alone does not make a gluoncv one.
    """
    if not is_gluoncv_yaml(data, zoo_file):
        return data
    only_spelling = not _gluoncv_keys(data)  # only WOLRD_URLS: likely a zoo file, misspelt
    notes: List[str] = []
    _adapt_data(_section(data, "DATA"), source, notes)
    _adapt_train(_section(data, "TRAIN"), notes, source)
    _adapt_model(_section(data, "MODEL"), notes, source)
    if notes:
        logger.info("%s: a gluoncv.torch config (it has %s); its keys are read with gluoncv's "
                    "meaning: %s%s", source,
                    "DDP_CONFIG.WOLRD_URLS" if only_spelling else "gluoncv-only keys",
                    "; ".join(notes),
                    " (a zoo config: rename WOLRD_URLS to WORLD_URLS)" if only_spelling else "")
    return data
