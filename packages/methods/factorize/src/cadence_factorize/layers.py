"""`FactorizedConv2d` and `FactorizedLinear`: one layer as two thinner ones in a row, and the low-rank math.

A ``k x k`` convolution from ``C_in`` to ``C_out`` channels becomes a ``k x k`` convolution to
``latent`` channels followed by a ``1 x 1`` convolution to ``C_out`` (a linear layer likewise
becomes two). With ``fan_in = C_in * k * k`` that costs ``latent * (fan_in + C_out)`` instead of
``fan_in * C_out`` multiply-adds per output position: fewer only when
``latent <= ceil(fan_in * C_out / (fan_in + C_out) - 1)`` (`max_rank_with_speedup`).

The math (first half of this file) works on matrices: a weight ``W`` of shape ``(fan_in, out)``
acting as ``Y = X @ W + bias``. `factorize_matrix` fits ``X @ Wa @ Wb + bias`` of a given rank to
such a map on sample inputs (truncated SVD, then alternating least squares, as Composer's
``factorize_core``); `factorize_conv2d` does it for a convolution. The layers (second half) are
built from an existing layer by the truncated SVD of its weight, the best rank-``latent``
approximation in the Frobenius norm, so trained weights are approximated rather than thrown away.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import nn

from cadence.ops.checks import check_int, check_number

__all__ = [
    "FactorizedConv2d",
    "FactorizedLinear",
    "LowRankSolution",
    "factorize_conv2d",
    "factorize_matrix",
    "max_rank_with_speedup",
    "resolve_latent_size",
]


# The low-rank math ---------------------------------------------------------------------------
@dataclass
class LowRankSolution:
    """A factorization ``X @ Wa @ Wb + bias`` (Composer's fields).

    ``Wa``/``Wb`` are matrices ``(fan_in, rank)``/``(rank, out)``, or convolution weights
    ``(rank, C_in, k, k)``/``(C_out, rank, 1, 1)`` from `factorize_conv2d`; ``Wb`` is None and
    ``rank`` -1 when the requested rank was too large to factorize (``Wa`` is then one full map).
    ``nmse`` is the squared error on the sample inputs over that of predicting each output's mean:
    0 is exact, 1 no better than the mean.
    """

    Wa: torch.Tensor | None = None
    Wb: torch.Tensor | None = None
    bias: torch.Tensor | None = None
    rank: int = -1
    nmse: float = 0.0


def resolve_latent_size(latent: float, in_size: int, out_size: int) -> int:
    """A latent size as a number of channels: ``latent`` itself if >= 1, else that fraction of ``min(in, out)``
    (at least 1), as Composer does."""
    return max(1, int(latent * min(in_size, out_size))) if latent < 1 else int(latent)


def max_rank_with_speedup(in_size: int, out_size: int, kernel_size: tuple[int, ...] = ()) -> int:
    """The largest latent size whose two layers need fewer multiply-adds than the original one."""
    fan_in = in_size * math.prod(kernel_size)
    return math.ceil(fan_in * out_size / (fan_in + out_size) - 1)  # strictly below the break-even point


def _truncated_svd(weight: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(Wa, Wb)`` with ``Wa @ Wb`` the best rank-`rank` approximation of `weight`, the singular values split
    evenly between them (as Composer's ``_svd_initialize``); computed in fp32 or wider, returned in that dtype."""
    u, s, vt = torch.linalg.svd(weight.detach().to(torch.promote_types(weight.dtype, torch.float32)), False)
    root = s[:rank].sqrt()
    return u[:, :rank] * root, vt[:rank] * root[:, None]


def _nmse(y: torch.Tensor, y_hat: torch.Tensor) -> float:
    return float((y - y_hat).square().sum() / (y - y.mean(dim=0)).square().sum().clamp_min(1e-30))


def factorize_matrix(
    X: torch.Tensor,
    Y: torch.Tensor,
    Wa: torch.Tensor,
    Wb: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    rank: float = 0.25,
    n_iters: int = 3,
) -> LowRankSolution:
    """Fit ``X @ Wa' @ Wb' + bias'`` of rank `rank` to ``Y``, the output of ``X @ W + bias`` with
    ``W = Wa`` (or ``Wa @ Wb`` for a map that is factorized already, to lower its rank further).

    Truncated SVD of ``W``, then `n_iters` rounds of alternating least squares, each an exact
    minimisation over one factor. ``X`` and ``Y`` are centred first, so ``bias'`` is fitted jointly
    (Composer fits without an intercept and adds the mean residual afterwards): the error never
    exceeds that of predicting each output's mean, and does not grow with the iterations.

    Args:
        X: sample inputs ``(N, D)``. Y: their outputs ``(N, M)``, bias included.
        Wa, Wb: the map, ``(D, M)``, or ``(D, d)`` and ``(d, M)``.
        bias: the map's bias; accepted for Composer's signature (``Y`` holds it, and the fitted
            bias replaces it).
        rank: latent size, or a fraction (< 1) of ``D`` (at most the current rank).
        n_iters: rounds of alternating least squares; 0 keeps the SVD factors.
    """
    del bias
    check_number("rank", rank, gt=0, hint="a number of latent dimensions, or a fraction (< 1) of the input's")
    check_int("n_iters", n_iters, ge=0)
    X, Y = X.detach(), Y.detach()
    x_mean, y_mean = X.mean(dim=0), Y.mean(dim=0)
    Xc, Yc = X - x_mean, Y - y_mean
    W = Wa.detach() if Wb is None else Wa.detach() @ Wb.detach()
    current = Wa.shape[1] if Wb is not None else min(W.shape)
    k = max(1, min(int(rank * X.shape[1]), current)) if rank < 1 else int(rank)
    if k >= X.shape[1] or k >= Y.shape[1]:  # no saving possible: one full map, fitted by least squares
        full = torch.linalg.lstsq(Xc, Yc).solution
        full_bias = y_mean - x_mean @ full
        return LowRankSolution(full, None, full_bias, -1, _nmse(Y, X @ full + full_bias))
    k = min(k, current)  # a factorized map is never made wider: refitted at its current rank
    A, B = (factor.to(X.dtype) for factor in _truncated_svd(W, k))
    coefficients = torch.linalg.lstsq(Xc, Yc).solution  # the unconstrained optimum, X⁺ Y
    for _ in range(n_iters):
        B = torch.linalg.lstsq(Xc @ A, Yc).solution  # min over B of |Xc A B - Yc|
        A = torch.linalg.lstsq(B.T, coefficients.T).solution.T  # min over A: A = X⁺ Y B⁺
    new_bias = y_mean - (x_mean @ A) @ B
    return LowRankSolution(A, B, new_bias, k, _nmse(Y, (X @ A) @ B + new_bias))


def _conv_samples(X: torch.Tensor, kernel_size: tuple[int, ...], padding: object, dilation: object) -> torch.Tensor:
    """Every receptive field of `X` (stride 1: the most samples) as a row ``(C_in * kh * kw,)``."""
    if padding == "same":
        padding = tuple(d * (k - 1) // 2 for d, k in zip(_pair(dilation), kernel_size))
    patches = F.unfold(
        X, kernel_size, dilation=_pair(dilation), padding=(0, 0) if padding == "valid" else _pair(padding)
    )
    return patches.transpose(1, 2).reshape(-1, patches.shape[1])


def _pair(value: object) -> tuple[int, int]:
    return value if isinstance(value, tuple) else (value, value)  # type: ignore[return-value]


def factorize_conv2d(
    X: torch.Tensor,
    Wa: torch.Tensor,
    Wb: torch.Tensor | None = None,
    rank: float = 0.25,
    biasA: torch.Tensor | None = None,
    biasB: torch.Tensor | None = None,
    n_iters: int = 3,
    **conv2d_kwargs: object,
) -> LowRankSolution:
    """`factorize_matrix` for a convolution ``Wa`` ``(C_out, C_in, k, k)`` (or ``Wa`` ``(d, C_in, k, k)``
    then ``Wb`` ``(C_out, d, 1, 1)``), fitted on the receptive fields of the inputs ``X`` ``(N, C_in, H, W)``.

    Returns weights ``(rank, C_in, k, k)`` and ``(C_out, rank, 1, 1)``. `conv2d_kwargs`: the
    convolution's ``padding`` (zero padding is used for the samples) and ``dilation``; ``stride`` is
    ignored (every position is a sample); ``groups`` must be 1.
    """
    if conv2d_kwargs.get("groups", 1) != 1:
        raise NotImplementedError(f"grouped convolutions are not factorized (groups={conv2d_kwargs['groups']})")
    if biasB is not None and Wb is None:
        raise ValueError("`biasB` is the bias of `Wb`: pass `Wb` too")
    kernel_size = tuple(Wa.shape[2:])
    samples = _conv_samples(X.detach(), kernel_size, conv2d_kwargs.get("padding", 0), conv2d_kwargs.get("dilation", 1))
    first = Wa.detach().reshape(Wa.shape[0], -1).T  # (fan_in, d or C_out)
    Y = samples @ first + (biasA.detach() if biasA is not None else 0)
    second = None if Wb is None else Wb.detach().reshape(Wb.shape[0], -1).T
    if second is not None:
        Y = Y @ second + (biasB.detach() if biasB is not None else 0)
    solution = factorize_matrix(samples, Y, first, second, rank=rank, n_iters=n_iters)
    solution.Wa = solution.Wa.T.reshape(-1, *Wa.shape[1:])  # type: ignore[union-attr]
    if solution.Wb is not None:
        solution.Wb = solution.Wb.T.reshape(solution.Wb.shape[1], -1, 1, 1)
    return solution


# The layers ------------------------------------------------------------------------------------
def _latent_that_saves(name: str, latent: float, in_size: int, out_size: int, kernel_size: tuple[int, ...] = ()) -> int:
    """`latent` as a number of channels, refused (naming the argument) when two layers would cost more."""
    check_number(name, latent, gt=0, hint="a number of latent channels, or a fraction (< 1) of min(in, out)")
    size, limit = resolve_latent_size(latent, in_size, out_size), max_rank_with_speedup(in_size, out_size, kernel_size)
    if size > limit:
        raise ValueError(
            f"`{name}`={latent!r} gives {size} latent channels for {in_size} -> {out_size} (kernel "
            f"{kernel_size or 1}); at most {limit} lowers the multiply-adds: two layers that wide cost more than one"
        )
    return size


class _Factorized(nn.Module):
    """What both layers share: ``module1(module0(x))``, the bias, and lowering the rank on data."""

    latent_size: int
    module0: nn.Linear | nn.Conv2d
    module1: nn.Linear | nn.Conv2d
    _transposed: ClassVar[bool] = False  # whether the layer's weights are the solution's matrices transposed

    def _layers(self, latent: int, device: torch.device | str | None, dtype: torch.dtype | None) -> None:
        """Create ``module0`` and ``module1`` for `latent` channels."""
        raise NotImplementedError

    def solution_for_rank(self, input: torch.Tensor, rank: int) -> LowRankSolution:
        """A fit of this layer's map with latent size `rank` on sample inputs."""
        raise NotImplementedError

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.module1(self.module0(input))

    @property
    def bias(self) -> torch.Tensor | None:
        return self.module1.bias

    def _load(self, first: torch.Tensor, second: torch.Tensor, bias: torch.Tensor | None) -> None:
        with torch.no_grad():
            self.module0.weight.copy_(first.reshape(self.module0.weight.shape))
            self.module1.weight.copy_(second.reshape(self.module1.weight.shape))
            if self.module1.bias is not None and bias is not None:
                self.module1.bias.copy_(bias)

    def apply_solution(self, solution: LowRankSolution) -> None:
        """Use `solution`'s factors: new sublayers of its rank, hence new Parameters (build or rebind
        optimizers afterwards). A fitted bias is dropped when the layer has none."""
        if solution.Wa is None or solution.Wb is None:
            raise ValueError("the solution is not factorized (its rank was too large): nothing to apply")
        weight = self.module0.weight
        self.latent_size = solution.rank
        self._layers(solution.rank, weight.device, weight.dtype)
        first, second = (solution.Wa.T, solution.Wb.T) if self._transposed else (solution.Wa, solution.Wb)
        self._load(first, second, solution.bias)

    def set_rank(self, input: torch.Tensor, rank: int) -> None:
        """Lower the latent size to `rank`, fitted on `input` (Composer's progressive factorization)."""
        if rank > self.latent_size:
            raise ValueError(f"`rank`={rank} exceeds the current latent size {self.latent_size}")
        if rank < self.latent_size:
            self.apply_solution(self.solution_for_rank(input, rank))


class FactorizedLinear(_Factorized):
    """`torch.nn.Linear` as ``module0`` (in -> latent, no bias) then ``module1`` (latent -> out, the bias).

    Build it by hand like a Linear, or from a trained one with `from_linear` (truncated SVD of its
    weight). ``weight`` and ``bias`` read the dense equivalent, for code that reads a Linear's weight
    (e.g. the fast path of ``nn.TransformerEncoderLayer`` in eval mode).
    """

    _transposed = True  # factorize_matrix works on (in, out) matrices; nn.Linear holds (out, in)
    module0: nn.Linear
    module1: nn.Linear

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        latent_features: float = 0.25,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        self.in_features, self.out_features, self.has_bias = in_features, out_features, bias
        self.latent_size = _latent_that_saves("latent_features", latent_features, in_features, out_features)
        self._layers(self.latent_size, device, dtype)

    def _layers(self, latent: int, device: torch.device | str | None, dtype: torch.dtype | None) -> None:
        self.module0 = nn.Linear(self.in_features, latent, bias=False, device=device, dtype=dtype)
        self.module1 = nn.Linear(latent, self.out_features, bias=self.has_bias, device=device, dtype=dtype)

    @property
    def latent_features(self) -> int:
        return self.latent_size

    @property
    def weight(self) -> torch.Tensor:
        return self.module1.weight @ self.module0.weight

    @staticmethod
    def max_allowed_latent_features(in_features: int, out_features: int) -> int:
        return max_rank_with_speedup(in_features, out_features)

    @classmethod
    def from_linear(cls, module: nn.Linear, latent_features: float = 0.25) -> FactorizedLinear:
        """The best rank-``latent`` approximation of `module` (its bias kept), on its device and dtype."""
        weight = module.weight
        new = cls(
            module.in_features,
            module.out_features,
            module.bias is not None,
            latent_features,
            weight.device,
            weight.dtype,
        )
        first, second = _truncated_svd(weight.T, new.latent_size)
        new._load(first.T, second.T, module.bias)
        return new

    def solution_for_rank(self, input: torch.Tensor, rank: int) -> LowRankSolution:
        X = input.detach().reshape(-1, self.in_features)
        return factorize_matrix(X, self(X), self.module0.weight.T, self.module1.weight.T, rank=rank)


class FactorizedConv2d(_Factorized):
    """`torch.nn.Conv2d` as ``module0`` (``k x k``, in -> latent, no bias, the original stride, padding and
    dilation) then ``module1`` (``1 x 1``, latent -> out, the bias).

    Build it by hand like a Conv2d (``groups`` is not supported), or from a trained one with
    `from_conv2d`. ``weight`` and ``bias`` read the dense ``k x k`` equivalent.
    """

    module0: nn.Conv2d
    module1: nn.Conv2d

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        latent_channels: float = 0.25,
        stride: int | tuple[int, int] = 1,
        padding: str | int | tuple[int, int] = 0,
        dilation: int | tuple[int, int] = 1,
        bias: bool = True,
        padding_mode: Literal["zeros", "reflect", "replicate", "circular"] = "zeros",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, _pair(kernel_size)
        self.stride, self.padding, self.dilation = stride, padding, dilation
        self.padding_mode, self.has_bias = padding_mode, bias
        self.latent_size = _latent_that_saves(
            "latent_channels", latent_channels, in_channels, out_channels, self.kernel_size
        )
        self._layers(self.latent_size, device, dtype)

    def _layers(self, latent: int, device: torch.device | str | None, dtype: torch.dtype | None) -> None:
        self.module0 = nn.Conv2d(
            self.in_channels, latent, self.kernel_size, self.stride, self.padding, self.dilation, bias=False,
            padding_mode=self.padding_mode, device=device, dtype=dtype,
        )  # fmt: skip
        self.module1 = nn.Conv2d(latent, self.out_channels, 1, bias=self.has_bias, device=device, dtype=dtype)

    @property
    def latent_channels(self) -> int:
        return self.latent_size

    @property
    def weight(self) -> torch.Tensor:
        return torch.einsum("ol,lihw->oihw", self.module1.weight[:, :, 0, 0], self.module0.weight)

    @staticmethod
    def max_allowed_latent_channels(in_channels: int, out_channels: int, kernel_size: int | tuple[int, int]) -> int:
        return max_rank_with_speedup(in_channels, out_channels, _pair(kernel_size))

    @classmethod
    def from_conv2d(cls, module: nn.Conv2d, latent_channels: float = 0.25) -> FactorizedConv2d:
        """The best rank-``latent`` approximation of `module` (its bias kept), on its device and dtype."""
        if module.groups != 1:
            raise ValueError(f"grouped convolutions are not factorized (groups={module.groups})")
        weight = module.weight
        new = cls(
            module.in_channels,
            module.out_channels,
            module.kernel_size,  # type: ignore[arg-type]
            latent_channels,
            stride=module.stride,  # type: ignore[arg-type]
            padding=module.padding,  # type: ignore[arg-type]
            dilation=module.dilation,  # type: ignore[arg-type]
            bias=module.bias is not None,
            padding_mode=module.padding_mode,
            device=weight.device,
            dtype=weight.dtype,
        )
        first, second = _truncated_svd(weight.reshape(module.out_channels, -1).T, new.latent_size)
        new._load(first.T, second.T, module.bias)
        return new

    def solution_for_rank(self, input: torch.Tensor, rank: int) -> LowRankSolution:
        return factorize_conv2d(
            input, self.module0.weight, self.module1.weight, rank, biasB=self.module1.bias,
            padding=self.module0.padding, dilation=self.module0.dilation,
        )  # fmt: skip
