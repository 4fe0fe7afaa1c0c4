"""Factorize's math (factorize_matrix, factorize_conv2d, the break-even rank), its layers and its surgery."""

from __future__ import annotations

import copy
import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from cadence_factorize import (
    FactorizedConv2d,
    FactorizedLinear,
    apply_factorization,
    factorize_conv2d,
    factorize_matrix,
    factorizing_could_speedup,
    max_rank_with_speedup,
)
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from cadence.ops import NoEffectError, NoEffectWarning

tv = pytest.importorskip("torchvision")


# The math ----------------------------------------------------------------------------------------
def _solve(kind: str, rank: int, n_iters: int = 2, factorized: bool = False, shapes=(32, 16, 64)):
    """Composer's test tasks: a random (or already factorized) map and its outputs on random inputs."""
    c_in, c_now, c_out = shapes
    torch.manual_seed(123)
    if kind == "linear":
        X, bias = torch.randn(100, c_in), torch.randn(c_out)
        Wa, Wb = (
            (torch.randn(c_in, c_now), torch.randn(c_now, c_out)) if factorized else (torch.randn(c_in, c_out), None)
        )
        Y = (X @ Wa @ Wb if factorized else X @ Wa) + bias
        return factorize_matrix(X, Y, Wa, Wb, bias=bias, rank=rank, n_iters=n_iters)
    X = torch.randn(1, c_in, 4, 4)
    if factorized:
        Wa, Wb = torch.randn(c_now, c_in, 3, 3), torch.randn(c_out, c_now, 1, 1)
        return factorize_conv2d(X, Wa, Wb, rank, torch.randn(c_now), torch.randn(c_out), n_iters)
    return factorize_conv2d(X, torch.randn(c_out, c_in, 3, 3), None, rank, torch.randn(c_out), None, n_iters)


@pytest.mark.parametrize("kind", ["linear", "conv2d"])
@pytest.mark.parametrize("factorized", [False, True])
def test_the_error_is_below_the_mean_and_never_grows_with_rank_or_iterations(kind: str, factorized: bool) -> None:
    by_rank = [_solve(kind, rank, factorized=factorized).nmse for rank in (1, 4, 16, 32)]
    by_iters = [_solve(kind, 8, n_iters, factorized).nmse for n_iters in (0, 1, 2, 4)]
    for errors in (by_rank, by_iters):
        assert all(e < 1 for e in errors)
        assert all(later <= earlier + 1e-6 for earlier, later in itertools.pairwise(errors)), errors


@pytest.mark.parametrize(
    ("c_in", "c_now", "rank", "c_out", "expected"),
    [
        (16, 16, 16, 16, "full"),  # rank >= input and output: one full map
        (16, 8, 16, 16, "full"),  # rank >= input, even when the map is factorized already
        (32, 8, 16, 24, "current"),  # rank above the current latent size: kept at it
        (16, 16, 32, 16, "full"),  # rank above the input size
        (16, 16, 16, 8, "full"),  # rank above the output size
        (32, 16, 6, 24, "factorized"),
    ],
)
@pytest.mark.parametrize("kind", ["linear", "conv2d"])
def test_shapes_at_the_edges(kind: str, c_in: int, c_now: int, rank: int, c_out: int, expected: str) -> None:
    solution = _solve(kind, rank, factorized=True, shapes=(c_in, c_now, c_out))
    in_dim, out_dim = (0, 1) if kind == "linear" else (1, 0)
    assert solution.Wa.shape[in_dim] == c_in and solution.bias.shape == (c_out,) and solution.nmse < 1
    if expected == "full":
        assert solution.Wb is None and solution.rank == -1 and solution.Wa.shape[out_dim] == c_out
    else:
        latent = c_now if expected == "current" else rank
        assert solution.rank == latent and solution.Wa.shape[out_dim] == latent
        assert solution.Wb.shape[in_dim] == latent and solution.Wb.shape[out_dim] == c_out


