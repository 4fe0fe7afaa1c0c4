"""Card claims judged on a study with known numbers: reproduced, not reproduced (with the numbers), not applicable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cadence_harness.reading.claims import (
    NOT_APPLICABLE,
    NOT_REPRODUCED,
    REPRODUCED,
    Judgement,
    claim_table,
    judge,
    parse_claims,
)
from cadence_harness.reading.summaries import Section
from cadence_harness.running.recipe import Recipe
from cadence_harness.store_report import build_report

STUDY = Recipe(
    name="claims",
    model="tv/resnet20",
    data="digits",
    duration="4ep",
    durations=("1ep", "2ep", "4ep"),
    schedule={"name": "cosine"},
    seeds=(0, 1, 2),
    methods={"sharp": {}, "blunt": {}},
    grid={"arms": ["baseline", "each"]},
)
# (accuracy, seconds) by arm and budget (conftest's `log_study` varies them by seed): `sharp` is more accurate
# for the same cost (so it also reaches the baseline's accuracy sooner); `blunt` is as accurate and half as
# costly at 1ep and 2ep, less accurate at 4ep
KNOWN = {
    ("baseline", "1ep"): (0.60, 10.0),
    ("baseline", "2ep"): (0.70, 20.0),
    ("baseline", "4ep"): (0.75, 40.0),
    ("sharp", "1ep"): (0.66, 10.0),
    ("sharp", "2ep"): (0.73, 20.0),
    ("sharp", "4ep"): (0.78, 40.0),
    ("blunt", "1ep"): (0.60, 5.0),
    ("blunt", "2ep"): (0.70, 10.0),
    ("blunt", "4ep"): (0.66, 20.0),
}


@pytest.fixture(scope="module")
def section(tmp_path_factory: pytest.TempPathFactory, study_logger: Any) -> Section:
    folder = tmp_path_factory.mktemp("claims")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    study_logger(uri, STUDY, KNOWN)
    (only,) = build_report(["claims"], tracking_uri=uri, out_dir=folder / "report", plots=False).sections
    return only


def claims(*entries: dict[str, str]) -> list[Any]:
    return parse_claims({"claims": list(entries)}, where="card")


def test_accuracy_claims_are_judged_on_the_paired_difference_at_the_longest_budget(section: Section) -> None:
    (claim,) = claims({"claim": "more accurate", "source": "paper", "expects": "accuracy"})
    sharp, blunt = judge(claim, section, "sharp"), judge(claim, section, "blunt")
    assert sharp.verdict == REPRODUCED and "Δ accuracy at 4ep 3.00 ± 0.00 pp (n=3)" in sharp.reason
    assert blunt.verdict == NOT_REPRODUCED and blunt.reason.endswith("(n=3): worse")


def test_speedup_and_cost_claims_read_the_matched_speedups_and_the_ratios(section: Section) -> None:
    speedup, cost = claims(
        {"claim": "faster", "source": "README", "expects": "speedup"},
        {"claim": "cheaper", "source": "README", "expects": "cost", "unit": "train_s"},
    )
    assert judge(speedup, section, "sharp").verdict == REPRODUCED  # the baseline needs more to get as accurate
    blunt = judge(speedup, section, "blunt")  # better at 2ep (same accuracy for half the cost), worse at 4ep
    assert blunt.verdict == NOT_REPRODUCED and "speedup at matched accuracy (FLOPs): " in blunt.reason
    assert judge(cost, section, "blunt").verdict == REPRODUCED  # half the training time at every budget
    sharp_cost = judge(cost, section, "sharp")
    assert sharp_cost.verdict == NOT_REPRODUCED and "training time ratio 1ep 1.00" in sharp_cost.reason


def test_a_claimed_factor_must_be_inside_the_interval_not_only_a_speedup(section: Section) -> None:
    modest, bold, cheap, cheaper = claims(
        {"claim": "1.2x faster", "source": "README", "expects": "speedup", "size": 1.2},
        {"claim": "3x faster", "source": "README", "expects": "speedup", "size": 3},
        {"claim": "1.5x cheaper", "source": "README", "expects": "cost", "unit": "train_s", "size": 1.5},
        {"claim": "3x cheaper", "source": "README", "expects": "cost", "unit": "train_s", "size": 3},
    )
    assert judge(modest, section, "sharp").verdict == REPRODUCED  # about 1.5x at 1ep and 2ep
    far = judge(bold, section, "sharp")
    assert far.verdict == NOT_REPRODUCED and far.reason.endswith(": faster, but not by the claimed 3x")
    assert judge(cheap, section, "blunt").verdict == REPRODUCED  # half the training time: 2x
    half = judge(cheaper, section, "blunt")
    assert half.verdict == NOT_REPRODUCED and half.reason.endswith(": cheaper, but not by the claimed 3x")


def test_a_claim_this_study_cannot_test_is_not_applicable_with_its_reason(section: Section) -> None:
    gpu, other = claims(
        {"claim": "tensor cores", "source": "card", "expects": "speedup", "not_here": "needs a GPU"},
        {"claim": "more accurate", "source": "paper", "expects": "accuracy"},
    )
    assert judge(gpu, section, "sharp") == Judgement(NOT_APPLICABLE, "needs a GPU")
    assert judge(other, section, "missing").verdict == NOT_APPLICABLE
    table = claim_table([gpu, other], [section], "sharp")
    assert "| tensor cores | card | speedup | **not applicable at this scale**: needs a GPU |" in table
    assert "| more accurate | paper | accuracy | **reproduced**: Δ accuracy at 4ep" in table
    nowhere = claim_table([other], [section], "missing")  # no section ran it: one column says so
    assert "| verdict |" in nowhere and "no study measured the method alone" in nowhere


def test_malformed_claims_are_refused_naming_the_card() -> None:
    with pytest.raises(ValueError, match=r"card: claims\[0\].expects='faster'; use one of"):
        claims({"claim": "x", "source": "y", "expects": "faster"})
    with pytest.raises(ValueError, match=r"claims\[0\] has unknown keys \['budget'\] / lacks \['source'\]"):
        claims({"claim": "x", "expects": "accuracy", "budget": "4ep"})
    with pytest.raises(ValueError, match=r"claims\[0\].unit='hours'"):
        claims({"claim": "x", "source": "y", "expects": "cost", "unit": "hours"})
    with pytest.raises(ValueError, match=r"claims\[0\].size=0.5 must be a factor >= 1, e.g. 1.5"):
        claims({"claim": "x", "source": "y", "expects": "speedup", "size": 0.5})
    with pytest.raises(ValueError, match=r"claims\[0\].size is for speedup and cost claims, not accuracy"):
        claims({"claim": "x", "source": "y", "expects": "accuracy", "size": 1.5})


def test_every_card_in_the_repository_has_well_formed_claims() -> None:
    from cadence_harness.reading.cards import card_paths, front_matter

    root = Path(__file__).resolve().parents[2] / "packages" / "methods"
    for method, path in card_paths(root).items():
        parse_claims(front_matter(path), where=method)
