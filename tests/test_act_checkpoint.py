"""Activation checkpointing (CONFIG.TRAIN.ACT_CHECKPOINT, ``set_grad_checkpointing``): the same
outputs, gradients and BatchNorm statistics as a plain model, with and without drop path."""

import copy

import pytest
import torch

from zoo.config import ConfigError
from zoo.models import create_model
from zoo.models.mvit import MViT
from zoo.models.r2plus1d import R2Plus1D
from zoo.models.resnet3d import ResNet3d
from zoo.models.slowfast import SlowFast
from zoo.models.swin3d import SwinTransformer3d
from zoo.models.videomae import VideoMAE
from zoo.models.vmz import VMZResNet
from zoo.models.x3d import X3D
from zoo.train.model_setup import enable_act_checkpoint

CLIP = (2, 3, 4, 16, 16)
TINY = {
    "videomae": (lambda dp: VideoMAE(3, embed_dim=16, depth=2, num_heads=2, frames=4,
                                     crop_size=16, patch=8, drop_path=dp), CLIP),
    "mvit": (lambda dp: MViT(3, frames=4, crop_size=16, depth=2, embed_dim=8, num_heads=1,
                             patch_padding=(1, 3, 3), droppath_rate=dp, dropout=0.0), CLIP),
    "swin": (lambda dp: SwinTransformer3d(3, embed_dim=8, depths=(2, 2), num_heads=(1, 2),
                                          window_size=(2, 2, 2), drop_path=dp,
                                          head_dropout=0.0), CLIP),
    "resnet3d": (lambda dp: ResNet3d(3, depth=18, width=4, dropout=0.0, drop_path=dp,
                                     zero_init_final_bn=False), CLIP),
    "slowfast": (lambda dp: SlowFast(3, depth=18, alpha=2, beta_inv=4, width=8, dropout=0.0,
                                     drop_path=dp, zero_init_final_bn=False), CLIP),
    "x3d": (lambda dp: X3D(3, depth_factor=0.5, head_width=16, dropout=0.0, drop_path=dp),
            CLIP),
    "r2plus1d": (lambda dp: R2Plus1D((1, 1, 1, 1), 3, width=4, drop_path=dp), CLIP),
    "csn": (lambda dp: VMZResNet("ircsn", (1, 1, 1, 1), 3, width=4, drop_path=dp), CLIP),
}


def _step(model, x, seed):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    out = model(x)
    out.square().sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.detach(), grads, {n: b.clone() for n, b in model.named_buffers()}


@pytest.mark.parametrize("family", sorted(TINY))
@pytest.mark.parametrize("drop_path", [0.0, 0.3])
def test_checkpointed_model_gives_the_same_outputs_and_gradients(family, drop_path):
    build, shape = TINY[family]
    torch.manual_seed(0)
    plain = build(drop_path).double().train()
    checked = copy.deepcopy(plain)
    checked.set_grad_checkpointing(True)
    assert list(checked.state_dict()) == list(plain.state_dict())
    x = torch.randn(shape, dtype=torch.float64)
    # The blocks really are recomputed: a layer inside the first block runs twice per step.
    block = checked.checkpoint_blocks()[0]
    calls = []
    first_leaf = next(m for m in block.modules() if not list(m.children()))
    first_leaf.register_forward_hook(lambda *a: calls.append(1))
    out_p, grads_p, bufs_p = _step(plain, x, seed=1)
    out_c, grads_c, bufs_c = _step(checked, x, seed=1)
    assert len(calls) == 2
    torch.testing.assert_close(out_c, out_p, rtol=1e-12, atol=1e-12)
    assert grads_c.keys() == grads_p.keys() and grads_p
    for name in grads_p:
        torch.testing.assert_close(grads_c[name], grads_p[name], rtol=1e-10, atol=1e-12)
    # BatchNorm's running statistics are updated once, not again while recomputing.
    for name in bufs_p:
        torch.testing.assert_close(bufs_c[name], bufs_p[name], rtol=0, atol=0)


def test_off_again_and_without_grad_runs_plainly():
    torch.manual_seed(0)
    model = TINY["resnet3d"][0](0.0)
    model.set_grad_checkpointing(True)
    assert all("forward" in b.__dict__ for b in model.checkpoint_blocks())
    with torch.no_grad():
        model(torch.randn(CLIP))
    model.set_grad_checkpointing(False)
    assert not any("forward" in b.__dict__ for b in model.checkpoint_blocks())


def test_the_trainer_key_needs_a_family_with_blocks():
    with torch.device("meta"):
        model = create_model("videomae_vit_s")
        enable_act_checkpoint(model, "videomae_vit_s")
        assert all("forward" in b.__dict__ for b in model.blocks)
        with pytest.raises(ConfigError, match="ACT_CHECKPOINT True: model r3d_18 has no"):
            enable_act_checkpoint(create_model("r3d_18"), "r3d_18")
