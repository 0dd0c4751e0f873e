"""Published weights by architecture and tag: the publisher's URL, file format and hash.

``CONFIG.MODEL.PRETRAINED kinetics400`` (or ``True``, the architecture's default tag) looks the
model up here; :mod:`zoo.models.weights.download` downloads the file and
:mod:`zoo.models.weights.load` converts it from its format in memory. Only files a zoo converter
reads are listed, and only URLs found in the publisher's own code or documentation; the comment
above each group says where.

Not listed, and why:

* PySlowFast's Kinetics model zoo (``dl.fbaipublicfiles.com/pyslowfast/model_zoo/kinetics400/
  SLOWFAST_4x16_R50.pkl``, ``SLOWFAST_8x8_R50.pkl``, ``I3D_8x8_R50.pkl``, ``SLOWONLY_8x8_R50.pkl``,
  MODEL_ZOO.md) are Caffe2 pickles, which ``torch.load(weights_only=True)`` cannot read. The same
  architectures trained by PySlowFast are published by PyTorchVideo as ``.pyth`` files (below).
* PySlowFast's MViTv1-B 16x4 (MODEL_ZOO.md links a Google Drive page, not a file URL) and
  PyTorchVideo's ``MVIT_B_32x3_f294077834.pyth`` (16 blocks at 32 frames: no registered name has
  that shape; ``mvit_v1_b_16x4`` with ``frames=32`` loads it from a local path).
* PyTorchVideo's C2D, CSN and R(2+1)D-50 files, MMAction2's TSN / R(2+1)D files: zoo has no
  architecture whose keys they fit. MMAction2's SlowFast R101 8x8 uses lateral kernel 7 (its
  config inherits the R50 8x8 one), zoo's ``slowfast_8x8_resnet101`` (PySlowFast's) uses 5.

Hugging Face Hub entries (format ``huggingface``) name the weights file
(``https://huggingface.co/<repo>/resolve/main/model.safetensors``); the loader downloads the
``config.json`` beside it on the server into the cache beside the file and checks it against
the model being built (the Hub publishes no hash in its URLs: ``hash`` is empty).

``hash`` is the published hash, or the prefix of it that the publisher puts in the file name
(torchvision and OpenMMLab name files ``NAME-<first 8 hex of sha256>.pth``); empty when the
publisher gives none. ``hash_algo`` says which: ``sha256``, or ``sha1`` for gluoncv.torch, whose
``model_store.py`` lists each file's full SHA-1 and names it ``NAME-<first 8 hex of sha1>.pth``.

Aliases (other projects' model names) share their base architecture's entries:
:func:`register_alias`, or a ``weights_of`` / ``alias_of`` fact on the registered builder. An
alias may also have entries of its own (gluoncv's names: the file gluoncv publishes for that
name); a tag of its own replaces the base's tag of the same name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

from ..registry import MODEL_REGISTRY, model_facts

__all__ = ["WeightsEntry", "WEIGHTS", "DEFAULT_TAGS", "FORMATS", "GLUONCV_SHA1", "HASH_ALGOS",
           "base_architecture", "default_tag", "entries", "register_alias", "table_rows"]

# File formats load.py recognises (and converts with zoo.models.weights.convert).
FORMATS = ("zoo", "pyslowfast", "pytorchvideo", "mmaction2", "torchvision", "gluoncv",
           "huggingface")

# Hash algorithms the download check knows (hashlib names).
HASH_ALGOS = ("sha256", "sha1")


@dataclass(frozen=True)
class WeightsEntry:
    """One published weights file.

    Attributes:
        url: The publisher's URL.
        format: One of :data:`FORMATS`: how the file's keys are named.
        dataset: What the weights were trained on (``kinetics400``, ``imagenet1k``).
        hash: Published hash or a prefix of it ("" = none published).
        source: Where the URL was found.
        note: What a user should know (e.g. an inexact conversion).
        hash_algo: The algorithm of ``hash``: one of :data:`HASH_ALGOS`.
        new_head: Re-initialise the classifier whatever the class count (gluoncv's ``_custom``
            nets start from a Kinetics net's backbone only).
    """

    url: str
    format: str
    dataset: str
    hash: str = ""
    source: str = ""
    note: str = ""
    hash_algo: str = "sha256"
    new_head: bool = False


# PyTorchVideo model zoo (docs/source/model_zoo.md, Kinetics-400 table; the hub's slowfast.py and
# resnet.py load the same URLs and read checkpoint["model_state"]). Trained with PySlowFast; the
# keys are PyTorchVideo's. No hash published. The hub (pytorchvideo 0.1.5 models/hub) loads all
# but SLOWFAST_4x16_R50 itself; a file whose keys all start with "model." (PySlowFast's wrapper
# of a PyTorchVideo net) is read too.
_PTV = "https://dl.fbaipublicfiles.com/pytorchvideo/model_zoo/kinetics/"
_PTV_SRC = "pytorchvideo docs/source/model_zoo.md"

# torchvision (torchvision/models/video/*.py and resnet.py, the Weights(url=...) of each enum;
# torchvision 0.29.2). File names end in the first 8 hex digits of the file's SHA-256 (what
# torch.hub's check_hash verifies).
_TV = "https://download.pytorch.org/models/"
_TV_SRC = "torchvision {}.{}"

# PySlowFast's X3D files (MODEL_ZOO.md, Kinetics table: x3d_models/x3d_{xs,s,m,l}.pyth): the
# published 69.5 / 73.5 / 76.2 / 77.5 top-1 are theirs. PySlowFast's .pyth is a torch.save of a dict
# whose "model_state" holds PySlowFast's keys. No hash published.
_PSF_X3D = "https://dl.fbaipublicfiles.com/pyslowfast/x3d_models/"
_PSF_X3D_SRC = "SlowFast MODEL_ZOO.md"


def _x3d(size: str) -> Dict[str, WeightsEntry]:
    """X3D-``size``: PySlowFast's file (the default) and PyTorchVideo's (its hub's x3d.py URL)."""
    return {
        "kinetics400": WeightsEntry(f"{_PSF_X3D}x3d_{size}.pyth", "pyslowfast", "kinetics400",
                                    source=_PSF_X3D_SRC),
        "kinetics400-pytorchvideo": WeightsEntry(
            f"{_PTV}X3D_{size.upper()}.pyth", "pytorchvideo", "kinetics400",
            source="pytorchvideo models/hub/x3d.py",
            note="PyTorchVideo's X3D has no BN on the stage-2 shortcut: build with "
                 "MODEL.KWARGS ['shortcut_bn', 'width_change'] (its network)"),
    }


# MMAction2 1.x (configs/recognition/slowfast/README.md, Kinetics-400 table; their configs: R50
# 4x16 = _base_/models/slowfast_r50.py, lateral kernel 5 by default; R50 8x8 sets alpha 4 and
# fusion_kernel 7: the same shapes as zoo's two R50 SlowFasts). File names end in
# the first 8 hex digits of the file's SHA-256 (tools/misc/publish_model.py: sha256sum, [:8]).
_MMA = "https://download.openmmlab.com/mmaction/v1.0/recognition/slowfast/"
_MMA_SRC = "mmaction2 configs/recognition/slowfast/README.md"
_MMA_NOTE = ("MMAction2 laterals have no BN/ReLU: build with MODEL.KWARGS ['fuse_norm_act', "
             "'False'] for MMAction2's exact network")


def _tv(file: str, hash8: str, enum: str, dataset: str = "kinetics400",
        where: str = "models.video.") -> WeightsEntry:
    return WeightsEntry(_TV + file, "torchvision", dataset, hash8,
                        _TV_SRC.format(where.rstrip("."), enum))


def _mma(stem: str, date_hash: str) -> WeightsEntry:
    return WeightsEntry(f"{_MMA}{stem}/{stem}_{date_hash}.pth", "mmaction2", "kinetics400",
                        date_hash.split("-")[1], _MMA_SRC, _MMA_NOTE)


# MMAction2 1.x Video Swin (configs/recognition/swin/README.md and metafile.yml, Kinetics-400
# table): trained by MMAction2 from ImageNet-1k Swin nets (top-1 78.90 / 80.54 / 80.57 for T / S /
# B, 4 clips x 3 crops); keys converted by zoo/models/weights/convert/mmaction2_swin.py.
_MMA_SWIN = "https://download.openmmlab.com/mmaction/v1.0/recognition/swin/"
_MMA_SWIN_SRC = "mmaction2 configs/recognition/swin/README.md"


def _mma_swin(size: str, date_hash: str) -> WeightsEntry:
    stem = f"swin-{size}-p244-w877_in1k-pre_8xb8-amp-32x2x1-30e_kinetics400-rgb"
    return WeightsEntry(f"{_MMA_SWIN}{stem}/{stem}_{date_hash}.pth", "mmaction2", "kinetics400",
                        date_hash.split("-")[1], _MMA_SWIN_SRC)
# Hugging Face Hub: MCG-NJU's VideoMAE fine-tuned on Kinetics-400, converted from VideoMAE's own
# checkpoints by transformers' convert_videomae_to_pytorch.py (which names
# videomae-{small,base,large}-finetuned-kinetics; the base one is the example of transformers'
# VideoMAEForVideoClassification docstring). Safetensors; the Hub's URLs carry no hash.
_HF_VIDEOMAE = "https://huggingface.co/MCG-NJU/videomae-{}-finetuned-kinetics/resolve/main/"
_HF_SRC = "transformers models/videomae/convert_videomae_to_pytorch.py, modeling_videomae.py"


def _hf_videomae(size: str, note: str = "") -> WeightsEntry:
    return WeightsEntry(_HF_VIDEOMAE.format(size) + "model.safetensors", "huggingface",
                        "kinetics400", "", _HF_SRC, note)


# MMAction2 1.x VideoMAE V2 (configs/recognition/videomaev2/README.md, Kinetics-400 table):
# ViT-S / ViT-B distilled from VideoMAE V2-g on Kinetics-710, then fine-tuned on Kinetics-400
# (top-1 83.6 / 86.6), ported from OpenGVLab/VideoMAEv2. Same network as VideoMAE's; the hash
# is the first 8 hex digits of the file's SHA-256.
_MMA_V2 = "https://download.openmmlab.com/mmaction/v1.0/recognition/videomaev2/"
_MMA_V2_SRC = "mmaction2 configs/recognition/videomaev2/README.md"


def _mma_v2(size: str, date_hash: str) -> WeightsEntry:
    stem = f"vit-{size}-p16_videomaev2-vit-g-dist-k710-pre_16x4x1_kinetics-400"
    return WeightsEntry(f"{_MMA_V2}{stem}/{stem}_{date_hash}.pth", "mmaction2", "kinetics400",
                        date_hash.split("-")[1], _MMA_V2_SRC,
                        "VideoMAE V2-g distilled (Kinetics-710), fine-tuned on Kinetics-400")


# PySlowFast's MViT files (projects/mvitv2/README.md, Kinetics-400 table; MODEL_ZOO.md for
# MViTv1-B 32x3): .pyth with model_state, keys = zoo's MViT names. No hash published.
_PYSF_MVIT = "https://dl.fbaipublicfiles.com/pyslowfast/model_zoo/"
_PYSF_MVIT_SRC = "SlowFast projects/mvitv2/README.md"


def _pysf(path: str, source: str = _PYSF_MVIT_SRC, note: str = "") -> WeightsEntry:
    return WeightsEntry(_PYSF_MVIT + path, "pyslowfast", "kinetics400", source=source, note=note)


_RESNET50_V1 = _tv("resnet50-0676ba61.pth", "0676ba61", "ResNet50_Weights.IMAGENET1K_V1",
                   "imagenet1k", "models.")
_RESNET50_NOTE = "ImageNet ResNet-50 inflated to 3D (each 2D kernel spread over time)"

WEIGHTS: Dict[str, Dict[str, WeightsEntry]] = {
    "slowfast_4x16_resnet50": {
        "kinetics400": WeightsEntry(_PTV + "SLOWFAST_4x16_R50.pyth", "pytorchvideo",
                                    "kinetics400", source=_PTV_SRC),
        "kinetics400-mmaction2": _mma("slowfast_r50_8xb8-4x16x1-256e_kinetics400-rgb",
                                      "20220901-701b0f6f"),
    },
    "slowfast_8x8_resnet50": {
        "kinetics400": WeightsEntry(_PTV + "SLOWFAST_8x8_R50.pyth", "pytorchvideo",
                                    "kinetics400", source=_PTV_SRC),
        "kinetics400-mmaction2": _mma("slowfast_r50_8xb8-8x8x1-256e_kinetics400-rgb",
                                      "20220818-1cb6dfc8"),
    },
    "slowfast_8x8_resnet101": {
        "kinetics400": WeightsEntry(_PTV + "SLOWFAST_8x8_R101.pyth", "pytorchvideo",
                                    "kinetics400", source=_PTV_SRC),
    },
    "slowfast_16x8_resnet101": {
        "kinetics400": WeightsEntry(_PTV + "SLOWFAST_16x8_R101_50_50.pyth", "pytorchvideo",
                                    "kinetics400", source=_PTV_SRC),
    },
    "slow_8x8_resnet50": {
        "kinetics400": WeightsEntry(_PTV + "SLOW_8x8_R50.pyth", "pytorchvideo", "kinetics400",
                                    source=_PTV_SRC),
        "imagenet1k": WeightsEntry(_RESNET50_V1.url, "torchvision", "imagenet1k",
                                   _RESNET50_V1.hash, _RESNET50_V1.source, _RESNET50_NOTE),
    },
    "i3d_resnet50": {
        "kinetics400": WeightsEntry(_PTV + "I3D_8x8_R50.pyth", "pytorchvideo", "kinetics400",
                                    source=_PTV_SRC),
        "imagenet1k": WeightsEntry(_RESNET50_V1.url, "torchvision", "imagenet1k",
                                   _RESNET50_V1.hash, _RESNET50_V1.source, _RESNET50_NOTE),
    },
    **{f"x3d_{size}": _x3d(size) for size in ("xs", "s", "m", "l")},
    "r2plus1d_16x4_resnet50": {
        "kinetics400": WeightsEntry(_PTV + "R2PLUS1D_16x4_R50.pyth", "pytorchvideo",
                                    "kinetics400", source="pytorchvideo models/hub/r2plus1d.py"),
    },
    "r3d_18": {"kinetics400": _tv("r3d_18-b3b3357e.pth", "b3b3357e",
                                  "R3D_18_Weights.KINETICS400_V1")},
    "mc3_18": {"kinetics400": _tv("mc3_18-a90a0ba3.pth", "a90a0ba3",
                                  "MC3_18_Weights.KINETICS400_V1")},
    "r2plus1d_18": {"kinetics400": _tv("r2plus1d_18-91a641e6.pth", "91a641e6",
                                       "R2Plus1D_18_Weights.KINETICS400_V1")},
    # zoo's own R(2+1)D-18 has torchvision's keys, so torchvision's file fits it unchanged.
    "r2plus1d_resnet18": {"kinetics400": _tv("r2plus1d_18-91a641e6.pth", "91a641e6",
                                             "R2Plus1D_18_Weights.KINETICS400_V1")},
    "s3d": {"kinetics400": _tv("s3d-d76dad2f.pth", "d76dad2f", "S3D_Weights.KINETICS400_V1")},
    # torchvision's file is PySlowFast's MViTv2-S ported (top-1 80.757 in torchvision's metadata).
    "mvit_v2_s": {"kinetics400": _tv("mvit_v2_s-ae3be167.pth", "ae3be167",
                                     "MViT_V2_S_Weights.KINETICS400_V1"),
                  "kinetics400-pyslowfast": _pysf(
                      "mvitv2/pysf_video_models/MViTv2_S_16x4_k400_f302660347.pyth")},
    "mvit_v2_b": {"kinetics400": _pysf(
        "mvitv2/pysf_video_models/MViTv2_B_32x3_k400_f304025456.pyth")},
    "mvit_v2_l": {"kinetics400": _pysf(
        "mvitv2/pysf_video_models/MViTv2_L_40x3_k400_f306903192.pyth")},
    "mvit_v1_b_16x4": {
        "kinetics400": _tv("mvit_v1_b-dbeb1030.pth", "dbeb1030",
                           "MViT_V1_B_Weights.KINETICS400_V1"),
        "kinetics400-pytorchvideo": WeightsEntry(
            _PTV + "MVIT_B_16x4.pyth", "pytorchvideo", "kinetics400",
            source="pytorchvideo 0.1.5 models/hub/vision_transformers.py",
            note="PyTorchVideo normalises pooled tokens with eps 1e-5 (zoo 1e-6)"),
    },
    "mvit_v1_b_32x3": {"kinetics400": _pysf("mvit/k400.pyth", "SlowFast MODEL_ZOO.md")},
    # PySlowFast's projects/rev/README.md (Kinetics 400 table): keys = zoo's reversible MViT.
    "mvit_rev_b_16x4": {"kinetics400": WeightsEntry(
        "https://dl.fbaipublicfiles.com/pyslowfast/rev/REV_MVIT_B_16x4.pyth", "pyslowfast",
        "kinetics400", source="SlowFast projects/rev/README.md")},
    # zoo's swin3d_* have torchvision's keys: torchvision's files load unchanged.
    "swin3d_t": {
        "kinetics400": _tv("swin3d_t-7615ae03.pth", "7615ae03", "Swin3D_T_Weights.KINETICS400_V1"),
        "kinetics400-mmaction2": _mma_swin("tiny", "20220930-241016b2"),
    },
    "swin3d_s": {
        "kinetics400": _tv("swin3d_s-da41c237.pth", "da41c237", "Swin3D_S_Weights.KINETICS400_V1"),
        "kinetics400-mmaction2": _mma_swin("small", "20220930-e91ab986"),
    },
    "swin3d_b": {
        "kinetics400": _tv("swin3d_b_1k-24f7c7c6.pth", "24f7c7c6",
                           "Swin3D_B_Weights.KINETICS400_V1"),
        "kinetics400-mmaction2": _mma_swin("base", "20220930-182ec6cc"),
    },
    "resnet18": {"imagenet1k": _tv("resnet18-f37072fd.pth", "f37072fd",
                                   "ResNet18_Weights.IMAGENET1K_V1", "imagenet1k", "models.")},
    "resnet34": {"imagenet1k": _tv("resnet34-b627a593.pth", "b627a593",
                                   "ResNet34_Weights.IMAGENET1K_V1", "imagenet1k", "models.")},
    "resnet50": {
        "imagenet1k": _RESNET50_V1,
        "imagenet1k-v2": _tv("resnet50-11ad3fa6.pth", "11ad3fa6",
                             "ResNet50_Weights.IMAGENET1K_V2", "imagenet1k", "models."),
    },
    "resnet101": {
        "imagenet1k": _tv("resnet101-63fe2227.pth", "63fe2227",
                          "ResNet101_Weights.IMAGENET1K_V1", "imagenet1k", "models."),
        "imagenet1k-v2": _tv("resnet101-cd907fc2.pth", "cd907fc2",
                             "ResNet101_Weights.IMAGENET1K_V2", "imagenet1k", "models."),
    },
    "resnet152": {
        "imagenet1k": _tv("resnet152-394f9c45.pth", "394f9c45",
                          "ResNet152_Weights.IMAGENET1K_V1", "imagenet1k", "models."),
        "imagenet1k-v2": _tv("resnet152-f82ba261.pth", "f82ba261",
                             "ResNet152_Weights.IMAGENET1K_V2", "imagenet1k", "models."),
    },
    "videomae_vit_s": {
        "kinetics400": _hf_videomae(
            "small", "transformers' converter sets 16 heads for small, VideoMAE's ViT-S has 6: "
            "a config.json saying 16 stops with the key named"),
        "kinetics400-v2-distilled": _mma_v2("small", "20230510-25c748fd"),
    },
    "videomae_vit_b": {
        "kinetics400": _hf_videomae("base"),
        "kinetics400-v2-distilled": _mma_v2("base", "20230510-3e7f93b2"),
    },
    "videomae_vit_l": {"kinetics400": _hf_videomae("large")},
    # TSN's backbone is a torchvision ResNet-50 (same keys); no Kinetics TSN in a readable format.
    "tsn_resnet50": {"imagenet1k": _RESNET50_V1},
}

# What PRETRAINED True loads: Kinetics-400 weights for video models, ImageNet for image models.
# An architecture without a default (TSN, whose only weights are an ImageNet backbone) makes True
# an error that lists its tags, rather than silently loading something other than Kinetics.
DEFAULT_TAGS: Dict[str, str] = {
    name: ("imagenet1k" if name.startswith("resnet") else "kinetics400")
    for name, tags in WEIGHTS.items()
    if ("imagenet1k" if name.startswith("resnet") else "kinetics400") in tags
}

# gluoncv.torch's own PyTorch weights (gluoncv/torch/model_zoo/model_store.py, gluoncv
# 0.10.5.post0: _model_sha1, apache_repo_url + "torch/models/{name}-{sha1[:8]}.pth"; its
# action-recognition builders load get_model_file(NAME)). Keys are gluoncv's
# (zoo.models.weights.convert.gluoncv). Each is listed under gluoncv's model name, tagged by the
# name's suffix (kinetics400, kinetics700, sthsthv2), which PRETRAINED True then means.
_GCV = "https://apache-mxnet.s3-accelerate.dualstack.amazonaws.com/torch/models/"
_GCV_SRC = "gluoncv 0.10.5.post0 gluoncv/torch/model_zoo/model_store.py"
GLUONCV_SHA1: Dict[str, str] = {
    "resnet18_v1b_kinetics400": "854b23e460ab1fbc5a5cd458b439a90be1f98119",
    "resnet34_v1b_kinetics400": "124a2fa45fce7102243515bdebfb262728c10ad0",
    "resnet50_v1b_kinetics400": "9939dbdfdbf11cb42c06456f341596e75becf074",
    "resnet101_v1b_kinetics400": "172afa3bcc5e922962c335b6ea9b7cedc8132c61",
    "resnet152_v1b_kinetics400": "3dedb835f333e234a9279bbef4a9e2e840acc032",
    "resnet50_v1b_sthsthv2": "cbb9167bd293a82475f5f179a29de1f5c2665b8a",
    "i3d_resnet50_v1_kinetics400": "185454973645ff66b6310e715863384db135d87f",
    "i3d_resnet101_v1_kinetics400": "a9bb4f89551c30d553a487fcc560ff7f41a3de8c",
    "i3d_nl5_resnet50_v1_kinetics400": "9df1e103d54bc1227da58d19347e1371cf98a9fb",
    "i3d_nl10_resnet50_v1_kinetics400": "281e1e8a8ef78ada7e095b43caf0cd3f75e7a6a4",
    "i3d_nl5_resnet101_v1_kinetics400": "2cea8edd07e5565b9c1eb66ca862ade3127ce523",
    "i3d_nl10_resnet101_v1_kinetics400": "526a2ed07cffeab6d827ab28c979b537100cd2b3",
    "i3d_resnet50_v1_sthsthv2": "e975d989c1eb1e66e5be36c1c4d6ff626708cfae",
    "slowfast_4x16_resnet50_kinetics400": "1d1eadb258ccfc0c117db0ff0eaf1638d18405b3",
    "slowfast_8x8_resnet50_kinetics400": "e94e9a57eaa2f4dde12673bc6632f9aa090d8c21",
    "slowfast_8x8_resnet101_kinetics400": "db5e9fef55b28eb55b6dc7b2cba98d0c14fc3568",
    "slowfast_16x8_resnet50_sthsthv2": "0520323165727d59002c6c62071bc1dc28248469",
    "i3d_slow_resnet50_f32s2_kinetics400": "078c817bf18d702891de553de61c9115e27c4afd",
    "i3d_slow_resnet50_f16s4_kinetics400": "a3e419f1b9cde3b57b9b19a9bd93281bb819a871",
    "i3d_slow_resnet50_f8s8_kinetics400": "1c3d98a1831ee477def36d6085635c2860db0b77",
    "i3d_slow_resnet101_f32s2_kinetics400": "db37cd518eab5f1cc394d0f44117c392d0174602",
    "i3d_slow_resnet101_f16s4_kinetics400": "cb6b78d9e58f7724efb63f705be7c8a12fe8f5ce",
    "i3d_slow_resnet101_f16s4_kinetics700": "b5be1a2e32158748a7efc675081affd32006fe9a",
    "i3d_slow_resnet101_f8s8_kinetics400": "82e399c1114016126645c5e3e67bad164ba3ae84",
    "r2plus1d_v1_resnet18_kinetics400": "340a59522b4ffe7e3621ad4a269e4cd4a99f74b2",
    "r2plus1d_v1_resnet34_kinetics400": "5102fd1736a2a205f5fd7bded5d2e0d2e5ca6307",
    "r2plus1d_v1_resnet50_kinetics400": "9a3b665c182f81f22d4a105c75fac030ad20a628",
    "r2plus1d_v2_resnet152_kinetics400": "42707ffcab518cdda93523004360de167863c5d8",
    "ircsn_v2_resnet152_f32s2_kinetics400": "82855d2c85a888e96477130253b90a4892bdc649",
    "tpn_resnet50_f8s8_kinetics400": "368108eb6bca9143318937319c3efec09e0419af",
    "tpn_resnet50_f16s4_kinetics400": "6bf899df92224d3c0c117c940ef0c95d51fedb26",
    "tpn_resnet50_f32s2_kinetics400": "27710ce8091a317f50fc55e171b29c096b3d253e",
    "tpn_resnet101_f8s8_kinetics400": "092c2f7fc98ec9ea204487fa074bc0ca832aba9a",
    "tpn_resnet101_f16s4_kinetics400": "647080df950480e6544e6cd471f0024125656593",
    "tpn_resnet101_f32s2_kinetics400": "a94422a94acda20f34eb07604cd3315307d1a9a2",
}
_GCV_TAGS = ("kinetics400", "kinetics700", "sthsthv2")
_GCV_CUSTOM_NOTE = ("gluoncv's _custom: the classifier is re-initialised for the data's classes "
                    "(TPN's auxiliary head too)")


def _gluoncv_entry(name: str, tag: str, custom: bool = False) -> WeightsEntry:
    sha1 = GLUONCV_SHA1[name]
    return WeightsEntry(f"{_GCV}{name}-{sha1[:8]}.pth", "gluoncv", tag, sha1, _GCV_SRC,
                        _GCV_CUSTOM_NOTE if custom else "", hash_algo="sha1", new_head=custom)


def _add_gluoncv() -> None:
    """gluoncv's names get their own files; ``BASE_custom`` gets every file of ``BASE_*`` with a
    fresh head, and PRETRAINED True means the Kinetics-400 one (as gluoncv's _custom builders
    load ``BASE_kinetics400``'s file without its classifier)."""
    for name in GLUONCV_SHA1:
        base, tag = name.rsplit("_", 1)
        WEIGHTS[name] = {tag: _gluoncv_entry(name, tag)}
        DEFAULT_TAGS[name] = tag
        custom = WEIGHTS.setdefault(f"{base}_custom", {})
        custom[tag] = _gluoncv_entry(name, tag, custom=True)
        if tag == "kinetics400":
            DEFAULT_TAGS[f"{base}_custom"] = tag


_add_gluoncv()

# Other names of an architecture (e.g. gluoncv's): alias -> base name. See register_alias.
_ALIASES: Dict[str, str] = {}


def register_alias(alias: str, base: str) -> None:
    """Let the model name ``alias`` use the weights published for ``base``."""
    _ALIASES[alias] = base


def base_architecture(name: str) -> str:
    """The architecture whose weights ``name`` uses: itself, or the base of an alias.

    Follows :func:`register_alias` first, then a ``weights_of`` or ``alias_of`` fact registered
    beside the model's builder.
    """
    seen = set()
    while name not in seen:
        seen.add(name)
        if name in _ALIASES:
            name = _ALIASES[name]
            continue
        base = _fact_base(name)
        if not base:
            break
        name = base
    return name


def _fact_base(name: str) -> Optional[str]:
    if name not in MODEL_REGISTRY.names():
        return None
    facts = model_facts(name)
    return facts.get("weights_of") or facts.get("alias_of")


def _inherits_video_weights(name: str) -> bool:
    """False for an alias whose input or layers differ from its base's (its ``inherits_weights``
    fact): the base's video-trained files have the right shapes but were trained for another
    net, so only image-trained (input-agnostic, inflated) files carry over."""
    return name not in MODEL_REGISTRY.names() or model_facts(name).get("inherits_weights", True)


# Datasets of image-trained files: these fit any input length (they are inflated or per-frame).
_IMAGE_DATASETS = ("imagenet1k",)


def entries(name: str) -> Dict[str, WeightsEntry]:
    """Tag -> entry for the model ``name``: an alias gets its base's, then its own (which win
    over a base tag of the same name); empty when none."""
    out = dict(WEIGHTS.get(base_architecture(name), {}))
    if not _inherits_video_weights(name):
        out = {tag: e for tag, e in out.items() if e.dataset in _IMAGE_DATASETS}
    out.update(WEIGHTS.get(name, {}))
    return out


def default_tag(name: str) -> Optional[str]:
    """The tag ``PRETRAINED True`` means for ``name`` (None: no default published). An alias with
    files of its own defaults to its own tag; one without, to its base's (if it may use it)."""
    if name in WEIGHTS:
        return DEFAULT_TAGS.get(name)
    tag = DEFAULT_TAGS.get(base_architecture(name))
    return tag if tag in entries(name) else None


def table_rows(names: Optional[List[str]] = None) -> List[Dict[str, str]]:
    """One row of strings per (architecture, tag), for tools/list_models.py --weights."""
    rows = []
    for name in names or sorted(WEIGHTS):
        # The whole table lists each name's own files; named models show all they can load.
        tags = entries(name) if names else WEIGHTS[name]
        for tag, e in tags.items():
            default = " (True)" if default_tag(name) == tag else ""
            digest = e.hash if e.hash_algo == "sha256" else f"{e.hash_algo}:{e.hash}"
            rows.append({"name": name, "tag": tag + default, "format": e.format,
                         "dataset": e.dataset, "hash": digest or "-", "url": e.url,
                         "note": e.note})
    return rows