def test_a_map_of_low_rank_is_recovered_exactly() -> None:
    torch.manual_seed(0)
    X, W, bias = torch.randn(200, 24), torch.randn(24, 3) @ torch.randn(3, 40), torch.randn(40)
    solution = factorize_matrix(X, X @ W + bias, W, rank=3)
    assert solution.nmse < 1e-9
    torch.testing.assert_close(X @ solution.Wa @ solution.Wb + solution.bias, X @ W + bias, atol=1e-4, rtol=1e-4)


def test_the_break_even_rank_by_hand() -> None:
    assert max_rank_with_speedup(256, 256, (3, 3)) == 230  # 2304 * 256 / 2560 = 230.4
    assert max_rank_with_speedup(64, 64) == 31  # 32 exactly: one lower
    assert max_rank_with_speedup(64, 512, (1, 1)) == 56  # 56.9
    conv = nn.Conv2d(256, 256, 3)
    assert factorizing_could_speedup(conv, 230) and not factorizing_could_speedup(conv, 231)
    assert factorizing_could_speedup(conv, 0.25) and factorizing_could_speedup(conv, 0.9)  # 230 = int(0.9 * 256)
    assert not factorizing_could_speedup(nn.Conv2d(256, 256, 3, groups=2), 8)  # grouped: never
    assert not factorizing_could_speedup(nn.ReLU(), 8)
    linear = nn.Linear(64, 64)
    assert factorizing_could_speedup(linear, 31) and not factorizing_could_speedup(linear, 32)
    assert not factorizing_could_speedup(linear, 0.5)  # a fraction >= 0.5 never pays for a square matrix
    small = FactorizedLinear(64, 64, latent_features=16)
    assert factorizing_could_speedup(small, 15) and not factorizing_could_speedup(small, 16)


# The layers -------------------------------------------------------------------------------------
def test_from_linear_is_the_truncated_svd_of_the_weight() -> None:
    torch.manual_seed(0)
    low_rank = nn.Linear(64, 48)
    with torch.no_grad():
        low_rank.weight.copy_(torch.randn(48, 2) @ torch.randn(2, 64))
    factorized = FactorizedLinear.from_linear(low_rank, latent_features=2)
    x = torch.randn(5, 64)
    torch.testing.assert_close(factorized(x), low_rank(x), atol=1e-4, rtol=1e-4)  # rank 2 fits exactly
    dense = nn.Linear(64, 48)
    factorized = FactorizedLinear.from_linear(dense, latent_features=8)
    singular_values = torch.linalg.svdvals(dense.weight.detach())
    error = torch.linalg.matrix_norm(factorized.weight - dense.weight)  # Eckart-Young: the tail of the spectrum
    torch.testing.assert_close(error, singular_values[8:].square().sum().sqrt(), atol=1e-4, rtol=1e-4)
    assert factorized.bias is factorized.module1.bias and torch.equal(factorized.bias, dense.bias)


