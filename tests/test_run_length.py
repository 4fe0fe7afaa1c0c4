"""Which methods follow the elapsed fraction of the run (``effects().reads`` holds `Resource.DURATION`).

The harness reads it to decide that a cyclic run (Portes et al. 2022) cannot stand for such a method's runs
of shorter budgets, so a wrong declaration would silently bias a study's screens (progressive resizing with
its delay of half the run trains a 16-epoch cyclic run's 2, 4 and 8 epoch cycles on small images only).
"""

from __future__ import annotations

import pytest

from cadence import Resource
from cadence.registry import registry

FOLLOWS_THE_RUN = {
    "gyro_dropout": "its masks are spread over the run's epochs",
    "layer_freezing": "it freezes from a fraction of the run on",
    "progressive_resizing": "its sizes grow with the elapsed fraction",
    "scale_schedule": "it rescales the run's length",
    "selective_backprop": "its window is fractions of the run",
    "seq_length_warmup": "the length grows with the run's progress",
    "swa": "its window is fractions of the run, and it finishes at the run's end",
}


@pytest.mark.parametrize("name", sorted(registry().methods))
def test_a_method_declares_reading_the_runs_length_exactly_when_its_defaults_follow_it(name: str) -> None:
    try:
        algorithm = registry().method(name).algorithm()
    except TypeError:
        pytest.skip(f"{name} has required arguments")
    assert (Resource.DURATION in algorithm.effects().reads) == (name in FOLLOWS_THE_RUN), FOLLOWS_THE_RUN.get(name)


def test_ema_and_stochastic_depth_follow_it_only_when_they_start_at_a_fraction_of_the_run() -> None:
    ema, depth = registry().method("ema").algorithm, registry().method("stochastic_depth").algorithm
    assert Resource.DURATION in ema(ema_start="0.5dur").effects().reads
    assert Resource.DURATION not in ema(ema_start="10ba").effects().reads
    assert Resource.DURATION in depth(drop_rate=0.5, drop_warmup="0.1dur").effects().reads
    assert Resource.DURATION not in depth(drop_rate=0.5, drop_warmup="100ba").effects().reads
