"""Pretrained weights: the published-weights table, resolving and downloading, loading into a
model, and the checkpoint converters.

Layout (each module imports only those listed before it, and the registry below them all):

* :mod:`.table`: published weights by architecture and tag (URL, format, hash); reads the
  registry's facts for aliases.
* :mod:`.download`: what ``MODEL.PRETRAINED`` means (:func:`resolve_pretrained`), the download
  into the ``$ZOO_HOME/weights`` cache (:func:`fetch`), :class:`WeightsError`.
* :mod:`.preprocessor`: the input normalisation a Hugging Face folder's
  ``preprocessor_config.json`` records, for empty ``DATA.MEAN`` / ``STD``.
* :mod:`.convert`: other projects' key schemes -> zoo's (PySlowFast, PyTorchVideo, MMAction2,
  torchvision, gluoncv.torch); builds the meta models it needs from the registry.
* :mod:`.load`: reading a checkpoint, telling its format, loading it with the head
  re-initialised when the class count differs (:func:`~.load.load_pretrained`); 2D -> 3D
  inflation from a file.

:mod:`zoo.models.build` imports this package; nothing here imports it. The names below are the
ones ``zoo.models.weights`` had as a single module; importing the package loads only the table
and the download code.
"""

from .download import (
    WeightsError,
    WeightsSource,
    cache_path,
    fetch,
    mirror_url,
    resolve_pretrained,
    weights_home,
)

__all__ = ["WeightsError", "WeightsSource", "weights_home", "resolve_pretrained", "fetch",
           "mirror_url", "cache_path"]
