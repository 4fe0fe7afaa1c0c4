"""apply_channels_last: every 4-D weight re-laid in place (same objects, same values), idempotent, loud no-ops."""

from __future__ import annotations

import copy

import pytest
import torch
from cadence_channels_last import apply_channels_last
from torch import nn

from cadence.ops import NoEffectError, NoEffectWarning


def _resnet18() -> nn.Module:
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=10)


def _stride_order(tensor: torch.Tensor) -> str:
    """'nchw' or 'nhwc': the dimensions from the largest stride to the smallest (Composer's test)."""
    return "".join("nchw"[i] for i in sorted(range(4), key=lambda d: -tensor.stride(d)))


def test_conv_weights_go_from_nchw_to_nhwc_and_keep_their_values() -> None:
    model = _resnet18()
    before = copy.deepcopy(model.state_dict())
    weight = model.layer1[0].conv1.weight
    assert _stride_order(weight) == "nchw"
    report = apply_channels_last(model)
    assert model.layer1[0].conv1.weight is weight and _stride_order(weight) == "nhwc"
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    # 1x1 kernels are the same in both formats: only the 17 convolutions with 3x3 or 7x7 kernels change
    assert report.counts() == {"ChannelsLast/Conv2d -> channels_last": 17}
    assert all(
        m.weight.is_contiguous(memory_format=torch.channels_last) for m in model.modules() if isinstance(m, nn.Conv2d)
    )


def test_optimizer_state_and_gradients_survive() -> None:
    model = _resnet18()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.rand(4, 3, 32, 32)
    model(x).sum().backward()
    optimizer.step()
    momentum = optimizer.state[model.conv1.weight]["momentum_buffer"].clone()
    apply_channels_last(model)  # with gradients present: they are re-laid too
    assert model.conv1.weight.grad.is_contiguous(memory_format=torch.channels_last)
    assert {id(p) for g in optimizer.param_groups for p in g["params"]} == {id(p) for p in model.parameters()}
    assert torch.equal(optimizer.state[model.conv1.weight]["momentum_buffer"], momentum)
    optimizer.zero_grad()
    model(x).sum().backward()
    optimizer.step()  # trains on; new gradients follow the weights' layout
    assert model.conv1.weight.grad.is_contiguous(memory_format=torch.channels_last)


def test_a_second_application_and_models_without_4d_weights_warn() -> None:
    model = _resnet18()
    apply_channels_last(model)
    with pytest.warns(NoEffectWarning, match="every 4-D parameter and buffer is channels_last already"):
        assert not apply_channels_last(model)
    mlp = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with pytest.warns(NoEffectWarning, match="ChannelsLast changed nothing in Sequential: it has no 4-D weight"):
        apply_channels_last(mlp)
    with pytest.raises(NoEffectError, match="no 4-D weight"):
        apply_channels_last(mlp, strict=True)
    with pytest.raises(ValueError, match="`strict`='yes'"):
        apply_channels_last(mlp, strict="yes")  # type: ignore[arg-type]


def test_3d_convolutions_are_left_alone_and_compiled_models_unwrapped() -> None:
    model = nn.Sequential(nn.Conv3d(2, 4, 3), nn.Conv2d(2, 4, 3))
    report = apply_channels_last(torch.compile(model))  # Composer's model.to(memory_format=...) fails on 5-D
    assert report.replaced == {"Conv2d -> channels_last": ["1"]} and model[0].weight.is_contiguous()


def test_timm_resnet50_and_dtype() -> None:
    timm = pytest.importorskip("timm")
    torchvision = pytest.importorskip("torchvision")
    model = timm.create_model("resnet18", pretrained=False, num_classes=10).double()
    apply_channels_last(model)
    assert model.conv1.weight.dtype == torch.float64 and _stride_order(model.conv1.weight) == "nhwc"
    assert apply_channels_last(torchvision.models.resnet50()).count == 17  # the stem and the 16 3x3 kernels


def test_channels_last_inputs_bf16_autocast_and_export_paths() -> None:
    model = _resnet18().eval()
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        expected = model(x)
        apply_channels_last(model)
        assert torch.allclose(model(x), expected, atol=1e-5)
        assert torch.allclose(model(x.contiguous(memory_format=torch.channels_last)), expected, atol=1e-5)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert torch.allclose(model(x).float(), expected, atol=0.1, rtol=0.1)
        assert torch.allclose(torch.fx.symbolic_trace(model)(x), expected, atol=1e-5)
        assert torch.allclose(torch.export.export(model, (x,)).module()(x), expected, atol=1e-5)
