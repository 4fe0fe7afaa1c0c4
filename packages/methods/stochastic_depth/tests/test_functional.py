"""apply_stochastic_depth, StochasticBlock and the torchvision subclasses: surgery on torchvision/timm/contract
blocks, Composer's layout (unchanged keys), the drop schedule, eval scaling, p = 1, statistics of the drops,
and refusals."""

from __future__ import annotations

import copy
import io
import math

import pytest
import torch
from cadence_stochastic_depth import (
    StochasticBasicBlock,
    StochasticBlock,
    StochasticBottleneck,
    apply_stochastic_depth,
    is_stochastic,
    layer_drop_rates,
    residual_parts,
    set_drop_rates,
    stochastic_resnet_block,
)
from torch import nn

from cadence.ops import NoEffectError, NoEffectWarning
from cadence.testing import assert_same_tensors

tv = pytest.importorskip("torchvision")
timm = pytest.importorskip("timm")


class Marker(nn.Module):
    """A contract block whose branch adds 1 and counts its calls: the output says whether it was dropped."""

    def __init__(self):
        super().__init__()
        self.branch = nn.Identity()
        self.branch.register_forward_hook(lambda *args: setattr(self, "calls", self.calls + 1))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.branch(x)


def _stochastic(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if is_stochastic(m)]


def _x(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed))


def test_layer_drop_rates_follow_composer() -> None:
    assert layer_drop_rates(4, 0.2, "linear") == pytest.approx([0.05, 0.1, 0.15, 0.2])
    assert layer_drop_rates(3, 0.5, "uniform") == [0.5, 0.5, 0.5]


def test_resnet50_bottlenecks_become_composers_subclass_in_order_with_linear_rates() -> None:
    model = tv.models.resnet50()
    before = dict(model.named_parameters())
    report = apply_stochastic_depth(model, "ResNetBottleneck", drop_rate=0.4)
    layers = _stochastic(model)
    assert report.replaced == {"Bottleneck -> StochasticBottleneck": [f"layer{i}.{j}" for i, n in
                               zip(range(1, 5), (3, 4, 6, 3)) for j in range(n)]}  # fmt: skip
    assert [layer.drop_rate for layer in layers] == pytest.approx([(i + 1) / 16 * 0.4 for i in range(16)])
    assert all(isinstance(layer, (StochasticBottleneck, tv.models.resnet.Bottleneck)) for layer in layers)
    assert sum(isinstance(m, tv.models.resnet.Bottleneck) for m in model.modules()) == 16  # Composer's count
    after = dict(model.named_parameters())  # Composer's layout: the same names, the same tensors
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)


def test_a_plain_torchvision_state_dict_loads_into_the_modified_resnet() -> None:
    torch.manual_seed(0)
    stock = tv.models.resnet18(num_classes=10).eval()
    model = tv.models.resnet18(num_classes=10)
    apply_stochastic_depth(model, "ResNetBasicBlock", drop_rate=0.0)
    assert model.state_dict().keys() == stock.state_dict().keys()
    model.load_state_dict(stock.state_dict(), strict=True)  # a stock (or Composer) checkpoint loads as it is
    x = _x(2, 3, 32, 32)
    torch.testing.assert_close(model.eval()(x), stock(x), rtol=0, atol=0)
    stock.load_state_dict(model.state_dict(), strict=True)  # and back


def test_the_resnet_subclasses_pickle_and_copy() -> None:
    model = tv.models.resnet18(num_classes=10)
    apply_stochastic_depth(model, "ResNetBasicBlock", drop_rate=0.3)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert type(loaded.layer1[0]) is StochasticBasicBlock and loaded.layer4[1].drop_rate == pytest.approx(0.3)
    assert type(copy.deepcopy(model).layer2[0]) is StochasticBasicBlock
    with pytest.raises(TypeError, match="torchvision's BasicBlock or Bottleneck"):
        stochastic_resnet_block(timm.models.resnet.BasicBlock(4, 4))


@pytest.mark.parametrize(
    ("make", "target"),
    [
        (lambda: tv.models.resnet18(num_classes=10), "ResNetBasicBlock"),
        (lambda: tv.models.resnet.ResNet(tv.models.resnet.Bottleneck, [1, 1, 1, 1]), "ResNetBottleneck"),
        (lambda: timm.create_model("resnet18", pretrained=False, num_classes=10), "ResNetBasicBlock"),
        (lambda: timm.create_model("resnet26", pretrained=False, num_classes=10), "ResNetBottleneck"),
    ],
    ids=["tv-resnet18", "tv-bottleneck-resnet", "timm-resnet18", "timm-resnet26"],
)
def test_with_drop_rate_zero_the_wrapped_model_computes_the_original(make, target: str) -> None:
    """The residual parts are right for every known block: train and eval outputs equal the stock model's."""
    torch.manual_seed(0)
    model = make()
    wrapped = copy.deepcopy(model)
    report = apply_stochastic_depth(wrapped, target, drop_rate=0.0)
    assert report.count == len(_stochastic(wrapped)) > 0
    x = _x(2, 3, 32, 32)
    for training in (True, False):
        model.train(training), wrapped.train(training)
        torch.testing.assert_close(wrapped(x), model(x), rtol=0, atol=0)


