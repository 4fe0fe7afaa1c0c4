"""Numeric precision of the training step: fp32, or autocast to bf16/fp16 (fp16 with a GradScaler)."""

from __future__ import annotations

import contextlib
from enum import Enum

import torch

__all__ = ["Precision", "autocast_context", "make_grad_scaler"]


class Precision(str, Enum):
    FP32 = "fp32"
    AMP_BF16 = "amp_bf16"
    AMP_FP16 = "amp_fp16"

    @classmethod
    def parse(cls, value: Precision | str | None, device: torch.device) -> Precision:
        if value is None:
            return cls.AMP_BF16 if device.type == "cuda" and torch.cuda.is_bf16_supported() else cls.FP32
        try:
            return cls(str(value).lower())
        except ValueError:
            allowed = ", ".join(p.value for p in cls)
            raise ValueError(f"unknown precision={value!r}; use one of: {allowed}") from None

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        return _AUTOCAST_DTYPES.get(self)


_AUTOCAST_DTYPES = {Precision.AMP_BF16: torch.bfloat16, Precision.AMP_FP16: torch.float16}
_NO_AUTOCAST = contextlib.nullcontext()  # reusable: the fp32 step allocates no context per forward


def autocast_context(precision: Precision, device: torch.device) -> contextlib.AbstractContextManager:
    """The context the forward and the loss run in."""
    dtype = _AUTOCAST_DTYPES.get(precision)
    if dtype is None:
        return _NO_AUTOCAST
    return torch.autocast(device_type=device.type, dtype=dtype)


def make_grad_scaler(precision: Precision, device: torch.device) -> torch.amp.GradScaler | None:
    """fp16 gradients underflow without loss scaling; bf16 and fp32 need none."""
    if precision is not Precision.AMP_FP16:
        return None
    return torch.amp.GradScaler(device.type)
