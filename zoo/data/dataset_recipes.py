"""``DATASET_REGISTRY`` entries: a records provider (:mod:`zoo.data.lists.providers`: which
videos, labels and class names) composed with the one :class:`~zoo.data.video_dataset.ClipDataset`,
registered under a name ``CONFIG.DATA.DATASET`` can select; and the default entry,
``VideoListDataset``."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Sequence, Type, Union

from .clip_settings import ClipSettings
from .lists.providers import AnnotationListRecords, ListSource, RecordsProvider
from .registry import DATASET_REGISTRY
from .video_dataset import ClipDataset

__all__ = ["DatasetRecipe", "VideoListDataset", "register_dataset"]


class DatasetRecipe:
    """A ``DATASET_REGISTRY`` entry: a records provider composed with :class:`ClipDataset`.

    Called like every entry, as ``recipe(**dataset_kwargs(cfg, split)) -> ClipDataset``: the
    list keywords go to the provider (a :class:`~zoo.data.lists.providers.ListSource`), the others
    are :class:`ClipSettings` fields (an unknown keyword is a TypeError).

    Args:
        name: The registered name (``CONFIG.DATA.DATASET``).
        provider: Reads the records.
        fixed: Settings this source always uses, whatever the config says (images are one-frame
            clips read by the "image" decoder); :class:`ClipSettings` field names.
    """

    def __init__(self, name: str, provider: RecordsProvider,
                 fixed: Optional[Mapping[str, Any]] = None) -> None:
        names = {f.name for f in dataclasses.fields(ClipSettings)}
        unknown = sorted(set(fixed or {}) - names)
        if unknown:
            raise TypeError(f"{name}: {', '.join(unknown)} are not ClipSettings fields")
        self.__name__ = name
        self.provider = provider
        self.fixed = dict(fixed or {})

    def __call__(self, anno_path: str, data_path: str, split: str, *, list_format: str = "auto",
                 official_split: int = 1, classes: Sequence[str] = (),
                 **settings: Any) -> ClipDataset:
        clip_settings = ClipSettings(**{**settings, **self.fixed})
        return ClipDataset(self.read(anno_path, data_path, split, list_format=list_format,
                                     official_split=official_split, classes=classes,
                                     decoder=clip_settings.decoder), split, clip_settings)

    def read(self, anno_path: str, data_path: str, split: str, *, list_format: str = "auto",
             official_split: int = 1, classes: Sequence[str] = (), decoder: str = "auto",
             **_settings: Any):
        """The split's records as the provider reads them (no dataset, no clip settings):
        takes the same keywords as a call, so ``recipe.read(**dataset_kwargs(cfg, split))``."""
        decoder = self.fixed.get("decoder", decoder)
        return self.provider.read(ListSource(anno_path, data_path, split, list_format,
                                             official_split, decoder, tuple(classes)))

    def __repr__(self) -> str:
        return f"DatasetRecipe({self.__name__!r}, {self.provider!r}, fixed={self.fixed})"


def register_dataset(name: str, provider: Union[RecordsProvider, Type[RecordsProvider], None]
                     = None, **fixed: Any) -> Any:
    """Register ``provider`` + :class:`ClipDataset` in ``DATASET_REGISTRY`` as ``name``.

    Works as a decorator on a :class:`~zoo.data.lists.providers.RecordsProvider` subclass (built
    with no arguments) or called with a provider (an instance, for a provider with options)::

        @register_dataset("MyDataset")
        class MyRecords(RecordsProvider):
            def read(self, source): ...

        register_dataset("MyFrames", AnnotationListRecords(), decoder="frames")

    Args:
        name: What ``CONFIG.DATA.DATASET`` names.
        provider: The provider; None = return a decorator.
        **fixed: :class:`ClipSettings` this dataset always uses (see :class:`DatasetRecipe`).

    Returns:
        The provider (so the decorator leaves the class as it is).
    """
    def register(p: Union[RecordsProvider, Type[RecordsProvider]]) -> Any:
        instance = p() if isinstance(p, type) else p
        if not isinstance(instance, RecordsProvider):
            raise TypeError(f"register_dataset({name!r}): {p!r} is not a RecordsProvider")
        DATASET_REGISTRY.register(DatasetRecipe(name, instance, fixed), name=name)
        return p

    return register if provider is None else register(provider)


# A text list in ``list_format`` (gluoncv ``path num_frames label``, MMAction2, PySlowFast), a CSV
# with a header (``path,label[,start,end]``) or a folder of class sub-folders; class names from
# ``classes.txt`` beside the list. With ``decoder="frames"`` the list's paths are folders of
# extracted frames (the gluoncv / MMAction2 "rawframes" layout, files named by ``frame_template``).
register_dataset("VideoListDataset", AnnotationListRecords())
VideoListDataset: DatasetRecipe = DATASET_REGISTRY.get("VideoListDataset")