def test_eval_is_deterministic_and_scales_the_branch_by_the_keep_probability() -> None:
    torch.manual_seed(0)
    downsample = nn.Sequential(nn.Conv2d(4, 8, 1, 2), nn.BatchNorm2d(8))
    block = tv.models.resnet.BasicBlock(4, 8, stride=2, downsample=downsample)
    layer = StochasticBlock(copy.deepcopy(block), drop_rate=0.3).eval()
    block.eval()
    x = _x(3, 4, 8, 8)
    branch = block.bn2(block.conv2(block.relu(block.bn1(block.conv1(x)))))
    expected = torch.relu(block.downsample(x) + (1 - 0.3) * branch)
    torch.testing.assert_close(layer(x), expected)
    assert torch.equal(layer(x), layer(x))
    sample = StochasticBlock(copy.deepcopy(block), drop_rate=0.3, stochastic_method="sample").eval()
    assert torch.equal(sample(x), layer(x))


def test_drop_rate_one_leaves_only_the_shortcut() -> None:
    identity_block = tv.models.resnet.BasicBlock(4, 4)
    down = tv.models.resnet.BasicBlock(4, 8, downsample=nn.Conv2d(4, 8, 1))
    x = _x(2, 4, 6, 6)
    assert StochasticBlock(identity_block, 1.0).train()(x) is x  # Composer: the output *is* the input
    torch.testing.assert_close(StochasticBlock(down, 1.0).train()(x), torch.relu(down.downsample(x)))
    x = x - 0.5  # the sample path adds the (zeroed) branch to the shortcut and activates
    torch.testing.assert_close(StochasticBlock(identity_block, 1.0, "sample").train()(x), torch.relu(x))
    torch.testing.assert_close(StochasticBlock(down, 1.0, "sample").train()(x), torch.relu(down.downsample(x)))


@pytest.mark.parametrize("distribution", ["linear", "uniform"])
def test_block_mode_drops_each_block_at_its_scheduled_rate(distribution: str) -> None:
    model = nn.Sequential(*[Marker() for _ in range(4)])
    apply_stochastic_depth(model, Marker, "block", 0.8, distribution, generator=torch.Generator().manual_seed(0))
    model.train()
    trials = 2000
    for _ in range(trials):
        model(torch.zeros(1))
    for marker, rate in zip(model, layer_drop_rates(4, 0.8, distribution)):
        dropped = 1 - marker.block.calls / trials
        assert abs(dropped - rate) < 4 * math.sqrt(rate * (1 - rate) / trials) + 1e-9, (dropped, rate)


def test_sample_mode_drops_each_sample_at_its_scheduled_rate() -> None:
    model = nn.Sequential(Marker(), Marker())  # linear rates 0.3 and 0.6
    apply_stochastic_depth(model, Marker, "sample", 0.6, generator=torch.Generator().manual_seed(1))
    n = 20000
    for layer, rate in zip(model.train(), (0.3, 0.6)):
        out = layer(torch.ones(n, 3))  # 1 + keep * 1 for each sample
        assert torch.equal(out, out[:, :1].expand(n, 3))  # one draw per sample, shared by its features
        dropped = (out[:, 0] == 1).float().mean().item()
        assert set(out.unique().tolist()) == {1.0, 2.0}
        assert abs(dropped - rate) < 4 * math.sqrt(rate * (1 - rate) / n), (dropped, rate)


def test_optimizer_keeps_its_parameters_and_state_device_dtype_and_layout() -> None:
    model = tv.models.resnet18(num_classes=4).to(torch.float64).to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(_x(2, 3, 32, 32).double()).sum().backward()
    optimizer.step()
    state = copy.deepcopy(optimizer.state_dict())
    apply_stochastic_depth(model, "ResNetBasicBlock")
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    assert {id(p) for g in optimizer.param_groups for p in g["params"]} == trainable
    assert_same_tensors(optimizer.state_dict(), state, "optimizer")
    conv = model.layer1[0].conv1.weight
    assert conv.dtype == torch.float64 and conv.is_contiguous(memory_format=torch.channels_last)


