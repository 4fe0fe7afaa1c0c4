"""The peak throughput of the GPUs the harness knows, so a report can say what fraction of its device a run used.

A run's model FLOP/s is its training FLOPs (``final/flops``, as `FlopCounterMode` counts them) over its
training time (``final/train_s``); its fraction of peak reads that against the peak of the device named in
its record (``device_name``, as ``torch.cuda.get_device_name`` spells it) in the precision it trained in:

* ``amp_bf16`` and ``amp_fp16``: the dense bf16/fp16 tensor-core peak;
* ``fp32``: the FP32 (non-tensor-core) peak. cuDNN runs fp32 convolutions in TF32 on the tensor cores by
  default (``torch.backends.cudnn.allow_tf32``), so a convolutional network in fp32 can exceed it.

NVIDIA's datasheets print tensor-core figures with 2:4 structured sparsity, twice the dense rate; the dense
rate is half of it. Peaks, in TFLOP/s:

============================  ======================  =========  ====  ==========================================
device_name                   card                    bf16/fp16  fp32  source
============================  ======================  =========  ====  ==========================================
``NVIDIA H100 80GB HBM3``     H100 SXM5               989        67    NVIDIA H100 Tensor Core GPU datasheet
                                                                       (1,979 with sparsity)
``NVIDIA H100 PCIe``          H100 PCIe               756        51    the same datasheet (1,513 with sparsity)
``NVIDIA H200``               H200 SXM                989        67    NVIDIA H200 Tensor Core GPU datasheet
                                                                       (1,979 with sparsity)
``NVIDIA A100-SXM4-80GB``,    A100 (SXM4 and PCIe,    312        19.5  NVIDIA A100 Tensor Core GPU datasheet
``NVIDIA A100-PCIE-40GB``...  40 and 80 GB)                            (624 with sparsity)
============================  ======================  =========  ====  ==========================================

Any other device has no known peak and its fraction prints as ``—``, never a guess: CPUs, other GPUs, the
NVL boards (their sheets quote other clocks), and MIG slices (a fraction of the card).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Peak", "peak_flops", "peak_fraction", "peak_of"]


@dataclass(frozen=True)
class Peak:
    """A card's dense peaks in FLOP/s and where they come from."""

    card: str
    half: float  # dense bf16/fp16 tensor-core FLOP/s
    fp32: float  # FP32 FLOP/s (CUDA cores)
    source: str

    def flops(self, precision: str) -> float | None:
        """The peak for a run in `precision` (``amp_bf16``, ``amp_fp16``, ``fp32``); None for anything else."""
        return {"amp_bf16": self.half, "amp_fp16": self.half, "fp32": self.fp32}.get(precision)


_SPARSE = "{} Tensor Core GPU datasheet: {} TFLOP/s with sparsity, halved"
_PEAKS: tuple[tuple[re.Pattern[str], Peak], ...] = (
    (re.compile(r"\bH100\b.*\bPCIe\b", re.I), Peak("H100 PCIe", 756e12, 51e12, _SPARSE.format("NVIDIA H100", "1,513"))),
    (re.compile(r"\bH100\b.*\b(HBM3|SXM)"), Peak("H100 SXM5", 989e12, 67e12, _SPARSE.format("NVIDIA H100", "1,979"))),
    (re.compile(r"\bH200\b"), Peak("H200 SXM", 989e12, 67e12, _SPARSE.format("NVIDIA H200", "1,979"))),
    (re.compile(r"\bA100\b"), Peak("A100", 312e12, 19.5e12, _SPARSE.format("NVIDIA A100", "624"))),
)
_UNKNOWN_VARIANTS = re.compile(r"\b(NVL|MIG)\b")


def peak_of(device_name: str) -> Peak | None:
    """The peaks of the card `device_name` names, or None when it is not one of the known cards."""
    if _UNKNOWN_VARIANTS.search(device_name):
        return None
    return next((peak for pattern, peak in _PEAKS if pattern.search(device_name)), None)


def peak_flops(device_name: str, precision: str) -> float | None:
    """The dense peak FLOP/s of `device_name` in `precision`, or None when unknown."""
    peak = peak_of(device_name)
    return peak.flops(precision) if peak is not None else None


def peak_fraction(flops_per_s: float, device_name: str, precision: str) -> float | None:
    """`flops_per_s` as a fraction of the device's peak in `precision`, or None when the peak is unknown."""
    peak = peak_flops(device_name, precision)
    return flops_per_s / peak if peak else None
