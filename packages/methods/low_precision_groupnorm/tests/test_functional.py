"""LPGroupNorm and apply_low_precision_groupnorm: exact in fp32, low precision under autocast, surgery invariants."""

from __future__ import annotations

from functools import partial

import pytest
import torch
import torch.nn.functional as F
from cadence_low_precision_groupnorm import (
    LPGroupNorm,
    apply_low_precision_groupnorm,
    cast_if_autocast_enabled,
    low_precision_group_norm,
)
from torch import nn

from cadence import Precision
from cadence.ops import NoEffectError, NoEffectWarning

tv = pytest.importorskip("torchvision")


def _pair(affine: bool) -> tuple[nn.GroupNorm, LPGroupNorm]:
    torch.manual_seed(0)
    plain = nn.GroupNorm(4, 12, eps=1e-3, affine=affine)
    if affine:
        with torch.no_grad():
            plain.weight.uniform_(0.5, 1.5)
            plain.bias.uniform_(-0.5, 0.5)
    return plain, LPGroupNorm.from_groupnorm(plain)


def _gn_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.GroupNorm(2, 8), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.GroupNorm(4, 8, affine=False)
    )


def _gn_resnet18() -> nn.Module:
    torch.manual_seed(0)
    return tv.models.resnet18(num_classes=10, norm_layer=lambda channels: nn.GroupNorm(8, channels))


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape", [(2, 12, 5, 7), (3, 12), (2, 12, 9)])
def test_without_autocast_it_is_exactly_groupnorm(affine: bool, shape: tuple[int, ...]) -> None:
    plain, low = _pair(affine)
    x = torch.randn(shape) * 3 + 1
    assert torch.equal(low(x), plain(x))
    if len(shape) == 4:
        channels_last = x.contiguous(memory_format=torch.channels_last)
        assert torch.equal(low(channels_last), plain(channels_last))


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_under_cpu_autocast_it_runs_in_the_low_precision(affine: bool, dtype: torch.dtype) -> None:
    plain, low = _pair(affine)
    x = torch.randn(2, 12, 6, 6) * 3 + 1  # fp32 input: GroupNorm stays in fp32 on it, LPGroupNorm does not
    weight, bias = (None, None) if not affine else (plain.weight.to(dtype), plain.bias.to(dtype))
    expected = F.group_norm(x.to(dtype), 4, weight, bias, 1e-3)  # the definition: everything cast first
    with torch.autocast("cpu", dtype=dtype):
        out, reference = low(x), plain(x)
    assert out.dtype == dtype and reference.dtype == torch.float32
    assert torch.equal(out, expected)
    torch.testing.assert_close(out.float(), reference, atol=0.05, rtol=0.02)  # within the low precision
    with torch.autocast("cpu", dtype=dtype):
        low(x.requires_grad_()).float().square().sum().backward()
    if affine:  # gradients reach the fp32 parameters in fp32
        assert low.weight.grad is not None and low.weight.grad.dtype == torch.float32
    assert x.grad is not None and x.grad.dtype == torch.float32


def test_autocast_on_another_device_changes_nothing_here() -> None:
    plain, low = _pair(True)
    x = torch.randn(2, 12, 4, 4)
    with torch.autocast("cuda", dtype=torch.float16, enabled=False), torch.autocast("cpu", enabled=False):
        assert torch.equal(low(x), plain(x))
    assert cast_if_autocast_enabled(None) is None and cast_if_autocast_enabled(x) is x
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert cast_if_autocast_enabled(x).dtype == torch.bfloat16
    assert torch.equal(low_precision_group_norm(x, 3), F.group_norm(x, 3))


@pytest.mark.parametrize("affine", [True, False])
def test_every_groupnorm_is_replaced_and_the_parameters_survive(affine: bool) -> None:
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.GroupNorm(2, 8, affine=affine), nn.ReLU(), nn.GroupNorm(1, 8))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.rand(2, 3, 8, 8)).sum().backward()
    optimizer.step()
    params, keys = list(model.named_parameters()), {k: v.shape for k, v in model.state_dict().items()}
    state = {id(p): {k: v.clone() for k, v in optimizer.state[p].items()} for _, p in params}
    report = apply_low_precision_groupnorm(model, "amp_bf16", optimizer)
    assert report.replaced == {"GroupNorm -> LPGroupNorm": ["1", "3"]}
    assert all(isinstance(m, LPGroupNorm) for m in model.modules() if isinstance(m, nn.GroupNorm))
    assert list(model.named_parameters()) == params  # the same names and the same objects
    assert {k: v.shape for k, v in model.state_dict().items()} == keys
    for _, p in params:
        assert all(torch.equal(optimizer.state[p][k], v) for k, v in state[id(p)].items())
    assert (model[1].weight is None) == (not affine) and model[1].affine == affine


