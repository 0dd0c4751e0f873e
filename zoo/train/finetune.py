"""Fine-tuning helpers: class count from the data, the classifier head, frozen backbone / BN."""

from __future__ import annotations

import logging
from typing import List, Set

import torch.nn as nn

logger = logging.getLogger(__name__)


def resolve_num_classes(cfg):
    """With ``CONFIG.DATA.NUM_CLASSES`` 0, count the classes of the training split as
    ``CONFIG.DATA.DATASET`` reads it (:func:`zoo.data.count_train_classes`: its class names, or
    the largest label + 1). Returns a frozen clone (or ``cfg`` itself when nothing changes).
    """
    if cfg.CONFIG.DATA.NUM_CLASSES > 0:
        return cfg
    from ..config import ConfigError
    from ..data import count_train_classes

    anno = cfg.CONFIG.DATA.TRAIN_ANNO_PATH
    if not anno:
        raise ConfigError(
            "CONFIG.DATA.NUM_CLASSES is 0 (count from the data) but CONFIG.DATA.TRAIN_ANNO_PATH is "
            "empty: set the training list or NUM_CLASSES"
        )
    count = count_train_classes(cfg)
    logger.info("CONFIG.DATA.NUM_CLASSES 0: %d classes found in %s (%s)", count, anno,
                cfg.CONFIG.DATA.DATASET)
    new = cfg.clone()
    new.defrost()
    new.CONFIG.DATA.NUM_CLASSES = count
    new.freeze()
    return new


def classifier_module(model: nn.Module) -> nn.Module:
    """The classification layer of ``model`` (DDP / ``torch.compile`` wrappers removed): its
    ``get_classifier()`` (every built-in model has one); for a user model without it, the module
    its ``classifier_name`` attribute names, else its last ``nn.Linear``
    (:func:`zoo.models.classifier.find_classifier`).

    Raises:
        ValueError: when none is found (one line saying what to define).
    """
    # Imported here: zoo.models registers every family, which a command need not pay for.
    from ..models.classifier import find_classifier

    return find_classifier(model)


def check_classifier_guess(cfg, model: nn.Module) -> None:
    """The keys that treat the classifier apart (``MODEL.FREEZE_BACKBONE``,
    ``TRAIN.BACKBONE_LR_MULT`` other than 1) need the right layer: a model that names none
    (its last ``nn.Linear`` is taken) whose layer has no ``NUM_CLASSES`` outputs stops with one
    line (:func:`zoo.models.classifier.checked_classifier`). Nothing is checked with both off."""
    from ..models.classifier import checked_classifier

    uses = []
    if cfg.CONFIG.MODEL.FREEZE_BACKBONE:
        uses.append("CONFIG.MODEL.FREEZE_BACKBONE True")
    if cfg.CONFIG.TRAIN.BACKBONE_LR_MULT != 1:
        uses.append(f"CONFIG.TRAIN.BACKBONE_LR_MULT {cfg.CONFIG.TRAIN.BACKBONE_LR_MULT:g}")
    if uses:
        checked_classifier(model, cfg.CONFIG.DATA.NUM_CLASSES, " and ".join(uses),
                           cfg.CONFIG.MODEL.NAME)


def head_parameter_ids(model: nn.Module) -> Set[int]:
    return {id(p) for p in classifier_module(model).parameters()}


def freeze_backbone(model: nn.Module) -> List[str]:
    """Stop gradients to every parameter outside the classifier; returns the frozen names."""
    head = head_parameter_ids(model)
    frozen = []
    for name, p in model.named_parameters():
        if id(p) not in head:
            p.requires_grad_(False)
            frozen.append(name)
    return frozen


def freeze_bn(model: nn.Module) -> int:
    """Put every BatchNorm in eval mode for good (statistics fixed) and freeze its affine params.

    Returns the number of BatchNorm layers frozen.
    """
    count = 0
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            for p in module.parameters():
                p.requires_grad_(False)
            module.eval()
            # model.train() would switch it back; pin its training flag to False.
            module.train = _stay_eval.__get__(module)
            count += 1
    return count


def _stay_eval(self: nn.Module, mode: bool = True) -> nn.Module:
    self.training = False
    return self