def test_a_second_application_changes_nothing_and_says_so() -> None:
    model = tv.models.resnet18()
    apply_stochastic_depth(model, "ResNetBasicBlock")
    structure = str(model)
    with pytest.warns(NoEffectWarning, match="no ResNetBasicBlock block left to wrap"):
        assert not apply_stochastic_depth(model, "ResNetBasicBlock")
    assert str(model) == structure


def test_the_default_wraps_every_known_resnet_block_in_module_order() -> None:
    model = nn.Sequential(tv.models.resnet.BasicBlock(4, 4), timm.models.resnet.Bottleneck(16, 4))
    report = apply_stochastic_depth(model)
    assert report.replaced == {"BasicBlock -> StochasticBasicBlock": ["0"], "Bottleneck -> StochasticBlock": ["1"]}
    assert [m.drop_rate for m in model] == pytest.approx([0.1, 0.2])


def test_no_matching_block_warns_naming_the_block_the_model_has() -> None:
    with pytest.warns(NoEffectWarning, match="pass target_layer_name='ResNetBasicBlock'"):
        apply_stochastic_depth(tv.models.resnet18(), "ResNetBottleneck")
    with pytest.raises(NoEffectError, match="has no ResNetBasicBlock"):
        apply_stochastic_depth(nn.Sequential(nn.Linear(2, 2)), "ResNetBasicBlock", strict=True)


def test_a_named_class_that_breaks_the_contract_is_refused_before_any_change() -> None:
    class Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(2, 2, 1)

        def forward(self, x):
            return x + self.conv(x)

    model = nn.Sequential(Plain(), Plain())
    with pytest.raises(TypeError, match=r"Plain does not follow the residual contract.*`branch`"):
        apply_stochastic_depth(model, Plain)
    assert not _stochastic(model)
    with pytest.raises(TypeError, match="residual contract"):
        residual_parts(type("Sub", (tv.models.resnet.BasicBlock,), {})(2, 2))  # a subclass may change forward


def test_set_drop_rates_rescales_every_block_in_order() -> None:
    model = nn.Sequential(Marker(), Marker(), Marker())
    apply_stochastic_depth(model, Marker, drop_rate=0.9)
    assert set_drop_rates(model, 0.3) == 3
    assert [m.drop_rate for m in model] == pytest.approx([0.1, 0.2, 0.3])
    state = model.state_dict()  # the current rates travel with the weights
    fresh = nn.Sequential(Marker(), Marker(), Marker())
    apply_stochastic_depth(fresh, Marker, drop_rate=0.9)
    fresh.load_state_dict(state)
    assert [m.drop_rate for m in fresh] == pytest.approx([0.1, 0.2, 0.3])


def test_the_generator_decides_the_drops() -> None:
    def outputs(seed: int) -> torch.Tensor:
        model = nn.Sequential(*[Marker() for _ in range(6)])
        apply_stochastic_depth(model, Marker, "sample", 0.5, "uniform", generator=torch.Generator().manual_seed(seed))
        return model.train()(torch.ones(32, 1))

    assert torch.equal(outputs(3), outputs(3)) and not torch.equal(outputs(3), outputs(4))


def test_channels_last_inputs_and_bf16_autocast() -> None:
    torch.manual_seed(0)
    model = tv.models.resnet18(num_classes=4)
    wrapped = copy.deepcopy(model)
    apply_stochastic_depth(wrapped, "ResNetBasicBlock", "sample", drop_rate=0.0)
    x = _x(2, 3, 32, 32).to(memory_format=torch.channels_last)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for training in (True, False):
            model.train(training), wrapped.train(training)
            out = wrapped(x)
            assert out.dtype == torch.bfloat16 and torch.equal(out, model(x))
    apply_stochastic_depth(model, "ResNetBasicBlock", "block", drop_rate=0.5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.isfinite(model.train()(x)).all() and torch.isfinite(model.eval()(x)).all()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"drop_rate": -0.1}, "`drop_rate`=-0.1"),
        ({"drop_rate": 1.5}, "`drop_rate`=1.5"),
        ({"target_layer_name": "Bottleneck"}, "`target_layer_name`='Bottleneck'.*did you mean 'ResNetBottleneck'"),
        ({"target_layer_name": int}, "`target_layer_name`"),
        ({"stochastic_method": "row"}, "`stochastic_method`='row'"),
        ({"drop_distribution": "exponential"}, "`drop_distribution`='exponential'"),
    ],
)
def test_bad_arguments_are_refused_naming_them(kwargs: dict, match: str) -> None:
    model = tv.models.resnet18()
    with pytest.raises(ValueError, match=match):
        apply_stochastic_depth(model, **{"target_layer_name": "ResNetBasicBlock", **kwargs})
    assert not _stochastic(model)
