"""BlurPool's layers: anti-aliased strided convolutions and max-pooling, for surgery or models built by hand.

A strided layer samples its input below the Nyquist rate, so shifting the input by one pixel can change
the output a lot. Low-pass filtering (blurring) before the subsampling removes the frequencies that
would alias (Zhang, 2019). The filter is Composer's: ``[1, 2, 1] ⊗ [1, 2, 1] / 16``, per channel
(depthwise), zero padding that keeps the size ("same").

What keeps the cost low (measured on CPU; see the card):

* the blur is one fused depthwise convolution: on CPU it beat two separable 1-D passes, two 2x2
  average poolings and sums of shifted slices;
* a 1x1 convolution with stride s and no padding reads every s-th blurred pixel only, so
  `BlurConv2d` blurs at stride s and runs the convolution at stride 1: s² fewer blurred pixels,
  the same output;
* `blurmax_pool2d` max-pools at stride 1 in channels_last, where PyTorch's CPU kernel is vectorised
  over channels (3-4x faster than in NCHW), and hands the result back in the input's memory format.

`blur_2d` and `blurmax_pool2d` are leaves for ``torch.fx.symbolic_trace`` (`torch.fx.wrap`): their
shape and layout checks would otherwise stop the tracer, as they do for Composer's layers. Every
layer compiles with ``torch.jit.script`` and exports with ``torch.export.export``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Union, cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.common_types import _size_2_t

__all__ = ["BlurConv2d", "BlurMaxPool2d", "BlurPool2d", "blur_2d", "blurmax_pool2d"]


def _default_2d_filter() -> torch.Tensor:
    """``[[1, 2, 1], [2, 4, 2], [1, 2, 1]] / 16`` as a ``(1, 1, 3, 3)`` depthwise filter."""
    taps = torch.tensor([1.0, 2.0, 1.0])
    return (torch.outer(taps, taps) / 16).view(1, 1, 3, 3)


def _as_pair(value: Union[int, tuple[int, int]]) -> tuple[int, int]:  # noqa: UP007 (TorchScript reads Union)
    """``_pair`` that TorchScript compiles, for optional sizes (it reads a required ``_size_2_t`` as a pair
    itself)."""
    if isinstance(value, int):
        return (value, value)
    return (value[0], value[1])


def blur_2d(
    input: torch.Tensor,
    channels: int = -1,
    stride: _size_2_t = 1,
    filter: torch.Tensor | None = None,
    padding: _size_2_t | None = None,
) -> torch.Tensor:
    """Low-pass filter every channel of `input` (a spatial blur), optionally subsampling.

    Args:
        input: ``(N, C, H, W)``; any floating dtype, device and memory format (kept).
        channels: C when known (the filter is then used as given); below 1, read from `input`.
        stride: subsampling along H and W after filtering (an int or a pair).
        filter: ``(kH, kW)``, ``(1, 1, kH, kW)`` (the same for every channel) or ``(C, 1, kH, kW)``,
            odd sizes; default ``[1, 2, 1] ⊗ [1, 2, 1] / 16``.
        padding: zeros added on each side; default ``(kH // 2, kW // 2)``, which keeps the size at stride 1.

    Returns:
        The blurred `input`, ``floor((H + 2 * padding - kH) / stride) + 1`` rows (likewise columns).
    """
    weights = _default_2d_filter().to(input.device) if filter is None else filter
    if weights.dim() == 2:
        weights = weights.view(1, 1, weights.shape[0], weights.shape[1])
    height, width = weights.shape[-2], weights.shape[-1]
    if height % 2 == 0 or width % 2 == 0:
        raise ValueError(f"`filter` must have odd height and width, got {height}x{width}")
    if channels < 1:
        channels = input.shape[1]
    if weights.shape[0] == 1 and channels > 1:
        weights = weights.expand(channels, 1, height, width)
    pad = (height // 2, width // 2) if padding is None else _as_pair(padding)
    return F.conv2d(input, weights.to(input.dtype), None, stride, pad, (1, 1), channels)


def blurmax_pool2d(
    input: torch.Tensor,
    kernel_size: _size_2_t | None = None,
    stride: _size_2_t = 2,
    padding: _size_2_t = 0,
    dilation: _size_2_t = 1,
    ceil_mode: bool = False,
    filter: torch.Tensor | None = None,
) -> torch.Tensor:
    """Max-pooling with anti-aliasing: the max over each `kernel_size` window at stride 1, then `blur_2d`
    with the stride. Arguments as in `torch.nn.functional.max_pool2d` (`kernel_size` defaults to 2);
    `filter` as in `blur_2d`. There is no ``return_indices``: after the blur, no single input is the max.
    """
    channels_last_input = input.is_contiguous(memory_format=torch.channels_last)
    channels_last = input.contiguous(memory_format=torch.channels_last)  # the fast CPU kernel (module docstring)
    kernel = (2, 2) if kernel_size is None else _as_pair(kernel_size)
    maxs = F.max_pool2d(channels_last, kernel, (1, 1), padding, dilation, ceil_mode)
    blurred = blur_2d(maxs, -1, stride, filter)
    if channels_last_input:
        return blurred.contiguous(memory_format=torch.channels_last)
    return blurred.contiguous()


torch.fx.wrap("blur_2d")
torch.fx.wrap("blurmax_pool2d")


class BlurMaxPool2d(nn.Module):
    """Drop-in for `torch.nn.MaxPool2d` (without ``return_indices``) that blurs before subsampling;
    see `blurmax_pool2d`."""

    if TYPE_CHECKING:  # the buffer, declared for type checkers only: TorchScript cannot read string annotations
        filt2d: torch.Tensor

    def __init__(
        self,
        kernel_size: _size_2_t,
        stride: _size_2_t | None = None,
        padding: _size_2_t = 0,
        dilation: _size_2_t = 1,
        ceil_mode: bool = False,
    ):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, kernel_size if stride is None else stride
        self.padding, self.dilation, self.ceil_mode = padding, dilation, ceil_mode
        self.register_buffer("filt2d", _default_2d_filter(), persistent=False)  # follows .to(); not a weight

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
            f"dilation={self.dilation}, ceil_mode={self.ceil_mode}"
        )

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return blurmax_pool2d(
            input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode, self.filt2d
        )

    @classmethod
    def from_maxpool2d(cls, module: nn.MaxPool2d, module_index: int = -1) -> BlurMaxPool2d:
        """The anti-aliased version of `module` (same window, stride, padding, dilation and ceil mode)."""
        del module_index  # Composer's signature
        return cls(module.kernel_size, module.stride, module.padding, module.dilation, module.ceil_mode)


class BlurConv2d(nn.Module):
    """Drop-in for a strided `torch.nn.Conv2d` that blurs its input first (``blur_first=True``) or blurs
    and subsamples its stride-1 output (``blur_first=False``: the paper's order, about stride² times the
    convolution's cost). The arguments are `torch.nn.Conv2d`'s plus `blur_first`; the convolution is
    ``self.conv`` (`from_conv2d` wraps an existing one, keeping its parameters)."""

    if TYPE_CHECKING:  # see BlurMaxPool2d
        blur_filter: torch.Tensor

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: _size_2_t,
        stride: _size_2_t | None = None,
        padding: _size_2_t | str = 0,
        dilation: _size_2_t = 1,
        groups: int = 1,
        bias: bool = True,
        blur_first: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        stride = kernel_size if stride is None else stride
        conv = nn.Conv2d(
            in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, device=device, dtype=dtype
        )
        self._wrap(conv, blur_first)

    def _wrap(self, conv: nn.Conv2d, blur_first: bool) -> None:
        """Take `conv` as ``self.conv``; move its stride to the blur where the blur subsamples."""
        stride = _as_pair(cast(tuple[int, int], conv.stride))  # a Conv2d's stride is a pair (typed tuple[int, ...])
        pointwise = conv.kernel_size == (1, 1) and conv.padding in ((0, 0), "valid")
        self.blur_first = blur_first
        self.blur_nchannels = conv.in_channels if blur_first else conv.out_channels
        self.blur_stride = (1, 1) if blur_first and not pointwise else stride  # pointwise: blur only what it reads
        conv.stride = stride if blur_first and not pointwise else (1, 1)
        self.conv = conv
        filter = _default_2d_filter().expand(self.blur_nchannels, 1, 3, 3).contiguous()
        self.register_buffer("blur_filter", filter.to(conv.weight.device, conv.weight.dtype), persistent=False)

    def extra_repr(self) -> str:
        return f"blur_first={self.blur_first}, blur_stride={self.blur_stride}"

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if self.blur_first:
            return self.conv(blur_2d(input, self.blur_nchannels, self.blur_stride, self.blur_filter))
        return blur_2d(self.conv(input), self.blur_nchannels, self.blur_stride, self.blur_filter)

    @classmethod
    def from_conv2d(cls, module: nn.Conv2d, module_index: int = -1, blur_first: bool = True) -> BlurConv2d:
        """Wrap `module` itself (its parameters, and so their optimizer state, survive). The module's
        stride moves to the blur where the blur subsamples (``blur_first=False``, 1x1 convolutions)."""
        del module_index  # Composer's signature
        blurconv = cls(1, 1, 1, blur_first=blur_first, device="meta")  # a placeholder conv, replaced by `module`
        blurconv._wrap(module, blur_first)
        return blurconv.train(module.training)


class BlurPool2d(nn.Module):
    """`blur_2d` as a module: a standalone anti-aliased subsampling layer (stride 2 by default).

    Args:
        channels: the number of input channels when known (the filter is then built once); 0: read per call.
        stride: subsampling along H and W.
        padding: zeros added on each side (1 keeps the size at stride 1).
    """

    if TYPE_CHECKING:  # see BlurMaxPool2d
        blur_filter: torch.Tensor

    def __init__(self, channels: int = 0, stride: _size_2_t = 2, padding: _size_2_t = 1) -> None:
        super().__init__()
        self.channels, self.stride, self.padding = channels, stride, padding
        filter = _default_2d_filter()
        filter = filter.repeat(channels, 1, 1, 1) if channels > 0 else filter
        self.register_buffer("blur_filter", filter, persistent=False)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return blur_2d(input, self.channels, self.stride, self.blur_filter, padding=self.padding)
