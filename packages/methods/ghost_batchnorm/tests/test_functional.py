"""Ghost BatchNorm: per-chunk statistics, running statistics as Composer's, BatchNorm in eval; the surgery."""

from __future__ import annotations

import copy

import pytest
import torch
from cadence_ghost_batchnorm import GhostBatchNorm1d, GhostBatchNorm2d, GhostBatchNorm3d, apply_ghost_batchnorm
from torch import nn

from cadence.ops import NoEffectError, NoEffectWarning

SHAPES = {1: (12, 4, 5), 2: (12, 4, 5, 5), 3: (12, 4, 3, 3, 3)}
CLASSES = {
    1: (nn.BatchNorm1d, GhostBatchNorm1d),
    2: (nn.BatchNorm2d, GhostBatchNorm2d),
    3: (nn.BatchNorm3d, GhostBatchNorm3d),
}


def _images(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 3 + 1


def _resnet18() -> nn.Module:
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=10)


def _composer_reference(bn: nn.Module, x: torch.Tensor, ghost_batch_size: int) -> torch.Tensor:
    """Composer's algorithm, spelled out: BatchNorm on each of ceil(B / ghost) chunks, momentum / chunks."""
    chunks = -(-x.shape[0] // ghost_batch_size)
    momentum = bn.momentum
    if momentum is not None:
        bn.momentum = momentum / chunks
    out = torch.cat([bn(chunk) for chunk in x.chunk(chunks)])
    bn.momentum = momentum
    return out


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("ghost", [1, 2, 3, 5])
def test_each_ghost_batch_is_normalised_with_its_own_statistics(dims: int, ghost: int) -> None:
    _, ghost_class = CLASSES[dims]
    layer = ghost_class(4, ghost_batch_size=ghost, eps=1e-12, affine=False)
    x = _images(*SHAPES[dims])
    out = layer(x)
    reduce = [0, *range(2, x.ndim)]
    for chunk in out.chunk(-(-12 // ghost)):  # Composer's test: every chunk has mean 0 and variance 1
        assert torch.allclose(chunk.mean(dim=reduce), torch.zeros(4), atol=1e-5)
        assert torch.allclose(chunk.var(dim=reduce, unbiased=False), torch.ones(4), atol=1e-4)


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_ghost_size_equal_to_the_batch_is_batchnorm_exactly(dims: int) -> None:
    batchnorm_class, ghost_class = CLASSES[dims]
    torch.manual_seed(0)
    batchnorm = batchnorm_class(4)
    nn.init.normal_(batchnorm.weight), nn.init.normal_(batchnorm.bias)
    ghost = ghost_class.from_batchnorm(copy.deepcopy(batchnorm), ghost_batch_size=12)
    x = _images(*SHAPES[dims])
    for _ in range(2):
        assert torch.equal(ghost(x), batchnorm(x))
    assert torch.equal(ghost.running_mean, batchnorm.running_mean) and torch.equal(
        ghost.running_var, batchnorm.running_var
    )
    assert ghost.num_batches_tracked == batchnorm.num_batches_tracked == 2
    small = _images(5, *SHAPES[dims][1:], seed=1)  # fewer samples than a ghost batch: BatchNorm (Composer raises)
    assert torch.equal(ghost(small), batchnorm(small))


@pytest.mark.parametrize(("batch", "ghost", "momentum"), [(12, 4, 0.1), (10, 3, 0.3), (12, 5, None), (7, 2, 0.1)])
def test_outputs_and_running_statistics_follow_composer(batch: int, ghost: int, momentum: float | None) -> None:
    torch.manual_seed(0)
    reference = nn.BatchNorm2d(4, momentum=momentum)
    layer = GhostBatchNorm2d.from_batchnorm(copy.deepcopy(reference), ghost_batch_size=ghost)
    for step in range(3):
        x = _images(batch, 4, 3, 3, seed=step)
        assert torch.allclose(layer(x), _composer_reference(reference, x, ghost), atol=1e-6)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        assert torch.allclose(getattr(layer, name).double(), getattr(reference, name).double(), atol=1e-6), name
    assert layer.num_batches_tracked == 3 * -(-batch // ghost)  # one update per ghost batch
    assert layer.momentum == momentum  # unchanged by the forward


def test_running_statistics_by_hand() -> None:
    layer = GhostBatchNorm1d(1, ghost_batch_size=2, momentum=0.5)
    layer(torch.tensor([[1.0], [3.0], [5.0], [9.0]]))  # ghost batches [1, 3] and [5, 9]; momentum 0.5 / 2
    mean = 0.75 * (0.75 * 0 + 0.25 * 2) + 0.25 * 7
    var = 0.75 * (0.75 * 1 + 0.25 * 2) + 0.25 * 8  # unbiased variances 2 and 8
    assert torch.allclose(layer.running_mean, torch.tensor([mean])) and torch.allclose(
        layer.running_var, torch.tensor([var])
    )


def test_eval_is_batchnorm_with_the_running_statistics() -> None:
    batchnorm = nn.BatchNorm2d(4)
    batchnorm(_images(16, 4, 3, 3))
    ghost = GhostBatchNorm2d.from_batchnorm(copy.deepcopy(batchnorm), ghost_batch_size=2).eval()
    x = _images(6, 4, 3, 3, seed=1)
    assert torch.equal(ghost(x), batchnorm.eval()(x)) and ghost.num_batches_tracked == 1
    free = GhostBatchNorm2d(4, ghost_batch_size=3, track_running_stats=False, eps=1e-12, affine=False).eval()
    assert torch.allclose(free(x)[:3].mean(dim=(0, 2, 3)), torch.zeros(4), atol=1e-5)  # no running stats: ghost


def test_the_layers_are_batchnorms_with_the_same_state() -> None:
    batchnorm = nn.BatchNorm2d(8)
    ghost = GhostBatchNorm2d.from_batchnorm(batchnorm, ghost_batch_size=4)
    assert isinstance(ghost, nn.BatchNorm2d) and ghost.weight is batchnorm.weight
    assert ghost.running_mean is batchnorm.running_mean and ghost.state_dict().keys() == batchnorm.state_dict().keys()
    assert "ghost_batch_size=4" in repr(ghost)
    with pytest.raises(ValueError, match="expected 4D input"):
        ghost(torch.rand(4, 8))
    with pytest.raises(ValueError, match="`ghost_batch_size`=0"):
        GhostBatchNorm2d(8, ghost_batch_size=0)


def test_resnet_and_timm_surgery_keeps_parameters_and_optimizer_state() -> None:
    model = _resnet18()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(_images(4, 3, 32, 32)).sum().backward()
    optimizer.step()
    weight = model.bn1.weight
    moments = optimizer.state[weight]["exp_avg_sq"].clone()
    report = apply_ghost_batchnorm(model, ghost_batch_size=2, optimizers=optimizer)
    assert report.counts() == {"GhostBatchNorm/BatchNorm2d -> GhostBatchNorm2d": 20}
    assert isinstance(model.bn1, GhostBatchNorm2d) and model.bn1.weight is weight
    assert torch.equal(optimizer.state[weight]["exp_avg_sq"], moments)
    assert {id(p) for g in optimizer.param_groups for p in g["params"]} == {id(p) for p in model.parameters()}
    model(_images(4, 3, 32, 32)).sum().backward()
    optimizer.step()
    torchvision, timm = pytest.importorskip("torchvision"), pytest.importorskip("timm")
    assert apply_ghost_batchnorm(torchvision.models.resnet50()).count == 53
    timm_model = timm.create_model("resnet18", pretrained=False, num_classes=10)
    assert apply_ghost_batchnorm(timm_model, ghost_batch_size=2).count == 20
    assert timm_model(_images(4, 3, 32, 32)).shape == (4, 10)


def test_dtype_memory_format_idempotency_and_no_effect() -> None:
    model = _resnet18().double().to(memory_format=torch.channels_last)
    apply_ghost_batchnorm(model, ghost_batch_size=2)
    assert model.layer1[0].bn1.running_var.dtype == torch.float64
    x = _images(4, 3, 32, 32).double().contiguous(memory_format=torch.channels_last)
    assert model(x).dtype == torch.float64
    assert (
        model.layer1[0]
        .bn1(torch.rand(4, 64, 4, 4, dtype=torch.float64).contiguous(memory_format=torch.channels_last))
        .is_contiguous(memory_format=torch.channels_last)
    )
    structure = str(model)
    with pytest.warns(NoEffectWarning, match="GhostBatchNorm changed no module"):
        assert not apply_ghost_batchnorm(model, ghost_batch_size=2)
    assert str(model) == structure
    with pytest.raises(NoEffectError):
        apply_ghost_batchnorm(nn.Sequential(nn.Linear(2, 2)), strict=True)


@pytest.mark.parametrize(("value", "error"), [(0, ValueError), (-4, ValueError), (2.0, TypeError), (True, TypeError)])
def test_bad_ghost_sizes_are_refused(value: object, error: type) -> None:
    with pytest.raises(error, match="`ghost_batch_size`"):
        apply_ghost_batchnorm(nn.Sequential(nn.BatchNorm2d(2)), ghost_batch_size=value)  # type: ignore[arg-type]


def test_channels_last_bf16_autocast_fx_and_export_in_training_mode() -> None:
    model = _resnet18().train()
    apply_ghost_batchnorm(model, ghost_batch_size=2)
    x = _images(4, 3, 64, 64)  # ghost batches of 2 see 2x2 maps in layer4: 8 values per channel
    eager, traced = copy.deepcopy(model), torch.fx.symbolic_trace(copy.deepcopy(model))  # Composer's fails here
    expected = eager(x)
    assert torch.allclose(traced(x), expected, atol=1e-5)
    assert torch.allclose(traced.get_submodule("bn1").running_mean, eager.bn1.running_mean)
    exported = torch.export.export(copy.deepcopy(model), (x,)).module()
    assert torch.allclose(exported(x), expected, atol=1e-5)
    assert torch.allclose(model(x.contiguous(memory_format=torch.channels_last)), expected, atol=1e-5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.allclose(model(x).float(), expected, atol=0.1, rtol=0.1)


def test_compiled_output_equals_eager() -> None:
    model = nn.Sequential(nn.Conv2d(3, 8, 3), GhostBatchNorm2d(8, ghost_batch_size=2), nn.ReLU())
    twin = copy.deepcopy(model)
    x = _images(6, 3, 8, 8)
    assert torch.allclose(torch.compile(twin)(x), model(x), atol=1e-5)
    assert torch.allclose(twin[1].running_mean, model[1].running_mean, atol=1e-6) and twin[1].num_batches_tracked == 3
