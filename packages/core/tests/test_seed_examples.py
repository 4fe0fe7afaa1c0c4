"""Composer's documented examples, with `composer` replaced by `cadence` in the imports, must run."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from cadence import Algorithm, ComposerModel, Engine, Event, InMemoryLogger, State, Time, Trainer
from cadence.testing import digits_datasets, mlp_classifier


def mixup(x, alpha=0.2):
    lam = torch.distributions.Beta(alpha, alpha).sample().item()
    index = torch.randperm(x.size(0))
    return lam * x + (1 - lam) * x[index], index, lam


class MixUp(Algorithm):
    """The custom algorithm of Composer's welcome tour."""

    def __init__(self, alpha: float = 0.2):
        self.alpha = alpha

    def match(self, event, state):
        return event in [Event.AFTER_DATALOADER, Event.AFTER_LOSS]

    def apply(self, event, state, logger):
        if event == Event.AFTER_DATALOADER:
            input, target = state.batch
            new_input, self.index, self.mixing = mixup(input, self.alpha)
            state.batch = (new_input, target)
        if event == Event.AFTER_LOSS:
            _, target = state.batch
            modified_batch = (state.batch[0], target[self.index])
            new_loss = state.model.loss(state.outputs, modified_batch)
            state.loss *= self.mixing
            state.loss += (1 - self.mixing) * new_loss


def test_custom_algorithm_with_the_trainer() -> None:
    train, test = digits_datasets()
    train_dataloader = DataLoader(train, batch_size=64, shuffle=True)
    eval_dataloader = DataLoader(test, batch_size=64)
    model = mlp_classifier()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    logger = InMemoryLogger()
    trainer = Trainer(
        model=model,
        train_dataloader=train_dataloader,
        eval_dataloader=eval_dataloader,
        max_duration="2ep",
        optimizers=opt,
        algorithms=[MixUp()],
        loggers=[logger],
        seed=42,
        device="cpu",
    )
    trainer.fit()
    assert logger.most_recent_values["metrics/eval/MulticlassAccuracy"] > 0.5


def test_welcome_tour_hand_driven_loop() -> None:
    train, _ = digits_datasets()
    your_dataloader = DataLoader(train, batch_size=100)
    your_model = mlp_classifier()
    optimizer = torch.optim.SGD(your_model.parameters(), lr=0.1)
    state = State(model=your_model, max_duration=Time(10, "epoch"), rank_zero_seed=0, dataloader=your_dataloader)
    engine = Engine(state=state, algorithms=[MixUp()])

    losses = []
    engine.run_event("init")
    engine.run_event("fit_start")
    for _ in range(2):
        engine.run_event("epoch_start")
        for state.batch in your_dataloader:
            engine.run_event("after_dataloader")
            engine.run_event("before_forward")
            state.outputs = state.model.forward(state.batch)
            engine.run_event("after_forward")
            engine.run_event("before_loss")
            state.loss = state.model.loss(state.outputs, state.batch)
            engine.run_event("after_loss")
            engine.run_event("before_backward")
            state.loss.backward()
            engine.run_event("after_backward")
            optimizer.step()
            optimizer.zero_grad()
            losses.append(state.loss.item())
            engine.run_event("batch_end")
        engine.run_event("epoch_end")
    assert len(losses) == 30 and sum(losses[-5:]) < sum(losses[:5])


def test_composer_model_guide_resnet18() -> None:
    torchvision = pytest.importorskip("torchvision")

    class ResNet18(ComposerModel):
        def __init__(self):
            super().__init__()
            self.model = torchvision.models.resnet18(num_classes=10)

        def forward(self, batch):  # batch is the output of the dataloader
            inputs, _ = batch
            return self.model(inputs)

        def loss(self, outputs, batch):
            _, targets = batch
            return F.cross_entropy(outputs, targets)

    data = TensorDataset(torch.rand(8, 3, 32, 32), torch.randint(0, 10, (8,)))
    model = ResNet18()
    logger = InMemoryLogger()
    Trainer(
        model=model,
        train_dataloader=DataLoader(data, batch_size=4),
        max_duration="2ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.01),
        loggers=[logger],
        device="cpu",
        progress_bar=False,
    ).fit()
    _, losses = logger.steps_and_values("loss/train/total")
    assert len(losses) == 2


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True:UserWarning")
def test_algorithm_base_properties_are_honoured() -> None:
    """find_unused_parameters / backwards_create_graph / required_on_load exist with Composer's defaults,
    and backwards_create_graph reaches loss.backward (a gradient-penalty method needs it)."""
    seen = {}

    class GradientPenalty(Algorithm):
        events = (Event.AFTER_BACKWARD,)

        @property
        def backwards_create_graph(self):
            return True

        def match(self, event, state):
            return True

        def apply(self, event, state, logger):
            grad = next(state.model.parameters()).grad
            seen["differentiable"] = grad is not None and grad.requires_grad

    assert MixUp().find_unused_parameters is False and MixUp().backwards_create_graph is False
    assert MixUp.required_on_load() is False
    model = mlp_classifier(4, 2)
    data = TensorDataset(torch.randn(4, 4), torch.randint(0, 2, (4,)))
    Trainer(
        model=model,
        train_dataloader=DataLoader(data, batch_size=4),
        max_duration="1ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        algorithms=[GradientPenalty()],
        progress_bar=False,
    ).fit()
    assert seen["differentiable"] is True
