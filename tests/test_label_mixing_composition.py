"""MixUp, CutMix and LabelSmoothing together: every combination composes exactly or is rejected up front.

Each accepted combination trains in the real Trainer, and the loss must equal cross-entropy against the
analytic target: smoothing first (LabelSmoothing, order 10), then MixUp (20), then CutMix (30),
applied in that order whatever order the user lists them in.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from cadence import Algorithm, Callback, Event, MethodConflictError, Trainer
from cadence.algorithms import CutMix, LabelSmoothing, MixUp
from cadence.engine import Engine
from cadence.testing import image_dataset, tiny_image_classifier

NUM_CLASSES = 4
SMOOTHING = 0.2


class Probe(Algorithm):
    """The outermost method: sees each microbatch before the others change it and after they restore it."""

    events = (Event.BEFORE_FORWARD, Event.AFTER_LOSS)
    order = -100

    def __init__(self) -> None:
        self.batches: list[Any] = []
        self.restored: list[torch.Tensor] = []

    def match(self, event: Event, state: Any) -> bool:
        return True

    def apply(self, event: Event, state: Any, logger: Any) -> None:
        if event is Event.BEFORE_FORWARD:
            self.batches.append(state.batch)
        else:
            self.restored.append(state.batch[1])


class Spy(Callback):
    """Runs after every method: records the draws, what the model and the loss saw, and the loss."""

    def __init__(self, methods: list[Algorithm]):
        self.methods = methods
        self.draws: list[dict[str, Any]] = []
        self.inputs: list[torch.Tensor] = []
        self.targets: list[torch.Tensor] = []
        self.outputs: list[torch.Tensor] = []
        self.losses: list[torch.Tensor] = []

    def before_forward(self, state: Any, logger: Any) -> None:
        draws = {}
        for method in self.methods:
            if isinstance(method, MixUp):
                draws["mixup"] = (method.indices.clone(), method.mixing)
            elif isinstance(method, CutMix):
                draws["cutmix"] = (method.indices.clone(), method.bbox, method.area)
        self.draws.append(draws)
        self.inputs.append(state.batch[0])

    def before_loss(self, state: Any, logger: Any) -> None:
        self.targets.append(state.batch[1])
        self.outputs.append(state.outputs.detach())

    def after_loss(self, state: Any, logger: Any) -> None:
        self.losses.append(state.loss.detach())


def _expected(x: torch.Tensor, y: torch.Tensor, draws: dict[str, Any], smoothing: bool):
    """The input and the dense target the composition stands for, built step by step from the draws."""
    target = F.one_hot(y, NUM_CLASSES).float()
    if smoothing:
        target = target * (1 - SMOOTHING) + SMOOTHING / NUM_CLASSES
    if "mixup" in draws:
        perm, m = draws["mixup"]
        x, target = (1 - m) * x + m * x[perm], (1 - m) * target + m * target[perm]
    if "cutmix" in draws:
        perm, (x1, y1, x2, y2), area = draws["cutmix"]
        x = x.clone()
        x[..., x1:x2, y1:y2] = x[perm][..., x1:x2, y1:y2]
        target = area * target + (1 - area) * target[perm]
    return x, target


def _configurations() -> list[tuple[bool, bool | None, bool | None]]:
    """(label smoothing?, MixUp interpolate_loss or None, CutMix interpolate_loss or None), >= 2 methods."""
    configs = []
    for smoothing, mixup, cutmix in itertools.product([False, True], [None, False, True], [None, False, True]):
        if smoothing + (mixup is not None) + (cutmix is not None) >= 2:
            configs.append((smoothing, mixup, cutmix))
    return configs


def _methods(smoothing: bool, mixup: bool | None, cutmix: bool | None) -> list[Algorithm]:
    methods: list[Algorithm] = []
    if cutmix is not None:  # listed in reverse of the order they run in: `order` decides, not the list
        methods.append(CutMix(interpolate_loss=cutmix))
    if mixup is not None:
        methods.append(MixUp(alpha=1.0, interpolate_loss=mixup))
    if smoothing:
        methods.append(LabelSmoothing(smoothing=SMOOTHING))
    return methods


def _trainer(methods: list[Algorithm], probe: Probe, spy: Spy) -> Trainer:
    torch.manual_seed(0)
    model = tiny_image_classifier(NUM_CLASSES)
    return Trainer(
        model=model,
        train_dataloader=DataLoader(image_dataset(8, NUM_CLASSES, (3, 8, 8)), batch_size=4),
        max_duration="2ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        algorithms=[probe, *methods],
        callbacks=[spy],
        seed=5,
        device="cpu",
        progress_bar=False,
    )


@pytest.mark.parametrize(("smoothing", "mixup", "cutmix"), _configurations())
def test_every_combination_composes_exactly_or_is_rejected(
    smoothing: bool, mixup: bool | None, cutmix: bool | None
) -> None:
    methods = _methods(smoothing, mixup, cutmix)
    probe, spy = Probe(), Spy(methods)
    if mixup is True and cutmix is not None:
        with pytest.raises(MethodConflictError, match=r"MixUp and CutMix cannot be used together.*Fix: .*MixUp\("):
            _trainer(methods, probe, spy)
        return
    _trainer(methods, probe, spy).fit()
    assert len(spy.losses) == 2
    interpolating = mixup is True or cutmix is True
    for (x, y), draws, seen_input, seen_target, outputs, loss, restored in zip(
        probe.batches, spy.draws, spy.inputs, spy.targets, spy.outputs, spy.losses, probe.restored
    ):
        expected_input, expected_target = _expected(x, y, draws, smoothing)
        torch.testing.assert_close(seen_input, expected_input, rtol=0, atol=1e-6)
        torch.testing.assert_close(expected_target.sum(dim=1), torch.ones(len(y)))
        if not interpolating:
            torch.testing.assert_close(seen_target, expected_target, rtol=0, atol=1e-6)
        assert abs(loss.item() - F.cross_entropy(outputs, expected_target).item()) <= 1e-6
        assert restored is y  # every method put back what it replaced, in nested order


def test_the_plan_nests_label_smoothing_outside_mixup_outside_cutmix() -> None:
    methods = _methods(True, False, False)  # listed CutMix, MixUp, LabelSmoothing
    engine = Engine(_trainer([], Probe(), Spy([])).state, algorithms=methods)
    assert [m.name for m in engine.plan(Event.BEFORE_FORWARD)] == ["MixUp", "CutMix"]
    assert [m.name for m in engine.plan(Event.BEFORE_LOSS)] == ["LabelSmoothing", "MixUp", "CutMix"]
    assert [m.name for m in engine.plan(Event.AFTER_LOSS)] == ["CutMix", "MixUp", "LabelSmoothing"]
