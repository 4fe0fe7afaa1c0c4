"""ChannelsLast: store a model's 4-D weights in the channels_last (NHWC) memory format. Torch only."""

from __future__ import annotations

import torch
from torch import nn

from cadence.ops.checks import check_bool
from cadence.ops.surgery import SurgeryReport, no_effect, unwrap_model

__all__ = ["apply_channels_last"]


def apply_channels_last(model: nn.Module, *, strict: bool = False) -> SurgeryReport:
    """Store every 4-D parameter and buffer of `model` (convolution weights, mostly) in channels_last.

    Convolution kernels (cuDNN's tensor-core paths, oneDNN on CPU) are fastest when channels are the
    innermost dimension; a convolution whose weight is channels_last computes in that format and hands
    it on, so the activations follow without converting the inputs. The values do not change, and
    every tensor stays the same object (its storage is re-laid in place), so optimizers, their state and
    references held elsewhere keep working. Tensors that are already channels_last (which includes
    those with one channel or a 1x1 kernel, the same in both formats) are left alone: a second call
    changes nothing. Other ranks stay as they are (Composer's ``model.to(memory_format=...)`` fails
    on the 5-D weights of 3-D convolutions).

    Args:
        model: the model to change in place (a ``torch.compile``-d model through its original).
        strict: raise `cadence.ops.NoEffectError` instead of warning when nothing needed converting.

    Returns:
        The `SurgeryReport`: ``replaced["Conv2d -> channels_last"]`` lists the paths of the modules
        whose tensors were converted.
    """
    check_bool("strict", strict, "True: a model with nothing to convert is an error, not a warning")
    target = unwrap_model(model)
    report = SurgeryReport("ChannelsLast")
    for path, module in target.named_modules():
        tensors = [*module.parameters(recurse=False), *module.buffers(recurse=False)]
        converted = [_to_channels_last(t) for t in tensors if t.ndim == 4]
        if any(converted):
            report.replaced.setdefault(f"{type(module).__name__} -> channels_last", []).append(path or "<model>")
    if not report:
        fours = any(t.ndim == 4 for t in [*target.parameters(), *target.buffers()])
        reason = "every 4-D parameter and buffer is channels_last already" if fours else "it has no 4-D weight"
        message = f"ChannelsLast changed nothing in {type(target).__name__}: {reason}"
        no_effect(message, strict=strict, stacklevel=2)
    return report


@torch.no_grad()
def _to_channels_last(tensor: torch.Tensor) -> bool:
    """Re-lay `tensor` (and its gradient) in channels_last, in place; whether anything changed."""
    if tensor.is_contiguous(memory_format=torch.channels_last):
        return False
    relaid = tensor.contiguous(memory_format=torch.channels_last)
    tensor.set_(relaid)  # type: ignore[call-overload]  # set_(Tensor) exists; torch's stubs list only set_(Storage)
    if tensor.grad is not None:
        tensor.grad = tensor.grad.contiguous(memory_format=torch.channels_last)
    return True
