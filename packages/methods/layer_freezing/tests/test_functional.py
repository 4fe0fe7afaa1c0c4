"""freeze_layers: Composer's schedule and order, the last layer never frozen, the optimizer without the frozen
parameters and with every other parameter's state, refusals."""

from __future__ import annotations

import copy

import pytest
import torch
from cadence_layer_freezing import freezable_layers, freeze_first_layers, freeze_layers, freeze_schedule
from torch import nn

from cadence.testing import assert_same_tensors

tv = pytest.importorskip("torchvision")


def _stepped(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    optimizer.zero_grad()
    model(torch.rand(2, 3, 32, 32)).sum().backward()
    optimizer.step()


def _leaves_with_parameters(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if not list(m.children()) and list(m.parameters(recurse=False))]


def _in_optimizer(optimizer: torch.optim.Optimizer) -> list[int]:
    return [id(p) for group in optimizer.param_groups for p in group["params"]]


@pytest.mark.parametrize(
    ("t", "start", "level", "expected"),
    [(0.0, 0.5, 1.0, 0.0), (0.5, 0.5, 1.0, 0.0), (0.75, 0.5, 1.0, 0.5), (1.0, 0.5, 1.0, 1.0), (1.0, 0.2, 0.4, 0.4),
     (0.6, 0.2, 0.4, 0.2), (0.5, 0.0, 1.0, 0.5)],
)  # fmt: skip
def test_the_schedule_is_linear_from_freeze_start_to_freeze_level(t, start, level, expected) -> None:
    assert freeze_schedule(t, start, level) == pytest.approx(expected)


def test_layers_are_the_parameter_leaves_in_depth_first_order() -> None:
    model = tv.models.resnet18()
    layers = freezable_layers(model)
    assert layers == _leaves_with_parameters(model) and len(layers) == 41
    assert layers[0] is model.conv1 and layers[2] is model.layer1[0].conv1 and layers[-1] is model.fc


def test_freezes_the_scheduled_fraction_in_order_and_keeps_the_other_states() -> None:
    model = tv.models.resnet18(num_classes=4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _stepped(model, optimizer)
    momentum = {id(p): optimizer.state[p]["momentum_buffer"].clone() for p in model.parameters()}
    depth, percentage = freeze_layers(model, optimizer, current_duration=0.75, freeze_start=0.5, freeze_level=1.0)
    assert (depth, percentage) == (int(0.5 * 40), 0.5)  # Composer: int(pct * (n - 1))
    layers = freezable_layers(model)
    for index, layer in enumerate(layers):
        assert all(p.requires_grad == (index >= depth) for p in layer.parameters()), index
    trainable = [id(p) for p in model.parameters() if p.requires_grad]
    assert _in_optimizer(optimizer) == trainable  # same order, frozen ones gone
    assert all(torch.equal(optimizer.state[p]["momentum_buffer"], momentum[id(p)]) for p in optimizer.state)
    assert len(optimizer.state) == len(trainable) and all(p.grad is None for p in layers[0].parameters())
    optimizer.state_dict()  # Composer leaves the frozen parameters' state behind, which breaks this
    _stepped(model, optimizer)  # trains on, without gradients for the frozen layers
    assert layers[0].weight.grad is None and layers[-1].weight.grad is not None


def test_the_last_layer_is_never_frozen_and_nothing_freezes_before_the_start() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    groups = copy.copy(optimizer.param_groups[0]["params"])
    assert freeze_layers(model, optimizer, 0.4, freeze_start=0.5) == (0, 0.0)
    assert optimizer.param_groups[0]["params"] == groups  # Composer's test: unchanged before freeze_start
    assert freeze_layers(model, optimizer, 1.0, freeze_start=0.5) == (2, 1.0)
    assert [p.requires_grad for p in model.parameters()] == [False, False, False, False, True, True]
    assert _in_optimizer(optimizer) == [id(model[3].weight), id(model[3].bias)]


def test_frozen_parameters_leave_every_group_of_every_optimizer_and_groups_keep_their_settings() -> None:
    model = tv.models.resnet18(num_classes=4)
    backbone = [p for name, p in model.named_parameters() if not name.startswith("fc")]
    adam = torch.optim.Adam([{"params": backbone[:10], "lr": 1e-3}, {"params": backbone[10:], "lr": 1e-4}])
    head = torch.optim.SGD(model.fc.parameters(), lr=0.1, momentum=0.9)
    _stepped(model, adam)
    moments = copy.deepcopy({id(p): s for p, s in adam.state.items() if id(p) not in {id(q) for q in backbone[:3]}})
    freeze_first_layers(model, [adam, head], depth=2)  # conv1 and bn1: 3 parameters
    assert [len(g["params"]) for g in adam.param_groups] == [7, len(backbone) - 10]
    assert [g["lr"] for g in adam.param_groups] == [1e-3, 1e-4] and len(head.param_groups[0]["params"]) == 2
    for p, state in adam.state.items():
        assert_same_tensors(state, moments[id(p)], "surviving Adam state")
    assert set(_in_optimizer(adam)) == {id(p) for p in backbone if p.requires_grad}


def test_timm_model_and_placement_are_kept() -> None:
    timm = pytest.importorskip("timm")
    model = timm.create_model("resnet18", pretrained=False, num_classes=10).double()
    model = model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    depth, _ = freeze_layers(model, optimizer, 1.0, freeze_start=0.0, freeze_level=0.5)
    assert depth == int(0.5 * (len(freezable_layers(model)) - 1)) and not model.conv1.weight.requires_grad
    assert model.conv1.weight.dtype == torch.float64
    assert model.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    assert set(_in_optimizer(optimizer)) == {id(p) for p in model.parameters() if p.requires_grad}


def test_frozen_models_export_and_compile() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.LazyLinear(2))
    x = torch.rand(2, 3, 8, 8).to(memory_format=torch.channels_last)
    model(x)
    freeze_layers(model, torch.optim.SGD(model.parameters(), lr=0.1), 1.0, freeze_start=0.0)
    model.eval()
    eager = model(x)
    torch.testing.assert_close(torch.fx.symbolic_trace(model)(x), eager)
    torch.testing.assert_close(torch.export.export(model, (x,)).module()(x), eager)
    torch.testing.assert_close(torch.compile(model)(x), eager, rtol=1e-4, atol=1e-4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model.train()(x).float().sum().backward()
    assert model[0].weight.grad is None and model[4].weight.grad is not None


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"freeze_start": 1.0}, ValueError, "`freeze_start`=1.0"),
        ({"freeze_start": -0.1}, ValueError, "`freeze_start`=-0.1"),
        ({"freeze_level": 1.5}, ValueError, "`freeze_level`=1.5"),
        ({"current_duration": 1.2}, ValueError, "`current_duration`=1.2"),
        ({"current_duration": True}, TypeError, "`current_duration`=True"),
        ({"optimizers": "sgd"}, TypeError, "`optimizers`='sgd'"),
    ],
)
def test_bad_arguments_are_refused_naming_them(kwargs: dict, error: type, match: str) -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    arguments = {"optimizers": torch.optim.SGD(model.parameters(), lr=0.1), "current_duration": 1.0, **kwargs}
    with pytest.raises(error, match=match):
        freeze_layers(model, **arguments)
    assert all(p.requires_grad for p in model.parameters())
