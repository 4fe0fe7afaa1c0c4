"""SeqLengthWarmup adapter: the schedule read from the run's time, tokens counted as trained, refusals."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from cadence_seq_length_warmup import SeqLengthWarmup, set_batch_sequence_length
from torch import nn
from torch.utils.data import DataLoader, Dataset

from cadence import (
    Callback,
    Event,
    InMemoryLogger,
    Model,
    NotApplicableError,
    Resource,
    State,
    Timestamp,
    Trainer,
)

SEQ = 32


class Tagger(Model):
    """A per-token classifier on dict batches: every token it sees is a token it trains on."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.head = nn.Embedding(50, 8), nn.Linear(8, 3)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.head(self.embed(batch["input_ids"]))

    def loss(self, outputs: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(outputs.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)


class Tokens(Dataset):
    def __init__(self, n: int = 16):
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(1, 50, (n, SEQ), generator=generator)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = self.ids[i]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids % 3}


class Trained(Callback):
    """What each step trained on (after every method), and what evaluation saw."""

    def __init__(self) -> None:
        self.shapes: list[tuple[int, ...]] = []
        self.tokens: list[int] = []
        self.eval_shapes: list[tuple[int, ...]] = []

    def before_train_batch(self, state: State, logger: object) -> None:
        self.shapes.append(tuple(state.batch["input_ids"].shape))
        self.tokens.append(state.batch["input_ids"].numel())

    def eval_before_forward(self, state: State, logger: object) -> None:
        self.eval_shapes.append(tuple(state.batch["input_ids"].shape))


def _trainer(algorithm: SeqLengthWarmup, max_duration: str, **kwargs: object) -> Trainer:
    torch.manual_seed(0)
    model = Tagger()
    return Trainer(
        model=model,
        train_dataloader=DataLoader(Tokens(), batch_size=4),
        max_duration=max_duration,
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        algorithms=[algorithm],
        seed=0,
        device="cpu",
        progress_bar=False,
        **kwargs,
    )


