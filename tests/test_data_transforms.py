"""Tests for zoo.data.transforms: shapes, normalisation, crops, colour jitter."""

from __future__ import annotations

import torch

from zoo.data import transforms

MEAN, STD = [0.45, 0.45, 0.45], [0.225, 0.225, 0.225]


def test_transform_shapes_and_normalisation():
    frames = torch.randint(0, 256, (6, 48, 64, 3), dtype=torch.uint8)
    out = transforms.train_transform(frames, 40, [48, 56], True, MEAN, STD)
    assert out.shape == (3, 6, 40, 40) and out.dtype == torch.float32
    assert transforms.val_transform(frames, 40, 48, MEAN, STD).shape == (3, 6, 40, 40)
    grey = torch.full((2, 32, 32, 3), round(0.45 * 255), dtype=torch.uint8)
    assert transforms.val_transform(grey, 32, 32, MEAN, STD).abs().max() < 0.01


def test_test_views_three_crops_along_long_side():
    frames = torch.zeros((4, 32, 64, 3), dtype=torch.uint8)
    frames[:, :, :24] = 255  # bright left strip: most in the left crop, none in the right
    views = transforms.test_views(frames, [[0, 1], [2, 3]], 32, 32, 3, MEAN, STD)
    assert views.shape == (6, 3, 2, 32, 32)
    means = views.mean(dim=(1, 2, 3, 4))
    assert means[0] > means[1] > means[2] and torch.allclose(means[:3], means[3:])
    tall = torch.zeros((2, 64, 32, 3), dtype=torch.uint8)
    assert transforms.test_views(tall, [[0, 1]], 32, 32, 3, MEAN, STD).shape == (3, 3, 2, 32, 32)


def test_colour_jitter_changes_the_clip_consistently():
    torch.manual_seed(0)
    frames = torch.randint(0, 256, (4, 40, 40, 3), dtype=torch.uint8)
    plain = transforms.train_transform(frames, 32, [40, 40], False, MEAN, STD,
                                       generator=torch.Generator().manual_seed(1))
    jittered = transforms.train_transform(frames, 32, [40, 40], False, MEAN, STD,
                                          generator=torch.Generator().manual_seed(1),
                                          jitter=[0.5, 0.5, 0.5, 0.1])
    assert jittered.shape == plain.shape and not torch.allclose(jittered, plain)
    # One draw per clip: identical frames stay identical after jitter.
    same = frames[:1].expand(4, -1, -1, -1)
    out = transforms.train_transform(same, 32, [40, 40], False, MEAN, STD, jitter=[0.5] * 3 + [0])
    assert torch.equal(out[:, 0], out[:, 3])


def test_crop_then_resize_matches_resize_then_crop():
    # Smooth content, as in real videos (on pixel noise a sub-pixel shift changes everything).
    coarse = torch.randint(0, 256, (2, 3, 12, 16)).float()
    frames = torch.nn.functional.interpolate(coarse, size=(96, 120), mode="bicubic")
    frames = frames.clamp(0, 255).round().to(torch.uint8).permute(0, 2, 3, 1).contiguous()
    fast = transforms.val_transform(frames, 48, 64, MEAN, STD)
    full = torch.nn.functional.interpolate(frames.permute(0, 3, 1, 2).float(), size=(64, 80),
                                           mode="bilinear", antialias=True, align_corners=False)
    slow = transforms.normalize(full[..., 8:56, 16:64], MEAN, STD)
    inner = (slice(None), slice(None), slice(4, -4), slice(4, -4))  # borders see other pixels
    assert (fast - slow)[inner].abs().mean() < 0.05  # ~1.5 grey levels of 255


def test_flip_before_the_resize_is_the_flip_of_the_resized_crop():
    # train_transform flips the cut before resizing it (one copy less): the pixels must be those
    # of flipping the resized crop, for upscales, downscales and the identity.
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (4, 96, 128, 3), dtype=torch.uint8, generator=g)
    clip = frames.permute(0, 3, 1, 2)
    for side in (57, 64, 70, 71, 89, 96):
        for size in (64, 45):
            box = (3, 11, side, side)
            region = clip[..., 3:3 + side, 11:11 + side]
            want = region if side == size else F.interpolate(
                region, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
            got = transforms.crop_resize(clip, box, size, flip=True)
            assert torch.equal(got, want.flip(-1)), (side, size)
            assert torch.equal(transforms.crop_resize(clip, box, size), want)
