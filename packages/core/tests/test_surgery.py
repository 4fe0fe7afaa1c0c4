"""Model surgery: replace_modules keeps weights, device, dtype, layout and optimizer state; SurgeryMethod
is recorded in checkpoints, so a checkpoint loads only into a run that applies the same surgery."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from cadence import Classifier, Trainer
from cadence._snapshot import CheckpointMismatchError
from cadence.ops import (
    NoEffectError,
    NoEffectWarning,
    SurgeryMethod,
    SurgeryReport,
    check_number,
    policy_for,
    replace_modules,
    unwrap_model,
)
from cadence.testing import assert_same_tensors


class Scaled(nn.Module):
    """Wraps a module (keeping its parameters) and adds a learnable output scale: old and new parameters."""

    def __init__(self, inner: nn.Module, scale: float = 1.0):
        super().__init__()
        self.inner = inner
        self.scale = nn.Parameter(torch.full((1,), scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x) * self.scale


class MyBatchNorm(nn.BatchNorm2d):
    """A copy of a BatchNorm with new Parameter objects under the same names (like Ghost BatchNorm)."""

    @classmethod
    def from_batchnorm(cls, bn: nn.BatchNorm2d) -> MyBatchNorm:
        new = cls(bn.num_features, bn.eps, bn.momentum)
        new.load_state_dict(bn.state_dict())
        return new


def _net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4),
    )  # fmt: skip


def _step(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    optimizer.zero_grad()
    model(torch.rand(4, 3, 8, 8)).sum().backward()
    optimizer.step()


def _trainable(model: nn.Module) -> set[int]:
    return {id(p) for p in model.parameters() if p.requires_grad}


def _in_optimizer(optimizer: torch.optim.Optimizer) -> set[int]:
    return {id(p) for group in optimizer.param_groups for p in group["params"]}


def test_wrapping_keeps_old_parameters_and_their_state_and_adds_the_new_ones() -> None:
    model = _net()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    _step(model, optimizer)
    conv = model[0]
    state_before = copy.deepcopy(optimizer.state[conv.weight])
    report = replace_modules(model, {nn.Conv2d: lambda m, path: Scaled(m)}, optimizers=optimizer, method="Scale")
    assert report.count == 2 and report.replaced == {"Conv2d -> Scaled": ["0", "3"]}
    assert str(report) == "Scale replaced 2 modules: 2 Conv2d -> Scaled"
    assert report.counts() == {"Scale/Conv2d -> Scaled": 2}
    assert isinstance(model[0], Scaled) and model[0].inner is conv
    assert _in_optimizer(optimizer) == _trainable(model)
    assert_same_tensors(optimizer.state[conv.weight], state_before, "the surviving parameter's Adam state")
    _step(model, optimizer)  # trains, new parameters included
    assert model[0].scale.grad is not None and optimizer.state[model[0].scale]


def test_a_successor_under_the_same_name_takes_over_the_place_and_the_state() -> None:
    model = _net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _step(model, optimizer)
    old_bn = model[1]
    momentum = optimizer.state[old_bn.weight]["momentum_buffer"].clone()
    position = [id(p) for p in optimizer.param_groups[0]["params"]].index(id(old_bn.weight))
    replace_modules(model, {nn.BatchNorm2d: lambda m, path: MyBatchNorm.from_batchnorm(m)}, optimizers=optimizer)
    new_bn = model[1]
    assert new_bn.weight is not old_bn.weight and torch.equal(new_bn.weight, old_bn.weight)
    assert optimizer.param_groups[0]["params"][position] is new_bn.weight  # same place in the group
    assert torch.equal(optimizer.state[new_bn.weight]["momentum_buffer"], momentum)
    assert old_bn.weight not in optimizer.state and _in_optimizer(optimizer) == _trainable(model)


def test_device_dtype_and_channels_last_follow_the_original() -> None:
    model = _net().to(torch.float64).to(memory_format=torch.channels_last)
    replace_modules(model, {nn.Conv2d: lambda m, path: nn.Conv2d(m.in_channels, m.out_channels, 3, padding=1)})
    conv = model[0]
    assert conv.weight.dtype == torch.float64 and conv.weight.device == torch.device("cpu")
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)


class Filtered(nn.Module):
    """A replacement that brings a buffer of its own, made where tensors are made by default (the CPU)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.register_buffer("kernel", torch.ones(1, 1, 3, 3) / 9)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def test_a_module_without_tensors_is_replaced_on_the_device_and_dtype_of_its_enclosing_module() -> None:
    # "meta" stands in for a GPU: a pooling layer has no tensor to say where the model lives, and a
    # replacement's buffer left on the CPU fails the first forward on a GPU (BlurPool on cifar10_fast did)
    block = nn.Sequential(nn.Conv2d(3, 8, 3), nn.MaxPool2d(2))
    model = nn.Sequential(nn.Sequential(block), nn.Flatten()).to("meta", torch.float64)
    report = replace_modules(
        model, {nn.MaxPool2d: lambda m, path: Filtered(m), nn.Flatten: lambda m, path: Filtered(m)}
    )
    assert report.count == 2
    assert block[1].kernel.device.type == "meta" and block[1].kernel.dtype == torch.float64
    assert model[1].kernel.device.type == "meta"  # the model's own placement, from its first tensor
    alone = nn.Sequential(nn.ReLU())  # no tensor anywhere: the replacement stays as it was built
    replace_modules(alone, {nn.ReLU: lambda m, path: Filtered(m)})
    assert alone[0].kernel.device.type == "cpu" and alone[0].kernel.dtype == torch.float32


