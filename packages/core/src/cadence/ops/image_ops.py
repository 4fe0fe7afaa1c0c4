"""The image operations of RandAugment and AugMix: their names, sets, magnitudes and primitive parameters.

The operations and their severity-to-magnitude mapping follow Composer's ``augmentation_primitives``
(itself adapted from the AugMix reference code). Each operation drives one primitive of
`cadence.ops.pixels`; `primitive_parameters` turns per-sample (operation, magnitude) pairs into each
primitive's per-sample parameter, with the identity value for samples that drew another operation.
`cadence.ops.augment` draws and applies them. Torch only.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import torch

from cadence.ops.pixels import (
    UNCHECKED,
    autocontrast,
    brightness,
    color,
    contrast,
    device_constant,
    equalize,
    posterize,
    sharpness,
    solarize,
    warp_affine,
)

__all__ = [
    "GROUPED_PRIMITIVES",
    "GROUP_OF_OP",
    "OPS",
    "PRIMITIVES",
    "PRIMITIVE_ORDER",
    "affine_matrix",
    "apply_op_parameters",
    "augmentation_sets",
    "op_magnitudes",
    "primitive_parameters",
    "resolve_augmentation_set",
]

#: Every operation, in a fixed order (the index is the op id used by the batched path).
OPS: tuple[str, ...] = (
    "autocontrast", "equalize", "posterize", "rotate", "solarize", "shear_x", "shear_y",
    "translate_x", "translate_y", "color", "contrast", "brightness", "sharpness",
    "color_original", "contrast_original", "brightness_original", "sharpness_original",
)  # fmt: skip

_SAFE = ("autocontrast", "equalize", "posterize", "rotate", "solarize", "shear_x", "shear_y",
         "translate_x", "translate_y")  # fmt: skip

#: The operation sets of Composer. 'safe' leaves out the four colour operations, which overlap
#: ImageNet-C/CIFAR-10-C corruptions (AugMix paper); 'original' uses the AugMix reference
#: code's magnitudes for those four; 'all' uses Composer's symmetric magnitudes.
augmentation_sets: dict[str, tuple[str, ...]] = {
    "all": (*_SAFE, "color", "contrast", "brightness", "sharpness"),
    "safe": _SAFE,
    "original": (*_SAFE, "color_original", "contrast_original", "brightness_original", "sharpness_original"),
}

# Which primitive each op drives, and the parameter value that leaves a sample unchanged.
_PRIMITIVE = {op: op.removesuffix("_original") for op in OPS} | dict.fromkeys(
    ("rotate", "shear_x", "shear_y", "translate_x", "translate_y"), "affine"
)
_IDENTITY = {"autocontrast": 0.0, "equalize": 0.0, "posterize": 8.0, "solarize": 256.0, "color": 1.0,
             "contrast": 1.0, "brightness": 1.0, "sharpness": 1.0}  # fmt: skip
PRIMITIVE_ORDER = ("affine", "color", "contrast", "brightness", "sharpness", "autocontrast", "equalize",
                "posterize", "solarize")  # fmt: skip


def resolve_augmentation_set(augmentation_set: str | Sequence[str]) -> tuple[str, ...]:
    """Op names from a set name ('all', 'safe', 'original') or a sequence of op names."""
    if isinstance(augmentation_set, str):
        if augmentation_set not in augmentation_sets:
            raise ValueError(
                f"`augmentation_set`={augmentation_set!r} is not a known set; use one of {sorted(augmentation_sets)}"
            )
        return augmentation_sets[augmentation_set]
    if not isinstance(augmentation_set, (list, tuple)):
        raise TypeError(
            f"`augmentation_set` must be a set name ({', '.join(map(repr, augmentation_sets))}) or a list of op "
            f"names from {OPS}, got augmentation_set={augmentation_set!r}"
        )
    ops = tuple(augmentation_set)
    unknown = [op for op in ops if not isinstance(op, str) or op not in OPS]
    if not ops or unknown:
        raise ValueError(
            f"`augmentation_set` must be a set name or a non-empty sequence of op names from {OPS}; "
            f"got unknown entries {unknown!r}"
            if ops
            else "`augmentation_set` is empty; use e.g. 'all'"
        )
    return ops


def affine_matrix(op_ids: torch.Tensor | str, values: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """PIL matrices (N, 2, 3) of geometric ops: rotate (degrees, counter-clockwise about the centre,
    as ``Image.rotate``), shear_x/shear_y (factor), translate_x/translate_y (pixels). Samples whose op
    (an op name, or op ids into `OPS`) is not geometric get the identity."""
    if isinstance(op_ids, str):
        op_ids = torch.full(values.shape, OPS.index(op_ids), device=values.device)

    def pick(op: str) -> torch.Tensor:
        return torch.where(op_ids == OPS.index(op), values, 0.0)

    angle = pick("rotate") * (-math.pi / 180)
    cos, sin = torch.cos(angle), torch.sin(angle)
    cx, cy = width / 2, height / 2
    rows = (cos, sin + pick("shear_x"), cx - cos * cx - sin * cy + pick("translate_x"),
            pick("shear_y") - sin, cos, cy + sin * cx - cos * cy + pick("translate_y"))  # fmt: skip
    return torch.stack(rows, dim=-1).view(-1, 2, 3)


PRIMITIVES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "affine": warp_affine, "color": color, "contrast": contrast, "brightness": brightness,
    "sharpness": sharpness, "autocontrast": autocontrast, "equalize": equalize, "posterize": posterize,
    "solarize": solarize,
}  # fmt: skip

#: `PRIMITIVES` for samples that all change (their parameters are not the identity): no per-sample check.
GROUPED_PRIMITIVES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = PRIMITIVES | UNCHECKED


# Random parameters -------------------------------------------------------------------------------
# Composer's magnitudes, with level ~ U[0.1, severity): posterize keeps 4 - floor(0.4 level) bits;
# solarize's threshold is 256 - floor(25.6 level); rotate floor(3 level) degrees, shear 0.03 level,
# translate floor(level side / 30) pixels, each with a random sign; the '_original' enhancement
# factors are 0.18 level + 0.1; the others are U[1, severity) or U[1 - 0.09 severity, 1) with
# probability 1/2 each, and brightening factors are scaled by 0.75. Each op is one row of
# (scale, floored, multiplier, random sign, offset, enhancement) so that every sample's magnitude
# comes out of one vectorised expression.


@functools.lru_cache(maxsize=64)
def _magnitude_table(device: torch.device, height: int, width: int) -> torch.Tensor:
    rows = {
        "autocontrast": (0, 0, 0, 0, 1, 0), "equalize": (0, 0, 0, 0, 1, 0),
        "posterize": (0.4, 1, -1, 0, 4, 0), "solarize": (25.6, 1, -1, 0, 256, 0),
        "rotate": (3, 1, 1, 1, 0, 0), "shear_x": (0.03, 0, 1, 1, 0, 0), "shear_y": (0.03, 0, 1, 1, 0, 0),
        "translate_x": (width / 30, 1, 1, 1, 0, 0), "translate_y": (height / 30, 1, 1, 1, 0, 0),
        "color": (0, 0, 0, 0, 0, 1), "contrast": (0, 0, 0, 0, 0, 1), "sharpness": (0, 0, 0, 0, 0, 1),
        "brightness": (0, 0, 0, 0, 0, 2),
    }  # fmt: skip
    original = (0.18, 0, 1, 0, 0.1, 0)
    table = [rows.get(op, original) for op in OPS] + [(0, 0, 0, 0, 0, 0)]  # last row: op id -1
    return torch.tensor(table, dtype=torch.float32, device=device)


def op_magnitudes(
    op_ids: torch.Tensor, uniforms: torch.Tensor, severity: float, height: int, width: int
) -> torch.Tensor:
    """The magnitude of each sample's op: degrees, shear, pixels, bits, threshold or factor.

    Args:
        op_ids: (N,) index into `OPS` of each sample's op; -1 = no op (magnitude 0).
        uniforms: (N, 4) uniforms in [0, 1) from which the magnitudes are drawn.
        severity: Composer's severity (1-10).
        height, width: image size (translations are a fraction of it).
    """
    scale, floored, multiplier, signed, offset, enhance = _magnitude_table(op_ids.device, height, width)[op_ids].T
    level = 0.1 + uniforms[:, 0] * (severity - 0.1)
    raw = level * scale
    sign = torch.where((signed > 0) & (uniforms[:, 1] > 0.5), -1.0, 1.0)
    value = offset + torch.where(floored > 0, raw.floor(), raw) * multiplier * sign
    factor = torch.where(
        uniforms[:, 2] > 0.5, 1 + uniforms[:, 3] * (severity - 1), 1 - 0.09 * severity * (1 - uniforms[:, 3])
    )
    factor = torch.where((enhance == 2) & (factor > 1), 0.75 * factor, factor)
    return torch.where(enhance > 0, factor, value)


# primitive (index into PRIMITIVE_ORDER) of each op id; the extra last entry (op id -1) means "no op"
GROUP_OF_OP = (*(PRIMITIVE_ORDER.index(_PRIMITIVE[op]) for op in OPS), len(PRIMITIVE_ORDER))


def primitive_parameters(
    op_ids: torch.Tensor, values: torch.Tensor, height: int, width: int, ops: Sequence[str]
) -> dict[str, torch.Tensor]:
    """Each primitive's per-sample parameter (identity for samples that drew another op), for the
    primitives `ops` use. `values` are `op_magnitudes`."""
    groups = device_constant(GROUP_OF_OP, torch.long, op_ids.device)[op_ids]
    params = {}
    for key in dict.fromkeys(_PRIMITIVE[op] for op in ops):
        if key == "affine":
            params[key] = affine_matrix(op_ids, values, height, width)
        else:
            params[key] = torch.where(groups == PRIMITIVE_ORDER.index(key), values, _IDENTITY[key])
    return params


def apply_op_parameters(images: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
    """Run every primitive in `params` on the batch; each sample changes only by the op it chose."""
    for key in PRIMITIVE_ORDER:
        if key in params:
            images = PRIMITIVES[key](images, params[key])
    return images
