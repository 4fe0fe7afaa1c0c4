"""Seedable samplers: right moments for every shape, exact for tiny shapes, reproducible, resumable."""

from __future__ import annotations

import pytest
import torch

from cadence.ops import MethodRNG, derive_seed, sample_beta, sample_dirichlet, sample_gamma

N = 200_000


@pytest.mark.parametrize("shape", [0.2, 0.5, 1.0, 3.0, 10.0])
def test_gamma_mean_and_variance(shape: float) -> None:
    samples = sample_gamma(torch.full((N,), shape, dtype=torch.float64), torch.Generator().manual_seed(0))
    assert samples.mean().item() == pytest.approx(shape, rel=0.02)  # Gamma(k, 1): mean = variance = k
    assert samples.var().item() == pytest.approx(shape, rel=0.05)


@pytest.mark.parametrize("alpha", [0.001, 0.01, 0.2, 1.0, 5.0])
def test_beta_is_symmetric_with_the_right_variance_even_for_tiny_alpha(alpha: float) -> None:
    a = torch.full((N,), alpha, dtype=torch.float32)
    samples = sample_beta(a, a, torch.Generator().manual_seed(1))
    expected_var = 1 / (4 * (2 * alpha + 1))
    assert samples.mean().item() == pytest.approx(0.5, abs=0.01)
    assert samples.var().item() == pytest.approx(expected_var, rel=0.05)
    assert bool(((samples >= 0) & (samples <= 1)).all())


@pytest.mark.parametrize("alpha", [0.01, 1.0])
def test_dirichlet_rows_sum_to_one_and_never_vanish(alpha: float) -> None:
    samples = sample_dirichlet(torch.full((N // 10, 3), alpha), torch.Generator().manual_seed(2))
    torch.testing.assert_close(samples.sum(dim=1), torch.ones(N // 10))
    assert samples.mean(dim=0).tolist() == pytest.approx([1 / 3] * 3, abs=0.01)


def test_samplers_are_reproducible_and_validate() -> None:
    a = torch.full((5,), 0.4)
    assert torch.equal(
        sample_beta(a, a, torch.Generator().manual_seed(3)), sample_beta(a, a, torch.Generator().manual_seed(3))
    )
    with pytest.raises(TypeError, match="floating-point"):
        sample_gamma(torch.ones(3, dtype=torch.long), torch.Generator())


def test_method_rng_state_survives_loading_before_setup() -> None:
    class FakeState:
        device, seed = torch.device("cpu"), 11

    first = MethodRNG("m")
    first.setup(FakeState())
    torch.rand(4, generator=first.generator)
    saved = first.state_dict()
    expected = torch.rand(4, generator=first.generator)
    fresh = MethodRNG("m")
    fresh.load_state_dict(saved)  # before INIT created the generator
    assert torch.equal(fresh.state_dict()["state"], saved["state"])
    fresh.setup(FakeState())
    assert torch.equal(torch.rand(4, generator=fresh.generator), expected)
    assert derive_seed(11, "m") != derive_seed(12, "m") and derive_seed(11, "m") == derive_seed(11, "m")


def test_a_run_logs_the_seed_of_every_methods_generator() -> None:
    """Each method's randomness is traceable from the run's params: its generators' seeds, derived from the run's
    seed (changing with it) unless the method was given its own; a duck-typed method adds nothing."""
    from unittest.mock import Mock

    from torch.utils.data import DataLoader

    from cadence import Event, Trainer
    from cadence.loggers import InMemoryLogger
    from cadence.ops import RandomMethod
    from cadence.testing import image_dataset, tiny_image_classifier

    class Draws(RandomMethod):
        generators = {"draws": "device", "host": "cpu"}
        events = (Event.INIT,)

        def apply(self, event: Event, state: object, logger: object) -> None:
            self.setup_generators(state)  # type: ignore[arg-type]

    def logged(seed: int, method_seed: int | None = None) -> dict:
        logger, model = InMemoryLogger(), tiny_image_classifier(4)
        mock = Mock(spec=["match", "apply"], **{"match.return_value": False})
        Trainer(model=model, train_dataloader=DataLoader(image_dataset(4, 4), batch_size=4), max_duration="1ba",
                algorithms=[Draws(seed=method_seed), mock], loggers=[logger], seed=seed, device="cpu",
                progress_bar=False).fit()  # fmt: skip
        return {k: v for k, v in logger.hyperparameters.items() if k.startswith("seed/")}

    first = logged(1)
    assert first == {"seed/Draws/draws": derive_seed(1, "draws"), "seed/Draws/host": derive_seed(1, "host")}
    assert logged(2) != first and logged(1) == first
    assert logged(1, method_seed=7) == {
        "seed/Draws/draws": derive_seed(7, "draws"),
        "seed/Draws/host": derive_seed(7, "host"),
    }
