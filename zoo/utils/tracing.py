"""Whether the running call is being captured into a graph rather than run as it is."""

import torch


def capturing() -> bool:
    """True while the call is traced, scripted, compiled or exported (TorchScript, ONNX, dynamo,
    export): code that picks its path at run time must then take its plain one, which the graph
    records once."""
    return (torch.jit.is_tracing() or torch.jit.is_scripting() or torch.compiler.is_compiling()
            or torch.onnx.is_in_onnx_export())