def test_from_conv2d_keeps_geometry_bias_and_padding_mode() -> None:
    torch.manual_seed(0)
    conv = nn.Conv2d(16, 32, 3, stride=2, padding=2, dilation=2, padding_mode="reflect")
    factorized = FactorizedConv2d.from_conv2d(conv, latent_channels=0.5)
    assert factorized.latent_channels == 8 and factorized.module0.padding_mode == "reflect"
    assert (factorized.stride, factorized.padding, factorized.dilation) == ((2, 2), (2, 2), (2, 2))
    x = torch.randn(2, 16, 9, 9)
    assert factorized(x).shape == conv(x).shape
    dense = F.conv2d(F.pad(x, (2, 2, 2, 2), mode="reflect"), factorized.weight, factorized.bias, 2, 0, 2)
    torch.testing.assert_close(factorized(x), dense, atol=1e-5, rtol=1e-5)  # `weight` is the dense equivalent
    assert factorized.module1.bias is not None and not FactorizedConv2d(16, 32, 3, 8, bias=False).module1.bias


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: FactorizedConv2d(64, 64, 3, latent_channels=58), r"`latent_channels`=58 gives 58 .* at most 57"),
        (lambda: FactorizedLinear(64, 64, latent_features=32), r"`latent_features`=32 .* at most 31"),
        (lambda: FactorizedLinear(64, 64, latent_features=0.5), r"`latent_features`=0.5 gives 32"),
        (lambda: FactorizedConv2d(64, 64, 3, latent_channels=0), r"`latent_channels`=0 must be a finite number > 0"),
        (lambda: FactorizedLinear(64, 64, latent_features=math.nan), r"`latent_features`=nan"),
    ],
)
def test_latent_sizes_that_cannot_save_are_refused_naming_the_argument(build, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build()


@pytest.mark.parametrize("kind", ["linear", "conv2d"])
def test_set_rank_lowers_the_latent_size_on_data(kind: str) -> None:
    torch.manual_seed(0)
    if kind == "linear":
        layer, x = FactorizedLinear(64, 48, latent_features=16), torch.randn(50, 64)
    else:
        layer, x = FactorizedConv2d(16, 32, 3, latent_channels=12, stride=2, padding=1), torch.randn(4, 16, 8, 8)
    before = layer(x).detach()
    solution = layer.solution_for_rank(x, 4)
    assert solution.rank == 4 and solution.nmse < 1
    layer.set_rank(x, 4)
    assert layer.latent_size == 4 and layer.module0.weight.shape[0] == 4 and layer.module1.weight.shape[1] == 4
    after = layer(x).detach()
    residual = (after - before).square().sum() / (before - before.mean(dim=0)).square().sum()
    assert after.shape == before.shape and float(residual) < 1
    with pytest.raises(ValueError, match="`rank`=5 exceeds the current latent size 4"):
        layer.set_rank(x, 5)


def test_a_transformer_layer_keeps_working_in_eval_where_torch_reads_the_weights() -> None:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(64, 2, dim_feedforward=256, batch_first=True).eval()
    report = apply_factorization(layer, min_features=64, latent_features=16)
    assert report.replaced == {"Linear -> FactorizedLinear": ["linear1", "linear2"]}  # not attention's out_proj
    x = torch.randn(2, 5, 64)
    slow = layer(x)  # autograd on: the module path
    with torch.no_grad():
        fast = layer(x)  # torch's fused path reads linear1.weight and linear1.bias
    torch.testing.assert_close(fast, slow, atol=1e-4, rtol=1e-4)


# The surgery ------------------------------------------------------------------------------------
def _resnet18() -> nn.Module:
    torch.manual_seed(0)
    return tv.models.resnet18(num_classes=10)


RESNET18_SETTINGS: dict = {"min_channels": 256, "latent_channels": 0.25, "min_features": 256, "latent_features": 128}


@pytest.fixture(scope="module")
def factorized_resnet18() -> dict:
    """A ResNet-18 factorized once (the SVDs of its wide layers are the slow part) after one SGD step, with
    the plain model, the optimizer it rebound, the report and the momentum of layer1 before the surgery."""
    plain = _resnet18()
    model = copy.deepcopy(plain)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.rand(2, 3, 32, 32)).sum().backward()
    optimizer.step()
    kept = {id(p): optimizer.state[p]["momentum_buffer"].clone() for p in model.layer1.parameters()}
    report = apply_factorization(model, **RESNET18_SETTINGS, optimizers=optimizer)
    return {"plain": plain, "model": model, "optimizer": optimizer, "report": report, "kept": kept}


def _flops(model: nn.Module, x: torch.Tensor) -> int:
    with FlopCounterMode(display=False) as counter:
        model(x)
    return counter.get_total_flops()


def _count(model: nn.Module, kind: type) -> int:
    return sum(type(m) is kind for m in model.modules())