def test_matches_only_after_dataloader() -> None:
    algorithm, state = SeqLengthWarmup(), State(model=Tagger(), max_duration="4ba")
    assert [e for e in Event if algorithm.match(e, state)] == [Event.AFTER_DATALOADER]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"duration": -0.1}, "`duration`=-0.1"), ({"duration": 1.5}, "`duration`=1.5"),
     ({"duration": float("nan")}, "`duration`=nan"), ({"duration": "0.3"}, "`duration`='0.3'"),
     ({"min_seq_length": 0}, "`min_seq_length`=0"), ({"min_seq_length": 8.0}, "`min_seq_length`=8.0"),
     ({"max_seq_length": 4}, "`max_seq_length`=4 must be an int >= 8"), ({"step_size": 0}, "`step_size`=0"),
     ({"truncate": "yes"}, "`truncate`='yes'"), ({"preserve_end_of_sequence": 1}, "`preserve_end_of_sequence`=1")],
)  # fmt: skip
def test_bad_hyperparameters_raise_at_construction(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SeqLengthWarmup(**kwargs)


def test_declarations() -> None:
    algorithm = SeqLengthWarmup(duration=0.5, truncate=False)
    assert repr(algorithm) == (
        "SeqLengthWarmup(duration=0.5, min_seq_length=8, max_seq_length=1024, step_size=8, truncate=False, "
        "preserve_end_of_sequence=False)"
    )
    assert algorithm.effects().writes == {Resource.INPUTS, Resource.TARGETS}
    assert algorithm.state_dict() == {"repr": repr(algorithm)}  # a function of the timestamp: only its name


@pytest.mark.parametrize(
    ("max_duration", "timestamps", "lengths"),
    [("20ba", [Timestamp(batch=b) for b in (0, 2, 3, 9)], [8, 8, 16, 32]),  # warmup 10 ba, 3 steps: every 3
     ("2ep", [Timestamp(batch=b) for b in (0, 1, 2, 5)], [8, 16, 24, 32]),  # 2 x 5 batches
     ("1000tok", [Timestamp(batch=99, token=t) for t in (0, 165, 166, 499, 500)], [8, 8, 16, 32, 32]),
     ("100sp", [Timestamp(sample=s) for s in (0, 16, 49)], [8, 16, 32])],
)  # fmt: skip
def test_the_length_follows_the_runs_own_time(max_duration: str, timestamps: list, lengths: list[int]) -> None:
    algorithm = SeqLengthWarmup(duration=0.5, min_seq_length=8, max_seq_length=32, step_size=8)
    state = State(model=Tagger(), max_duration=max_duration, dataloader_len=5)
    found = []
    for timestamp in timestamps:
        state.timestamp = timestamp
        found.append(algorithm.seq_length(state))
    assert found == lengths
    with pytest.raises(ValueError, match="set the Trainer's max_duration"):
        algorithm.seq_length(State(model=Tagger()))


def test_each_step_trains_at_the_scheduled_length_and_evaluation_sees_full_length() -> None:
    trained, logger = Trained(), InMemoryLogger()
    algorithm = SeqLengthWarmup(duration=0.5, min_seq_length=8, max_seq_length=SEQ, step_size=8)
    eval_loader = DataLoader(Tokens(4), batch_size=4)
    trainer = _trainer(algorithm, "6ba", callbacks=[trained], loggers=[logger], eval_dataloader=eval_loader)
    trainer.fit()
    assert [shape[1] for shape in trained.shapes] == [8, 16, 24, 32, 32, 32]  # warmup 3 ba: one step a batch
    assert logger.steps_and_values("seq_length_warmup/curr_seq_len")[1] == [8, 16, 24, 32, 32, 32]
    assert logger.steps_and_values("seq_length_warmup/curr_bs")[1] == [shape[0] for shape in trained.shapes]
    assert trained.eval_shapes and all(shape == (4, SEQ) for shape in trained.eval_shapes)


@pytest.mark.parametrize(
    ("truncate", "shapes"),
    [
        (True, [(4, 8), (4, 8), (4, 8), (4, 16), (4, 24), (4, 32), (4, 32)]),  # warmup 200 tok: a step per 66
        (False, [(16, 8), (8, 16), (4, 32), (4, 32)]),
    ],  # reshaping keeps all 128 tokens of each batch
)
def test_a_token_budget_counts_the_tokens_trained_and_ends_on_time(truncate: bool, shapes: list) -> None:
    trained = Trained()
    algorithm = SeqLengthWarmup(duration=0.5, min_seq_length=8, max_seq_length=SEQ, step_size=8, truncate=truncate)
    trainer = _trainer(algorithm, "400tok", callbacks=[trained], device_train_microbatch_size=2)
    trainer.fit()
    assert trained.shapes == shapes
    assert trainer.state.timestamp.token == sum(trained.tokens) == 512  # the first count past 400 tokens
    assert trainer.state.timestamp.batch == len(shapes)
    assert sum(trained.tokens[:-1]) < 400


def test_check_applicable_refuses_what_it_cannot_shorten() -> None:
    model, ids = Tagger(), torch.ones(2, 8, dtype=torch.long)
    SeqLengthWarmup().check_applicable(model, {"input_ids": ids, "labels": torch.tensor([0, 1])})
    refusals = [
        (SeqLengthWarmup(), (ids, torch.tensor([0, 1])), "must be a dict of tensors"),
        (SeqLengthWarmup(), {"labels": torch.tensor([0, 1])}, "no \\(batch, sequence\\) tensor"),
        (SeqLengthWarmup(truncate=False), {"input_ids": ids, "labels": torch.tensor([0, 1])}, "Use truncate=True"),
        (SeqLengthWarmup(preserve_end_of_sequence=True), {"input_ids": ids}, "attention_mask"),
    ]
    for algorithm, batch, match in refusals:
        with pytest.raises(NotApplicableError, match=f"SeqLengthWarmup cannot shorten these batches: .*{match}"):
            algorithm.check_applicable(model, batch)


def test_the_trainer_refuses_tuple_batches_before_any_step() -> None:
    class Pairs(Dataset):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.ones(SEQ, dtype=torch.long), torch.tensor(0)

    model = Tagger()
    trainer = Trainer(model=model, train_dataloader=DataLoader(Pairs(), batch_size=2), max_duration="2ba",
                      optimizers=torch.optim.SGD(model.parameters(), lr=0.1), algorithms=[SeqLengthWarmup()],
                      device="cpu", progress_bar=False)  # fmt: skip
    with pytest.raises(NotApplicableError, match="dict of tensors"):
        trainer.fit()
    assert trainer.state.timestamp.batch == 0


def test_reshaped_rows_of_padding_keep_gpt2_gradients_finite() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=50, n_positions=16, bos_token_id=0,
                                     eos_token_id=0)  # fmt: skip
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.tensor([[5, 6, 7, 0, 0, 0, 0, 0], [8, 9, 0, 0, 0, 0, 0, 0]])
    mask = (ids != 0).long()
    batch = {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}
    short = set_batch_sequence_length(batch, 3, truncate=False)  # rows of 3: row 1 holds only padding
    assert not bool(short["attention_mask"][1].any())
    model(**short).loss.backward()
    assert all(bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)