def test_a_replacement_takes_the_train_or_eval_mode_of_the_module_it_replaces() -> None:
    model = _net().eval()  # a new module starts in training mode: dropout in an evaluated model otherwise
    replace_modules(model, {nn.Conv2d: lambda m, path: nn.Sequential(nn.Dropout(0.5), m)})
    assert not any(module.training for module in model.modules())
    model.train()
    model[0][1].eval()
    replace_modules(model, {nn.Conv2d: lambda m, path: Scaled(m)}, method="Other")
    assert not model[0][1].training and model[3][1].training


def test_a_second_application_changes_nothing_and_says_so() -> None:
    model = _net()
    policies = {nn.Conv2d: lambda m, path: Scaled(m)}
    replace_modules(model, policies)
    structure = str(model)
    with pytest.warns(NoEffectWarning, match="changed no module of Sequential"):
        report = replace_modules(model, policies)
    assert not report and str(model) == structure
    with pytest.raises(NoEffectError, match="changed no module"):
        replace_modules(model, policies, strict=True)


def test_a_shared_module_is_replaced_once_everywhere_and_replaced_modules_are_not_entered() -> None:
    shared = nn.Linear(4, 4)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    report = replace_modules(model, {nn.Linear: lambda m, path: Scaled(m)})
    assert model[0] is model[2] and isinstance(model[0], Scaled) and report.count == 1
    nested = nn.Sequential(nn.Sequential(nn.Linear(2, 2)))
    report = replace_modules(nested, {nn.Sequential: lambda m, path: Scaled(m), nn.Linear: lambda m, path: Scaled(m)})
    assert report.replaced == {"Sequential -> Scaled": ["0"]}  # its inner Linear was not visited


def test_policy_for_gives_a_policy_typed_on_the_modules_it_receives_unchanged() -> None:
    def strided(conv: nn.Conv2d, path: str) -> nn.Module | None:
        return Scaled(conv) if conv.stride == (2, 2) else None

    policy = policy_for(nn.Conv2d, strided)
    assert policy is strided
    model = nn.Sequential(nn.Conv2d(3, 3, 3, stride=2), nn.Conv2d(3, 3, 3))
    assert replace_modules(model, {nn.Conv2d: policy}).replaced == {"Conv2d -> Scaled": ["0"]}


def test_compiled_models_are_unwrapped_and_ddp_is_refused_with_the_fix() -> None:
    model = _net()
    compiled = torch.compile(model)
    assert unwrap_model(compiled) is model
    replace_modules(compiled, {nn.Conv2d: lambda m, path: Scaled(m)})
    assert isinstance(model[0], Scaled)
    ddp = nn.parallel.DistributedDataParallel.__new__(nn.parallel.DistributedDataParallel)
    with pytest.raises(TypeError, match="before it is wrapped in DistributedDataParallel"):
        unwrap_model(ddp)


