"""Every pair of installed methods either trains together or is rejected before training,
with a message naming both. Order of the list never changes the plan."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.utils.data import DataLoader

from cadence import Engine, MethodConflictError, State, Trainer
from cadence.registry import registry
from cadence.testing import image_dataset, tiny_image_classifier

NAMES = sorted(registry().methods)
PAIRS = list(itertools.combinations(NAMES, 2))


def _make(name: str):
    return registry().method(name).algorithm()


def _trainer(algorithms: list) -> Trainer:
    torch.manual_seed(0)
    model = tiny_image_classifier()
    return Trainer(
        model=model,
        train_dataloader=DataLoader(image_dataset(8), batch_size=4, shuffle=True),
        max_duration="2ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.01),
        algorithms=algorithms,
        seed=0,
        device="cpu",
        progress_bar=False,
    )


def test_methods_are_installed() -> None:
    assert len(NAMES) >= 9, f"expected the nine data-side methods at least, found {NAMES}"


@pytest.mark.parametrize(("first", "second"), PAIRS, ids=[f"{a}+{b}" for a, b in PAIRS])
def test_pair_trains_or_is_rejected_up_front(first: str, second: str) -> None:
    algorithms = [_make(first), _make(second)]
    try:
        trainer = _trainer(algorithms)
    except MethodConflictError as error:
        a, b = (type(x).__name__ for x in algorithms)
        assert a in str(error) and b in str(error) and "Fix:" in str(error)
        return
    trainer.fit()


def test_all_methods_together_train_or_are_rejected_up_front() -> None:
    algorithms = [_make(n) for n in NAMES]
    try:
        trainer = _trainer(algorithms)
    except MethodConflictError as error:
        named = [type(a).__name__ for a in algorithms if type(a).__name__ in str(error)]
        assert len(named) >= 2, f"a rejection must name the methods involved: {error}"
        return
    trainer.fit()
    assert trainer.state.timestamp.batch == 2


def test_plan_is_deterministic_and_follows_declared_orders() -> None:
    algorithms = [_make(n) for n in NAMES]
    try:
        engine = Engine(State(model=tiny_image_classifier()), algorithms=algorithms)
    except MethodConflictError:
        pytest.skip("the installed methods hold a declared conflict; pairs are covered above")
    for event in ("after_dataloader", "before_forward", "before_loss"):
        orders = [type(a).order for a in engine.plan(event)]
        expected = sorted(orders, reverse=event.startswith("after_"))
        assert orders == expected, f"{event}: methods must run by declared order, got {orders}"
    again = Engine(State(model=tiny_image_classifier()), algorithms=[_make(n) for n in NAMES])
    assert engine.describe() == again.describe()