def test_resnet18_lowers_its_macs_by_exactly_the_factorized_layers_savings(factorized_resnet18: dict) -> None:
    plain, model = (
        copy.deepcopy(factorized_resnet18["plain"]).eval(),
        copy.deepcopy(factorized_resnet18["model"]).eval(),
    )
    report = factorized_resnet18["report"]
    x = torch.rand(2, 3, 32, 32)
    outputs: dict[str, torch.Size] = {}

    def record(path: str):
        return lambda module, args, out: outputs.__setitem__(path, out.shape)

    for path, m in plain.named_modules():
        if isinstance(m, nn.Conv2d):
            m.register_forward_hook(record(path))
    before, out_before = _flops(plain, x), plain(x)
    paths = report.replaced["Conv2d -> FactorizedConv2d"]
    assert len(paths) == report.count == 8 and "fc" not in str(report.replaced)  # fc: 10 outputs < 256
    assert _count(model, nn.Conv2d) == 2 * 8 + (20 - 8) and model(x).shape == out_before.shape
    saved = 0
    for path in paths:
        layer = model.get_submodule(path)
        fan_in = layer.in_channels * math.prod(layer.kernel_size)
        positions = math.prod(outputs[path][i] for i in (0, 2, 3))  # N * H_out * W_out
        saved += 2 * positions * (fan_in * layer.out_channels - layer.latent_channels * (fan_in + layer.out_channels))
    assert saved > 0 and _flops(model, x) == before - saved


def test_layers_where_two_would_cost_more_are_kept() -> None:
    model = nn.Sequential(nn.Conv2d(64, 64, 1), nn.ReLU(), nn.Conv2d(64, 128, 3), nn.Flatten(), nn.LazyLinear(8))
    model(torch.rand(1, 64, 6, 6))
    x = torch.rand(2, 64, 6, 6)
    before = _flops(model, x)
    report = apply_factorization(model, min_channels=1, latent_channels=0.5, factorize_linears=False)
    assert report.replaced == {"Conv2d -> FactorizedConv2d": ["2"]}  # 1x1 64->64 at 32 channels breaks even: kept
    assert _flops(model, x) < before
    model = nn.Sequential(nn.Conv2d(64, 64, 1), nn.ReLU(), nn.Linear(6, 6))
    before, structure = _flops(model, x), str(model)
    with pytest.warns(NoEffectWarning, match="changed no module of Sequential"):
        assert not apply_factorization(model, min_channels=1, latent_channels=0.5, min_features=1, latent_features=3)
    assert _flops(model, x) == before and str(model) == structure


def test_the_optimizer_holds_the_new_parameters_and_the_others_keep_their_state(factorized_resnet18: dict) -> None:
    model, optimizer = factorized_resnet18["model"], factorized_resnet18["optimizer"]
    in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert in_optimizer == {id(p) for p in model.parameters() if p.requires_grad}
    for p in model.layer1.parameters():  # untouched layers keep their momentum
        assert torch.equal(optimizer.state[p]["momentum_buffer"], factorized_resnet18["kept"][id(p)])
    new = model.layer4[1].conv2.module0.weight
    assert new not in optimizer.state  # a new parameter starts without state
    optimizer.zero_grad()
    model(torch.rand(2, 3, 32, 32)).sum().backward()
    optimizer.step()
    assert optimizer.state[new]["momentum_buffer"] is not None


def test_dtype_device_and_channels_last_are_kept() -> None:
    model = nn.Sequential(nn.Conv2d(32, 32, 3), nn.ReLU(), nn.Conv2d(32, 16, 3)).double()
    model = model.to(memory_format=torch.channels_last)
    apply_factorization(model, min_channels=16, latent_channels=8, factorize_linears=False)
    for layer in (model[0], model[2]):
        for conv in (layer.module0, layer.module1):
            assert conv.weight.dtype == torch.float64 and conv.weight.device.type == "cpu"
            assert conv.weight.is_contiguous(memory_format=torch.channels_last)


def test_a_second_application_changes_nothing_and_strict_raises() -> None:
    model = nn.Sequential(nn.Conv2d(32, 32, 3), nn.ReLU(), nn.Flatten(), nn.Linear(32, 32))
    assert apply_factorization(model, min_channels=16, latent_channels=8, min_features=16, latent_features=8).count == 2
    structure = str(model)
    with pytest.warns(NoEffectWarning, match="changed no module"):
        apply_factorization(model, min_channels=16, latent_channels=8, min_features=16, latent_features=8)
    assert str(model) == structure
    with pytest.raises(NoEffectError):
        apply_factorization(nn.Sequential(nn.Linear(4, 4)), strict=True)