def test_resnet18_with_groupnorm_keeps_device_dtype_layout_and_outputs() -> None:
    model = _gn_resnet18().double().to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.rand(2, 3, 32, 32, dtype=torch.float64)
    before = model(x)
    report = apply_low_precision_groupnorm(model, Precision.AMP_BF16, optimizers=[optimizer])
    assert report.count == 20 and not any(type(m) is nn.GroupNorm for m in model.modules())
    assert {id(p) for g in optimizer.param_groups for p in g["params"]} == {id(p) for p in model.parameters()}
    assert all(p.dtype == torch.float64 for p in model.parameters())
    assert model.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(model(x), before)
    assert torch.equal(model(x.contiguous(memory_format=torch.channels_last)), before)


def test_a_second_application_and_models_without_groupnorm_change_nothing() -> None:
    model = _gn_resnet18()
    apply_low_precision_groupnorm(model)
    with pytest.warns(NoEffectWarning, match="changed no module of ResNet"):
        assert not apply_low_precision_groupnorm(model)
    with pytest.warns(NoEffectWarning, match="changed no module of ResNet"):
        apply_low_precision_groupnorm(tv.models.resnet18())  # BatchNorm only
    with pytest.raises(NoEffectError):
        apply_low_precision_groupnorm(tv.models.resnet18(), strict=True)


def test_fp32_precision_replaces_nothing_and_says_why() -> None:
    model = _gn_resnet18()
    with pytest.warns(NoEffectWarning, match="precision='fp32' runs without autocast"):
        assert not apply_low_precision_groupnorm(model, "fp32")
    assert not any(isinstance(m, LPGroupNorm) for m in model.modules())
    with pytest.raises(NoEffectError, match="precision='fp32'"):
        apply_low_precision_groupnorm(model, Precision.FP32, strict=True)


def test_timm_and_resnet50_structures() -> None:
    assert apply_low_precision_groupnorm(tv.models.resnet50(norm_layer=partial(nn.GroupNorm, 8))).count == 53
    timm = pytest.importorskip("timm")
    norm = lambda channels, **kwargs: nn.GroupNorm(8, channels, **kwargs)  # noqa: E731 -- timm calls it with device=...
    model = timm.create_model("resnet18", pretrained=False, num_classes=10, norm_layer=norm)
    assert apply_low_precision_groupnorm(model, "amp_fp16").count == 20
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model(torch.rand(2, 3, 32, 32)).shape == (2, 10)


def test_fx_and_export_after_the_surgery_follow_autocast_at_run_time() -> None:
    model = _gn_net()
    apply_low_precision_groupnorm(model)
    x = torch.rand(2, 3, 16, 16)
    expected = model(x)
    traced = torch.fx.symbolic_trace(model)  # the norm is one call, decided when the graph runs
    assert torch.equal(traced(x), expected)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = traced(x)
        assert low.dtype == torch.bfloat16 and torch.equal(low, model(x))
    exported = torch.export.export(model, (x,))
    torch.testing.assert_close(exported.module()(x), expected)


def test_compiled_output_equals_eager_in_fp32_and_under_autocast() -> None:
    model = _gn_net()
    apply_low_precision_groupnorm(model, "amp_bf16")
    compiled = torch.compile(model)
    x = torch.rand(2, 3, 16, 16)
    torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low, eager = compiled(x), model(x)
    assert low.dtype == eager.dtype == torch.bfloat16
    torch.testing.assert_close(low, eager, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize(("value", "error"), [("bf16", ValueError), ("AMP", ValueError), (torch.bfloat16, TypeError)])
def test_bad_precisions_are_refused_naming_the_argument(value: object, error: type) -> None:
    with pytest.raises(error, match="`precision`"):
        apply_low_precision_groupnorm(nn.GroupNorm(1, 2), value)  # type: ignore[arg-type]
