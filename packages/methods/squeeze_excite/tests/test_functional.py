"""Squeeze-Excite: Composer's block structure and math, shapes kept, the surgery on torchvision and timm models."""

from __future__ import annotations

import copy

import pytest
import torch
from cadence_squeeze_excite import SqueezeExcite2d, SqueezeExciteConv2d, apply_squeeze_excite
from torch import nn

from cadence.ops import NoEffectError, NoEffectWarning


def _resnet18() -> nn.Module:
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=10)


def _images(*shape: int) -> torch.Tensor:
    return torch.rand(shape, generator=torch.Generator().manual_seed(0))


def test_the_block_is_pool_mlp_sigmoid_gain() -> None:
    torch.manual_seed(0)
    block = SqueezeExcite2d(8, latent_channels=4).double()
    x = _images(3, 8, 5, 5).double()
    squeeze = x.mean(dim=(2, 3))  # (N, C)
    hidden = torch.relu(squeeze @ block.pool_and_mlp[2].weight.T)
    gain = torch.sigmoid(hidden @ block.pool_and_mlp[4].weight.T)
    assert torch.allclose(block(x), x * gain[:, :, None, None], atol=1e-12)
    assert [type(m).__name__ for m in block.pool_and_mlp] == [
        "AdaptiveAvgPool2d", "Flatten", "Linear", "ReLU", "Linear", "Sigmoid",
    ]  # fmt: skip
    assert block.pool_and_mlp[2].bias is None and block.pool_and_mlp[4].weight.shape == (8, 4)


@pytest.mark.parametrize(("latent", "width"), [(64, 64), (0.25, 32), (0.125, 16), (1, 1)])
def test_latent_width_is_absolute_or_a_fraction(latent: float, width: int) -> None:
    assert SqueezeExcite2d(128, latent).latent_channels == width


def test_a_fraction_that_leaves_no_channel_is_refused() -> None:
    with pytest.raises(ValueError, match=r"`latent_channels`=0\.01 gives 0 latent channels for 64 channels"):
        SqueezeExcite2d(64, 0.01)
    with pytest.raises(ValueError, match=r"`latent_channels`=0\.01"):
        apply_squeeze_excite(nn.Sequential(nn.Conv2d(64, 64, 1)), latent_channels=0.01, min_channels=1)


def test_conv_wrapper_keeps_the_conv_and_its_output_shape() -> None:
    conv = nn.Conv2d(16, 32, 3, stride=2, padding=1)
    wrapped = SqueezeExciteConv2d.from_conv2d(conv, latent_channels=8)
    x = _images(2, 16, 9, 9)
    assert wrapped.conv is conv and wrapped(x).shape == conv(x).shape
    assert torch.allclose(wrapped(x), wrapped.se(conv(x)))
    built = SqueezeExciteConv2d(16, 32, 3, padding=1, latent_channels=0.5)
    assert built.se.latent_channels == 16 and built(x).shape == (2, 32, 9, 9)


def test_resnet18_gets_blocks_after_wide_convs_only_and_keeps_shapes() -> None:
    model = _resnet18()
    original = copy.deepcopy(model)
    report = apply_squeeze_excite(model)
    wide = [
        name
        for name, m in original.named_modules()
        if isinstance(m, nn.Conv2d) and min(m.in_channels, m.out_channels) >= 128
    ]
    assert report.replaced == {"Conv2d -> SqueezeExciteConv2d": wide} and len(wide) == 13
    assert type(model.layer2[0].conv1) is nn.Conv2d  # 64 -> 128: below min_channels on its input side
    x = _images(2, 3, 32, 32)
    assert model(x).shape == original(x).shape
    se = model.layer3[0].conv2.se
    assert se.latent_channels == 64 and se.pool_and_mlp[2].weight.shape == (64, 256)
    low = apply_squeeze_excite(_resnet18(), latent_channels=0.25, min_channels=64)
    assert low.count == 19  # every conv but the 3-channel stem