def test_resnet50_and_timm_structures() -> None:
    resnet50 = tv.models.resnet50(num_classes=10)  # one convolution is 1024 -> 2048: one SVD
    report = apply_factorization(resnet50, min_channels=1024, latent_channels=0.25, min_features=10, latent_features=4)
    assert report.replaced == {
        "Conv2d -> FactorizedConv2d": ["layer4.0.downsample.0"],
        "Linear -> FactorizedLinear": ["fc"],
    }
    assert _count(resnet50, nn.Conv2d) == 53 + 1 and resnet50.layer4[0].downsample[0].latent_channels == 256
    timm = pytest.importorskip("timm")
    model = timm.create_model("resnet10t", pretrained=False, num_classes=10)
    report = apply_factorization(model, min_channels=512, latent_channels=0.25)
    assert report.replaced == {"Conv2d -> FactorizedConv2d": ["layer4.0.conv2"]}  # its one 512 -> 512 convolution
    assert model(torch.rand(2, 3, 32, 32)).shape == (2, 10)


def test_channels_last_inputs_and_bf16_autocast(factorized_resnet18: dict) -> None:
    model = copy.deepcopy(factorized_resnet18["model"])
    x = torch.rand(4, 3, 32, 32)
    with torch.no_grad():
        reference = model(x)  # training mode: BatchNorm uses the batch statistics
        torch.testing.assert_close(
            model(x.contiguous(memory_format=torch.channels_last)), reference, atol=1e-4, rtol=1e-4
        )
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model(x)
    assert low.dtype == torch.bfloat16  # bf16 rounding through 18 layers: the plain ResNet-18 is off by 12% here too
    assert float((low.float() - reference).norm() / reference.norm()) < 0.25


def _small() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, stride=2), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 32),
    ).eval()  # fmt: skip


def test_fx_and_export_work_after_the_surgery() -> None:
    model = _small()
    assert apply_factorization(model, min_channels=16, latent_channels=8, min_features=16, latent_features=8).count == 2
    x = torch.rand(2, 3, 16, 16)
    expected = model(x)
    torch.testing.assert_close(torch.fx.symbolic_trace(model)(x), expected)
    torch.testing.assert_close(torch.export.export(model, (x,)).module()(x), expected)


def test_compiled_output_equals_eager() -> None:
    model = _small()
    compiled = torch.compile(model)
    apply_factorization(compiled, min_channels=16, latent_channels=8, min_features=16, latent_features=8)
    x = torch.rand(2, 3, 16, 16)
    torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"latent_channels": 1.5}, ValueError, "`latent_channels`=1.5 must be a whole number"),
        ({"latent_channels": 0}, ValueError, "`latent_channels`=0 must be a finite number > 0"),
        ({"latent_features": -0.25}, ValueError, "`latent_features`=-0.25"),
        ({"latent_features": True}, TypeError, "`latent_features`=True"),
        ({"min_channels": -1}, ValueError, "`min_channels`=-1 must be an int >= 0"),
        ({"min_features": 2.0}, TypeError, "`min_features`=2.0"),
        ({"factorize_convs": "yes"}, TypeError, "`factorize_convs`='yes'"),
    ],
)
def test_bad_arguments_are_refused_naming_them(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        apply_factorization(nn.Linear(4, 4), **kwargs)


def test_nothing_to_factorize_is_a_no_op_with_a_warning_as_in_composer() -> None:
    model = nn.Linear(64, 64)
    with pytest.warns(NoEffectWarning, match="factorize_convs=False and factorize_linears=False"):
        report = apply_factorization(model, factorize_convs=False, factorize_linears=False, min_features=8)
    assert not report and type(model) is nn.Linear
    with pytest.raises(NoEffectError, match="leave nothing to factorize"):
        apply_factorization(model, factorize_convs=False, factorize_linears=False, strict=True)
