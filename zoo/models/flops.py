"""Parameter and FLOP counts of registered models, measured on the ``meta`` device.

A model built under ``torch.device("meta")`` has shapes but no storage, so even the R101 nets are
built and "run" in well under a second: ``torch.utils.flop_counter`` counts from shapes alone.
GFLOPs are reported as multiply-adds / 1e9 (half of FlopCounterMode's count), the convention of
PySlowFast, torchvision's ``_ops`` metadata and most papers.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode

from .build import create_model
from .registry import model_facts

__all__ = ["count_gflops", "count_params", "facts_input_shape", "measure"]


def count_params(model: nn.Module) -> int:
    """Number of parameters (trainable or not)."""
    return sum(p.numel() for p in model.parameters())


def facts_input_shape(facts: Dict[str, Any], batch: int = 1) -> Tuple[int, ...]:
    """The input a model's facts describe: ``(B, 3, H, W)`` for images, else ``(B, 3, T, H, W)``."""
    crop = facts["crop_size"]
    if facts.get("task") == "image":
        return (batch, 3, crop, crop)
    return (batch, 3, facts["input_frames"], crop, crop)


def count_gflops(model: nn.Module, input_shape: Tuple[int, ...]) -> float:
    """Multiply-adds (in 1e9) of one forward pass of ``model`` in eval mode.

    Args:
        model: Any module; on the meta device nothing is computed.
        input_shape: Shape of the input tensor.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(torch.zeros(input_shape, device=device))
    finally:
        model.train(was_training)
    return counter.get_total_flops() / 2e9


def measure(name: str, **kwargs: Any) -> Dict[str, Any]:
    """Params and GFLOPs of a registered model at the input its facts describe.

    The class count is 1000 for image models and 400 for video models (the convention of the
    published numbers), unless ``num_classes`` is given or the facts fix one (an alias such as
    ``*_sthsthv2``).
    """
    facts = model_facts(name)
    default = 1000 if facts.get("task") == "image" else 400
    kwargs.setdefault("num_classes", facts.get("num_classes") or default)
    with torch.device("meta"):
        model = create_model(name, **kwargs)
    return {"params": count_params(model),
            "gflops": count_gflops(model, facts_input_shape(facts))}