def test_resnet50_and_timm_counts() -> None:
    torchvision = pytest.importorskip("torchvision")
    timm = pytest.importorskip("timm")
    resnet50 = torchvision.models.resnet50()
    expected = sum(min(m.in_channels, m.out_channels) >= 512 for m in resnet50.modules() if isinstance(m, nn.Conv2d))
    assert apply_squeeze_excite(resnet50, min_channels=512).count == expected > 0
    timm_model = timm.create_model("resnet18", pretrained=False, num_classes=10)
    assert apply_squeeze_excite(timm_model).count == 13
    assert timm_model(_images(2, 3, 32, 32)).shape == (2, 10)


def test_the_optimizer_trains_the_conv_and_its_block_in_one_group() -> None:
    model = _resnet18()
    decay, no_decay = [p for p in model.parameters() if p.ndim > 1], [p for p in model.parameters() if p.ndim <= 1]
    optimizer = torch.optim.SGD([{"params": decay}, {"params": no_decay, "weight_decay": 0}], lr=0.1, momentum=0.9)
    model(_images(2, 3, 32, 32)).sum().backward()
    optimizer.step()
    conv = model.layer3[0].conv2
    momentum = optimizer.state[conv.weight]["momentum_buffer"].clone()
    apply_squeeze_excite(model, optimizers=optimizer)
    block = model.layer3[0].conv2
    assert block.conv is conv and torch.equal(optimizer.state[conv.weight]["momentum_buffer"], momentum)
    assert {id(p) for g in optimizer.param_groups for p in g["params"]} == {id(p) for p in model.parameters()}
    first_group = {id(p) for p in optimizer.param_groups[0]["params"]}
    assert {id(p) for p in block.se.parameters()} <= first_group  # with the conv's weight
    model(_images(2, 3, 32, 32)).sum().backward()
    optimizer.step()
    assert optimizer.state[block.se.pool_and_mlp[2].weight]["momentum_buffer"].shape == (64, 256)


def test_device_dtype_memory_format_and_idempotency() -> None:
    model = _resnet18().double().to(memory_format=torch.channels_last)
    apply_squeeze_excite(model)
    assert model.layer4[1].conv1.se.pool_and_mlp[2].weight.dtype == torch.float64
    assert model.layer4[1].conv1.conv.weight.is_contiguous(memory_format=torch.channels_last)
    structure = str(model)
    with pytest.warns(NoEffectWarning, match="SqueezeExcite changed no module"):
        assert not apply_squeeze_excite(model)
    assert str(model) == structure
    with pytest.raises(NoEffectError):
        apply_squeeze_excite(_resnet18(), min_channels=1024, strict=True)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"latent_channels": 0}, "`latent_channels`=0"),
        ({"latent_channels": 64.5}, "`latent_channels`=64.5 must be a whole width"),
        ({"latent_channels": float("nan")}, "`latent_channels`=nan"),
        ({"min_channels": -1}, "`min_channels`=-1"),
        ({"min_channels": 1.5}, "`min_channels`=1.5"),
    ],
)
def test_bad_arguments_are_refused_naming_them(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        apply_squeeze_excite(nn.Sequential(nn.Conv2d(8, 8, 1)), **kwargs)


def test_channels_last_inputs_bf16_autocast_fx_and_export() -> None:
    model = _resnet18().eval()
    apply_squeeze_excite(model)
    x = _images(2, 3, 32, 32)
    with torch.no_grad():
        expected = model(x)
        assert torch.allclose(model(x.contiguous(memory_format=torch.channels_last)), expected, atol=1e-5)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert torch.allclose(model(x).float(), expected, atol=0.1, rtol=0.1)
        assert torch.allclose(torch.fx.symbolic_trace(model)(x), expected, atol=1e-6)
        assert torch.allclose(torch.export.export(model, (x,)).module()(x), expected, atol=1e-5)


def test_compiled_output_equals_eager() -> None:
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1)).eval()
    apply_squeeze_excite(model, latent_channels=4, min_channels=16)
    x = _images(2, 3, 8, 8)
    with torch.no_grad():
        assert torch.allclose(torch.compile(model)(x), model(x), atol=1e-5)
