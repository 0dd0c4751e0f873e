"""What a training or test process imports: every rank, loader worker and tool imports zoo, so a
heavy import costs every one of them. torchvision's import pulls in ``torch._dynamo`` (3-4 s of
CPU per process on a 2-core VM); zoo imports it only where it is used (stochastic depth, Swin3D,
colour jitter, torchvision's own models)."""

import subprocess
import sys

HEAVY = ("torchvision", "torch._dynamo", "matplotlib", "transformers", "timm")

# The modules a training / test rank runs, and models without stochastic depth built on them.
SCRIPT = """
import sys
import zoo.train.trainer, zoo.engine, zoo.infer, zoo.data, zoo.launch.launch
from zoo.models import create_model
for name in ("slowfast_tiny_resnet18", "i3d_resnet50_v1", "x3d_xs", "r2plus1d_resnet18",
             "videomae_vit_b"):
    create_model(name, num_classes=4)
print(" ".join(m for m in {heavy} if m in sys.modules))
"""


def test_a_training_process_imports_no_heavy_optional_module():
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(heavy=HEAVY)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == [], f"imported by a training process: {out.stdout}"


def test_a_model_with_stochastic_depth_still_gets_torchvision_s_module():
    from zoo.models import create_model

    model = create_model("x3d_xs", num_classes=4, drop_path=0.2)
    kinds = {type(m).__module__ + "." + type(m).__name__ for m in model.modules()}
    assert "torchvision.ops.stochastic_depth.StochasticDepth" in kinds
