"""BlurPool's math against its definition, and the surgery on stock torchvision and timm models."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from cadence_blurpool import BlurConv2d, BlurMaxPool2d, BlurPool2d, apply_blurpool, blur_2d, blurmax_pool2d
from torch import nn

from cadence.ops import NoEffectError, NoEffectWarning

FILTER = torch.tensor([[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]) / 16


def _reference_blur(x: torch.Tensor, stride: int = 1) -> torch.Tensor:
    """The definition, pixel by pixel: zero padding of 1, the binomial filter, every `stride`-th output."""
    n, c, h, w = x.shape
    padded = F.pad(x, (1, 1, 1, 1))
    out = torch.zeros(n, c, h, w, dtype=x.dtype)
    for i in range(h):
        for j in range(w):
            out[:, :, i, j] = (padded[:, :, i : i + 3, j : j + 3] * FILTER.to(x.dtype)).sum(dim=(2, 3))
    return out[:, :, ::stride, ::stride]


def _images(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed))


def _resnet18() -> nn.Module:
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=10)


# The blur ---------------------------------------------------------------------------------------
def test_an_impulse_gives_the_binomial_filter() -> None:
    impulse = torch.zeros(1, 1, 5, 5, dtype=torch.float64)
    impulse[0, 0, 2, 2] = 1
    assert torch.equal(blur_2d(impulse)[0, 0, 1:4, 1:4], FILTER.double())
    assert torch.equal(FILTER, torch.outer(torch.tensor([1.0, 2, 1]), torch.tensor([1.0, 2, 1])) / 16)


@pytest.mark.parametrize("stride", [1, 2, 3])
@pytest.mark.parametrize("shape", [(2, 3, 7, 7), (1, 4, 8, 5)])
def test_blur_equals_the_definition_with_zero_padding(stride: int, shape: tuple[int, ...]) -> None:
    x = _images(*shape, seed=stride).double()
    assert torch.allclose(blur_2d(x, stride=stride), _reference_blur(x, stride), atol=1e-12)
    corner = (x[0, 0, 0, 0] * 4 + x[0, 0, 0, 1] * 2 + x[0, 0, 1, 0] * 2 + x[0, 0, 1, 1]) / 16  # zeros outside
    assert torch.isclose(blur_2d(x)[0, 0, 0, 0], corner)


def test_blur_lowers_the_spread_and_keeps_constants_inside() -> None:
    x = _images(4, 3, 16, 16)
    assert blur_2d(x).std() <= x.std()
    constant = torch.full((1, 2, 6, 6), 3.0)
    assert torch.allclose(blur_2d(constant)[..., 1:-1, 1:-1], constant[..., 1:-1, 1:-1])


def test_custom_filters_channels_and_padding() -> None:
    x = _images(2, 3, 6, 6)
    box = torch.ones(3, 3) / 9
    assert torch.allclose(blur_2d(x, filter=box), F.avg_pool2d(x, 3, 1, 1, count_include_pad=True), atol=1e-6)
    per_channel = FILTER.expand(3, 1, 3, 3).contiguous()
    assert torch.equal(blur_2d(x, channels=3, filter=per_channel), blur_2d(x))
    assert blur_2d(x, stride=2, padding=0).shape == (2, 3, 2, 2)
    with pytest.raises(ValueError, match="`filter` must have odd"):
        blur_2d(x, filter=torch.ones(2, 2))


def test_blurmax_pool_is_a_stride_one_max_then_a_strided_blur() -> None:
    x = _images(2, 4, 9, 9).double()
    expected = _reference_blur(F.max_pool2d(x, 3, 1, 1), stride=2)
    assert torch.allclose(blurmax_pool2d(x, 3, 2, 1), expected, atol=1e-12)
    assert blurmax_pool2d(x, 3, 2, 1).shape == F.max_pool2d(x, 3, 2, 1).shape
    last = x.contiguous(memory_format=torch.channels_last)
    out = blurmax_pool2d(last, 3, 2, 1)
    assert out.is_contiguous(memory_format=torch.channels_last) and torch.allclose(out, expected, atol=1e-12)
    assert blurmax_pool2d(x, 3, 2, 1).is_contiguous()  # NCHW in, NCHW out (the max runs in channels_last)


def test_blurmax_pool2d_module_matches_maxpool_shapes() -> None:
    for pool in (nn.MaxPool2d(3, 2, 1), nn.MaxPool2d(2), nn.MaxPool2d(3, 2, 0, ceil_mode=True)):
        x = _images(2, 3, 15, 15)
        assert BlurMaxPool2d.from_maxpool2d(pool)(x).shape == pool(x).shape
    assert BlurPool2d(channels=3)(_images(2, 3, 8, 8)).shape == (2, 3, 4, 4)
    assert torch.equal(BlurPool2d()(_images(2, 3, 8, 8)), blur_2d(_images(2, 3, 8, 8), stride=2))


# BlurConv2d ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("blur_first", [True, False])
@pytest.mark.parametrize(("kernel", "padding"), [(3, 1), (1, 0), (1, 1)])
def test_blur_conv_is_blur_then_conv_or_conv_then_blur(blur_first: bool, kernel: int, padding: int) -> None:
    torch.manual_seed(0)
    conv = nn.Conv2d(4, 6, kernel, stride=2, padding=padding).double()
    original = copy.deepcopy(conv)
    x = _images(2, 4, 10, 10).double()
    blurred = BlurConv2d.from_conv2d(conv, blur_first=blur_first)
    if blur_first:  # Composer: blur at stride 1, then the strided convolution
        expected = original(_reference_blur(x))
    else:  # the convolution at stride 1, then blur and subsample
        expected = _reference_blur(F.conv2d(x, original.weight, original.bias, 1, padding), stride=2)
    assert torch.allclose(blurred(x), expected, atol=1e-12)
    assert blurred.conv is conv and blurred.conv.weight is conv.weight  # the original convolution, kept


def test_a_pointwise_conv_blurs_only_the_pixels_it_reads() -> None:
    blurred = BlurConv2d(8, 16, 1, stride=2, bias=False)
    assert blurred.blur_stride == (2, 2) and blurred.conv.stride == (1, 1)
    x = _images(2, 8, 12, 12)
    expected = F.conv2d(blur_2d(x), blurred.conv.weight, None, 2)  # Composer's order, 4x the blurred pixels
    assert torch.allclose(blurred(x), expected, atol=1e-6)
    assert BlurConv2d(8, 16, 3, stride=2, padding=1).blur_stride == (1, 1)


# Surgery --------------------------------------------------------------------------------------------
def test_resnet18_strided_convs_and_maxpool_are_replaced_and_nothing_else() -> None:
    model = _resnet18()
    original = copy.deepcopy(model)
    report = apply_blurpool(model)
    strided = [n for n, m in original.named_modules() if isinstance(m, nn.Conv2d) and m.stride != (1, 1)]
    assert strided[0] == "conv1" and original.conv1.in_channels == 3  # the stem: fewer than 16 channels
    assert report.replaced == {"MaxPool2d -> BlurMaxPool2d": ["maxpool"], "Conv2d -> BlurConv2d": strided[1:]}
    assert type(model.conv1) is nn.Conv2d and type(model.layer1[0].conv1) is nn.Conv2d
    x = _images(2, 3, 32, 32)
    for name in strided[1:]:
        layer, old = model.get_submodule(name), original.get_submodule(name)
        assert isinstance(layer, BlurConv2d) and torch.equal(layer.conv.weight, old.weight)
        features = _images(2, old.in_channels, 8, 8)
        assert layer(features).shape == old(features).shape
    assert model(x).shape == original(x).shape == (2, 10)


def test_resnet50_and_timm_structure() -> None:
    torchvision = pytest.importorskip("torchvision")
    timm = pytest.importorskip("timm")
    resnet50 = torchvision.models.resnet50()
    report = apply_blurpool(resnet50, replace_maxpools=False)
    assert report.counts() == {"BlurPool/Conv2d -> BlurConv2d": 6}  # conv2 and downsample of layers 2-4
    assert isinstance(resnet50.layer2[0].conv2, BlurConv2d) and isinstance(resnet50.maxpool, nn.MaxPool2d)
    timm_model = timm.create_model("resnet18", pretrained=False, num_classes=10)
    assert apply_blurpool(timm_model).count == 7
    assert timm_model(_images(2, 3, 32, 32)).shape == (2, 10)


def test_optimizer_keeps_every_parameter_and_its_state() -> None:
    model = _resnet18()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(_images(2, 3, 32, 32)).sum().backward()
    optimizer.step()
    conv = model.layer2[0].conv1
    moments = optimizer.state[conv.weight]["exp_avg"].clone()
    apply_blurpool(model, optimizers=optimizer)
    in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert in_optimizer == {id(p) for p in model.parameters() if p.requires_grad}
    assert model.layer2[0].conv1.conv.weight is conv.weight
    assert torch.equal(optimizer.state[conv.weight]["exp_avg"], moments)
    model(_images(2, 3, 32, 32)).sum().backward()
    optimizer.step()  # trains on


def test_device_dtype_and_memory_format_are_kept() -> None:
    model = _resnet18().double().to(memory_format=torch.channels_last)
    apply_blurpool(model)
    blurconv = model.layer2[0].conv1
    assert blurconv.blur_filter.dtype == torch.float64 and blurconv.conv.weight.dtype == torch.float64
    assert blurconv.conv.weight.is_contiguous(memory_format=torch.channels_last)
    x = _images(2, 3, 32, 32).double().contiguous(memory_format=torch.channels_last)
    assert model(x).dtype == torch.float64


def test_the_maxpool_filter_lands_on_the_models_device() -> None:
    # a MaxPool2d has no tensor of its own: its replacement's filter must follow the model ("meta" stands
    # in for a GPU, where a filter left on the CPU failed the first forward)
    model = _resnet18().to("meta", torch.float64)
    apply_blurpool(model)
    assert isinstance(model.maxpool, BlurMaxPool2d)
    assert model.maxpool.filt2d.device.type == "meta" and model.maxpool.filt2d.dtype == torch.float64
    assert {buffer.device.type for buffer in model.buffers()} == {"meta"}


def test_a_second_application_changes_nothing_and_says_so() -> None:
    model = _resnet18()
    apply_blurpool(model)
    structure, weights = str(model), copy.deepcopy(model.state_dict())
    with pytest.warns(NoEffectWarning, match="BlurPool changed no module"):
        assert not apply_blurpool(model)
    assert str(model) == structure and all(torch.equal(weights[k], v) for k, v in model.state_dict().items())


def test_nothing_to_replace_warns_or_raises_when_strict() -> None:
    mlp = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    with pytest.warns(NoEffectWarning, match="changed no module of Sequential"):
        assert not apply_blurpool(mlp)
    with pytest.raises(NoEffectError, match="changed no module"):
        apply_blurpool(_resnet18(), replace_maxpools=False, min_channels=1024, strict=True)
    keeps_indices = nn.Sequential(nn.MaxPool2d(2, return_indices=True))
    with pytest.warns(NoEffectWarning):
        apply_blurpool(keeps_indices)
    assert type(keeps_indices[0]) is nn.MaxPool2d  # the unpooling that needs its indices still works


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"min_channels": -1}, "`min_channels`=-1"),
        ({"min_channels": 16.0}, "`min_channels`=16.0"),
        ({"blur_first": "yes"}, "`blur_first`='yes'"),
        ({"replace_convs": False, "replace_maxpools": False}, "would change nothing"),
    ],
)
def test_bad_arguments_are_refused_naming_them(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        apply_blurpool(nn.Sequential(nn.Conv2d(16, 16, 3, 2)), **kwargs)


# Inputs and export ---------------------------------------------------------------------------------
def test_channels_last_inputs_and_bf16_autocast() -> None:
    model = _resnet18().eval()
    apply_blurpool(model)
    x = _images(2, 3, 32, 32)
    with torch.no_grad():
        expected = model(x)
        assert torch.allclose(model(x.contiguous(memory_format=torch.channels_last)), expected, atol=1e-5)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model(x)
    assert low.dtype == torch.bfloat16 and torch.allclose(low.float(), expected, atol=0.1, rtol=0.1)


def test_fx_and_export_trace_the_blurred_model() -> None:
    model = _resnet18().eval()
    apply_blurpool(model)
    x = _images(2, 3, 32, 32)
    with torch.no_grad():
        expected = model(x)
        traced = torch.fx.symbolic_trace(model)
        assert torch.allclose(traced(x), expected, atol=1e-6)
        exported = torch.export.export(model, (x,))
        assert torch.allclose(exported.module()(x), expected, atol=1e-5)


def test_compiled_output_equals_eager() -> None:
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.MaxPool2d(2), nn.Conv2d(16, 8, 3, 2, 1)).eval()
    apply_blurpool(model)
    x = _images(2, 3, 16, 16)
    with torch.no_grad():
        assert torch.allclose(torch.compile(model)(x), model(x), atol=1e-5)