# SurgeryMethod, and checkpoints that record it ---------------------------------------------
class ScaleConvs(SurgeryMethod):
    """A surgery method for the tests: every Conv2d gets a learnable output scale."""

    def __init__(self, scale: float = 1.0, *, strict: bool = False):
        super().__init__(strict=strict)
        self.scale = check_number("scale", scale, gt=0)

    def surgery(self, model: nn.Module, optimizers: list[torch.optim.Optimizer]) -> SurgeryReport:
        policy = {nn.Conv2d: lambda m, path: Scaled(m, self.scale)}
        return replace_modules(model, policy, optimizers=optimizers, method=self.name, strict=self.strict)


def _trainer(algorithms: list, **kwargs) -> Trainer:
    data = torch.Generator().manual_seed(1)
    dataset = TensorDataset(torch.rand(16, 3, 8, 8, generator=data), torch.randint(0, 4, (16,), generator=data))
    model = Classifier(_net(), num_classes=4)  # a fresh, unmodified model, as the user's code builds it
    return Trainer(
        model=model,
        train_dataloader=DataLoader(dataset, batch_size=4),
        max_duration="4ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        algorithms=algorithms,
        seed=3,
        progress_bar=False,
        **kwargs,
    )


def test_a_checkpoint_after_surgery_loads_into_a_fresh_model_with_the_same_methods(tmp_path: Path) -> None:
    trained = _trainer([ScaleConvs(0.5)], save_folder=tmp_path, save_interval="2ba")
    assert trained.state.algorithms[0].report.count == 2
    trained.fit()
    resumed = _trainer([ScaleConvs(0.5)], load_path=tmp_path / "ep1-ba4.pt")
    x = torch.rand(2, 3, 8, 8)
    trained.state.model.eval()
    resumed.state.model.eval()
    assert torch.equal(trained.state.model.module(x), resumed.state.model.module(x))


def test_a_checkpoint_after_surgery_names_the_method_to_add_or_the_arguments_to_pass(tmp_path: Path) -> None:
    _trainer([ScaleConvs(0.5)], save_folder=tmp_path, save_interval="2ba").fit()
    checkpoint = tmp_path / "ep1-ba4.pt"
    with pytest.raises(CheckpointMismatchError, match=r"written after ScaleConvs\(scale=0.5\) changed"):
        _trainer([], load_path=checkpoint)
    with pytest.raises(CheckpointMismatchError, match=r"this run applies ScaleConvs\(scale=2.0\)"):
        _trainer([ScaleConvs(2.0)], load_path=checkpoint)
    _trainer([ScaleConvs(0.5, strict=True)], load_path=checkpoint)  # `strict` does not shape the model
    plain = tmp_path / "plain"
    _trainer([], save_folder=plain, save_interval="2ba").fit()
    with pytest.raises(CheckpointMismatchError, match="the checkpoint was written without it"):
        _trainer([ScaleConvs(0.5)], load_path=plain / "ep1-ba4.pt")


class ActivatedConvs(ScaleConvs):
    """A surgery taking a function: recorded by its qualified name, never by a repr with an address."""

    def __init__(self, act_fn=torch.nn.functional.silu, *, strict: bool = False):
        super().__init__(strict=strict)
        self.act_fn = act_fn


def test_a_function_argument_is_recorded_by_name_so_another_process_can_load_it(tmp_path: Path) -> None:
    _trainer([ActivatedConvs(torch.nn.functional.silu)], save_folder=tmp_path, save_interval="4ba").fit()
    payload = torch.load(tmp_path / "ep1-ba4.pt", weights_only=True)
    (recorded,) = payload["surgeries"]
    assert (recorded["method"], recorded["hparams"]) == ("ActivatedConvs", {"act_fn": "torch.nn.functional.silu"})
    _trainer([ActivatedConvs(torch.nn.functional.silu)], load_path=tmp_path / "ep1-ba4.pt")
    with pytest.raises(CheckpointMismatchError, match=r"ActivatedConvs\(act_fn='torch.nn.functional.relu'\)"):
        _trainer([ActivatedConvs(torch.nn.functional.relu)], load_path=tmp_path / "ep1-ba4.pt")


def test_surgery_methods_run_on_init_only_and_declare_what_they_change() -> None:
    from cadence import Event, Resource

    method = ScaleConvs()
    assert method.events == (Event.INIT,) and method.required_on_load()
    assert method.effects().writes == {Resource.MODEL, Resource.OPTIMIZER}
    with pytest.raises(ValueError, match="`strict`='yes'"):
        ScaleConvs(strict="yes")  # type: ignore[arg-type]
