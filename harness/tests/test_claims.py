"""Card claims judged on a study with known numbers: the four verdicts (consistent, contradicts, inconclusive, not
testable here) with their numbers, by construction, the claims' conditions, the timing noise floor, and one Holm
family per study."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from cadence_harness.reading.claims import (
    BY_CONSTRUCTION,
    CONSISTENT,
    CONTRADICTS,
    INCONCLUSIVE,
    NOT_TESTABLE,
    Judgement,
    claim_table,
    judge,
    judge_claims,
    parse_claims,
)
from cadence_harness.reading.noise_floor import NoiseFloor, identity_arms
from cadence_harness.reading.summaries import Section, sections_of
from cadence_harness.reading.tables import tradeoff_markdown
from cadence_harness.records import RunRecord
from cadence_harness.running.recipe import Recipe
from cadence_harness.store_report import build_report
from cadence_harness.testing import study_run

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
    assert only.noise_floor is None  # no identity arm: identical runs took the same time here
    return dataclasses.replace(only, noise_floor=NoiseFloor(("twin",), (("1ep", 0, 1.0), ("1ep", 1, 1.0))))


def claims(*entries: dict[str, str]) -> list[Any]:
    return parse_claims({"claims": list(entries)}, where="card")


def test_accuracy_claims_are_judged_on_the_paired_difference_at_the_longest_budget(section: Section) -> None:
    (claim,) = claims({"claim": "more accurate", "source": "paper", "expects": "accuracy"})
    sharp, blunt = judge(claim, section, "sharp"), judge(claim, section, "blunt")
    assert sharp.verdict == CONSISTENT and "Δ accuracy at 4ep 3.00 ± 0.00 pp (n=3)" in sharp.reason
    assert blunt.verdict == CONTRADICTS and "Δ accuracy at 4ep -9.00 ± 0.00 pp (n=3)" in blunt.reason


def test_speedup_and_cost_claims_read_the_matched_speedups_and_the_ratios(section: Section) -> None:
    speedup, cost = claims(
        {"claim": "faster", "source": "README", "expects": "speedup"},
        {"claim": "cheaper", "source": "README", "expects": "cost", "unit": "train_s"},
    )
    assert judge(speedup, section, "sharp").verdict == CONSISTENT  # the baseline needs more to get as accurate
    blunt = judge(speedup, section, "blunt")  # better at 1ep and 2ep (same accuracy for half the cost), worse at 4ep
    assert blunt.verdict == INCONCLUSIVE and "speedup at matched accuracy (FLOPs): " in blunt.reason
    assert judge(cost, section, "blunt").verdict == CONSISTENT  # half the training time at every budget
    sharp_cost = judge(cost, section, "sharp")  # exactly the baseline's time: no speed-up shown either way
    assert sharp_cost.verdict == INCONCLUSIVE and "training time ratio 1ep 1.00x" in sharp_cost.reason


def test_a_claimed_factor_is_consistent_when_the_interval_keeps_it_and_excludes_no_effect(section: Section) -> None:
    modest, bold, cheap, cheaper = claims(
        {"claim": "1.2x faster", "source": "README", "expects": "speedup", "size": 1.2},
        {"claim": "3x faster", "source": "README", "expects": "speedup", "size": 3},
        {"claim": "1.5x cheaper", "source": "README", "expects": "cost", "unit": "train_s", "size": 1.5},
        {"claim": "3x cheaper", "source": "README", "expects": "cost", "unit": "train_s", "size": 3},
    )
    assert judge(modest, section, "sharp").verdict == CONSISTENT  # about 1.5x at 1ep and 2ep: more than claimed
    far = judge(bold, section, "sharp")
    assert far.verdict == CONTRADICTS and far.reason.endswith("(below the claimed 3x)")
    assert judge(cheap, section, "blunt").verdict == CONSISTENT  # half the training time: 2x
    half = judge(cheaper, section, "blunt")
    assert half.verdict == CONTRADICTS and half.reason.endswith("(below the claimed 3x)")


def test_a_claim_this_study_cannot_test_is_not_testable_here_with_its_reason(section: Section) -> None:
    gpu, other = claims(
        {"claim": "tensor cores", "source": "card", "expects": "speedup", "not_here": "needs a GPU"},
        {"claim": "more accurate", "source": "paper", "expects": "accuracy"},
    )
    assert judge(gpu, section, "sharp") == Judgement(NOT_TESTABLE, "needs a GPU")
    assert judge(other, section, "missing").verdict == NOT_TESTABLE
    table = claim_table([gpu, other], [section], "sharp")
    assert "| tensor cores | card | speedup | **not testable here**: needs a GPU |" in table
    assert "| more accurate | paper | accuracy | **consistent with the claim**: Δ accuracy at 4ep" in table
    nowhere = claim_table([other], [section], "missing")  # no section ran it: one column says so
    assert "| verdict |" in nowhere and "no study measured the method alone" in nowhere
    assert "reproduced" not in table + nowhere and "not applicable" not in table + nowhere


def test_the_claims_conditions_are_compared_with_the_study_records(section: Section) -> None:
    gpu, long, here, imagenet = claims(
        {
            "claim": "8xA100",
            "source": "README",
            "expects": "speedup",
            "unit": "train_s",
            "conditions": {"device": "cuda"},
        },
        {"claim": "regularises", "source": "paper", "expects": "accuracy", "conditions": {"min_steps": 100_000}},
        {"claim": "on digits", "source": "paper", "expects": "accuracy", "conditions": {"data": ["digits", "mnist"]}},
        {"claim": "on ImageNet", "source": "paper", "expects": "accuracy", "conditions": {"data": "imagenet"}},
    )
    unmet = "made on cuda; this study ran on (its records name no device)"  # the test study's records do not
    assert judge(gpu, section, "sharp") == Judgement(NOT_TESTABLE, unmet)
    steps = judge(long, section, "sharp")
    assert steps.verdict == NOT_TESTABLE and steps.reason.startswith("needs >= 100,000 optimizer steps; the longest")
    assert judge(here, section, "sharp").verdict == CONSISTENT
    assert judge(imagenet, section, "sharp").reason == "made on imagenet; this study used digits"
    (averaging,) = claims(
        {"claim": "averages", "source": "card", "expects": "accuracy", "conditions": {"baseline_without": "Lookahead"}}
    )
    assert judge(averaging, section, "sharp").verdict == CONSISTENT  # the test study's baseline runs no algorithm
    lookahead = "Lookahead(every=5, decay=0.7738, power=3.0), FreezeWhiteningBias(fraction=0.3)"
    averaged = dataclasses.replace(
        section,
        records=[
            dataclasses.replace(r, params={**r.params, "algorithms": lookahead}) if r.arm == "baseline" else r
            for r in section.records
        ],
    )
    already = judge(averaging, averaged, "sharp")
    assert already.verdict == NOT_TESTABLE and already.reason == (
        f"made against a baseline without Lookahead; this study's baseline runs {lookahead}"
    )
    with pytest.raises(ValueError, match=r"conditions has unknown keys \['gpus'\]"):
        claims({"claim": "x", "source": "y", "expects": "accuracy", "conditions": {"gpus": 8}})


def test_a_flops_claim_that_holds_by_design_is_labelled_not_judged(section: Section) -> None:
    (design,) = claims(
        {"claim": "fewer FLOPs", "source": "card", "expects": "cost", "by_construction": "it skips half the layers"}
    )
    label = judge(design, section, "blunt")
    assert label.verdict == BY_CONSTRUCTION and label.reason.startswith("it skips half the layers; measured FLOPs")
    with pytest.raises(ValueError, match="by_construction is for FLOPs cost claims"):
        claims({"claim": "x", "source": "y", "expects": "cost", "unit": "train_s", "by_construction": "z"})


def test_time_claims_within_the_timing_noise_floor_are_inconclusive(section: Section) -> None:
    noisy = dataclasses.replace(section, noise_floor=NoiseFloor(("twin",), (("2ep", 0, 0.5), ("2ep", 1, 1.1))))
    time, flops = claims(
        {"claim": "1.5x cheaper in time", "source": "README", "expects": "cost", "unit": "train_s", "size": 1.5},
        {"claim": "1.5x cheaper in FLOPs", "source": "README", "expects": "cost", "size": 1.5},
    )
    unknown = judge(time, dataclasses.replace(section, noise_floor=None), "blunt")  # 2x, but identical runs?
    assert unknown.verdict == INCONCLUSIVE and "no identity arm" in unknown.reason
    quiet = dataclasses.replace(section, noise_floor=NoiseFloor(("twin",), (("2ep", 0, 0.97), ("2ep", 1, 1.02))))
    assert judge(time, quiet, "blunt").verdict == CONSISTENT  # identical runs within 1.03x: 2x is not noise
    within = judge(time, noisy, "blunt")  # identical runs differed by 2x: a 1.5x claim is inside the noise
    assert within.verdict == INCONCLUSIVE and "below this study's timing noise floor (2.00x" in within.reason
    assert "noise floor" not in judge(flops, noisy, "blunt").reason  # FLOPs do not jitter


def _run(
    arm: str, budget: str, max_duration: str, seed: int, accuracy: float, train_s: float, device: str = "cpu"
) -> RunRecord:
    return study_run(
        arm, budget, seed, accuracy=accuracy, train_s=train_s, length=max_duration, params={"device": device}
    )


def test_an_arm_that_repeats_the_baselines_runs_is_the_timing_null() -> None:
    """Scale Schedule at ratio 0.5 and budget 4ep runs exactly the baseline's 2ep: its time ratios are noise."""
    base = [_run("baseline", "2ep", "2ep", s, 0.4 + s / 100, 10.0) for s in range(3)]
    twin = [_run("half", "4ep", "2ep", s, 0.4 + s / 100, t) for s, t in enumerate([20.0, 10.0, 8.0])]
    floor = identity_arms(base + twin)
    assert floor is not None and floor.arms == ("half",)
    assert [r for _, _, r in floor.ratios] == [0.5, 1.0, 1.25] and floor.factor == pytest.approx(2.0)
    assert "time ratios were 0.50, 1.00, 1.25 (n=3 pairs)" in floor.format()
    assert "accuracy to the bit" in floor.format() and "GPU" not in floor.format()  # a CPU study says what it checked
    other = [_run("other", "4ep", "2ep", s, 0.5, 9.0) for s in range(3)]  # computes something else
    same_budget = [_run("layout", "2ep", "2ep", s, 0.4 + s / 100, 5.0) for s in range(3)]  # same numbers, faster
    assert identity_arms(base + other + same_budget) is None


def test_on_a_gpu_an_identity_arm_may_differ_in_accuracy_by_the_devices_nondeterminism() -> None:
    """cuDNN does not repeat its bits: the same program's accuracy differs a little (0.39 pp at most in
    cifar10_fast_study's 14 pairs); on a CPU it must not, and on a GPU a larger gap is another computation."""
    base = [_run("baseline", "2ep", "2ep", s, 0.80 + s / 100, 10.0, "gpu") for s in range(3)]
    jitter = [0.0, 0.0039, -0.0006]
    twin = [_run("half", "4ep", "2ep", s, 0.80 + s / 100 + d, 9.0, "gpu") for s, d in enumerate(jitter)]
    floor = identity_arms(base + twin)
    assert floor is not None and floor.arms == ("half",)
    assert "accuracy within the GPU kernels' nondeterminism" in floor.format()
    on_cpu = [dataclasses.replace(r, params={**r.params, "device": "cpu"}) for r in base + twin]
    assert identity_arms(on_cpu) is None  # a CPU repeats its bits: 0.39 pp is another computation there
    apart = [_run("other", "4ep", "2ep", s, 0.80 + s / 100 + 0.02, 9.0, "gpu") for s in range(3)]
    assert identity_arms(base + apart) is None  # 2 pp: not nondeterminism
    cheaper = [dataclasses.replace(r, metrics={**r.metrics, "final/flops": 1.0}) for r in twin]
    assert identity_arms(base + cheaper) is None  # FLOPs never jitter


def test_a_study_with_an_identity_arm_shows_its_time_ratios_as_noise_not_as_speedups() -> None:
    """The baseline at 2ep and 4ep; `half` at 4ep and 8ep runs exactly the baseline's 2ep and 4ep, re-timed."""
    base = [
        _run("baseline", b, b, s, acc + s / 100, 10.0 * (i + 1))
        for i, (b, acc) in enumerate([("2ep", 0.4), ("4ep", 0.5)])
        for s in range(3)
    ]
    half = [
        _run("half", b, m, s, acc + s / 100, t)
        for b, m, acc, t in [("4ep", "2ep", 0.4, 6.0), ("8ep", "4ep", 0.5, 12.0)]
        for s in range(3)
    ]
    (section,) = sections_of(base + half)
    assert section.noise_floor is not None and section.noise_floor.arms == ("half",)
    curve = section.sweep_curve("half")
    assert curve is not None
    assert all(s.left_out.startswith("identity arm") for s in section.speedups_of(curve, "train_s"))
    assert [s.value for s in section.speedups_of(curve, "flops")] == [pytest.approx(1.0)] * 2  # the same work
    text = tradeoff_markdown(section)
    assert "### Timing noise floor" in text and "identical computations differed in time by up to 1.67x" in text
    time_front = next(line for line in text.splitlines() if line.startswith("- training time:"))
    assert "half" not in time_front  # a re-timed baseline run is not a faster way to train


def test_the_claims_of_every_card_on_a_study_are_one_holm_family(section: Section) -> None:
    accurate, faster, gpu = claims(
        {"claim": "more accurate", "source": "paper", "expects": "accuracy"},
        {"claim": "1.2x faster", "source": "README", "expects": "speedup", "size": 1.2},
        {"claim": "gpu", "source": "README", "expects": "speedup", "not_here": "needs a GPU"},
    )
    verdicts = judge_claims({"sharp": [accurate, faster, gpu], "blunt": [accurate]}, section)
    families = {j.family for j in verdicts.values() if j.family}
    (family,) = families  # one family for the study; the untestable claim is not in it
    assert family.startswith("Holm over ") and family.endswith("tests of 3 claims in `claims`")
    assert verdicts[("sharp", 2)].family == "" and verdicts[("blunt", 0)].verdict == CONTRADICTS
    table = claim_table([accurate, faster, gpu], [section], "sharp", judgements={section.name: verdicts})
    assert "Holm-adjusted p = 0 (Holm over" in table


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


def test_a_claim_with_settings_is_judged_on_the_arm_that_ran_them() -> None:
    """`mix` ran alpha 0.2 (recorded as a hyperparameter); its variant `mix@claimed` alpha 1.0 (only in the
    method's recorded repr) and is 3 pp more accurate."""

    def run(arm: str, budget: str, seed: int, accuracy: float, params: dict[str, str]) -> RunRecord:
        record = _run(arm, budget, budget, seed, accuracy + seed / 1000, 10.0)
        return dataclasses.replace(record, params={**record.params, **params})

    records = [
        run(arm, budget, s, acc, params)
        for arm, acc, params in [
            ("baseline", 0.70, {}),
            ("mix", 0.70, {"method.mix": "Mix(alpha=0.2, seed=None)", "method.mix.alpha": "0.2"}),
            ("mix@claimed", 0.73, {"method.mix": "Mix(alpha=1.0, seed=None)"}),
        ]
        for budget in ("2ep", "4ep")
        for s in range(3)
    ]
    (section,) = sections_of(records)
    at_claim, plain, elsewhere = claims(
        {"claim": "better at alpha 1", "source": "paper", "expects": "accuracy", "settings": {"alpha": 1}},
        {"claim": "better", "source": "paper", "expects": "accuracy"},
        {"claim": "better at alpha 2", "source": "paper", "expects": "accuracy", "settings": {"alpha": 2.0}},
    )
    judged = judge(at_claim, section, "mix")
    assert judged.verdict == CONSISTENT and judged.reason.startswith("on `mix@claimed` (alpha=1): Δ accuracy at 4ep")
    assert judge(plain, section, "mix").verdict == INCONCLUSIVE  # the plain arm: as accurate as the baseline
    missing = judge(elsewhere, section, "mix")
    assert missing.verdict == NOT_TESTABLE
    assert missing.reason == (
        "no arm of mix at the claim's settings (alpha=2.0); the study ran `mix`: alpha=0.2; `mix@claimed`: alpha=1.0"
    )
    table = claim_table([at_claim], [section], "mix")
    assert "| better at alpha 1 (at alpha=1) | paper | accuracy | **consistent with the claim**" in table
    with pytest.raises(ValueError, match=r"claims\[0\].settings must map hyperparameters to values"):
        claims({"claim": "c", "source": "s", "expects": "accuracy", "settings": [1.0]})


def test_a_family_of_several_processes_is_named_by_its_world_size() -> None:
    """`--nproc 2` runs are another configuration: the report names them by what differs, not by a hash."""
    one = [_run("baseline", "2ep", "2ep", seed, 0.5, 10.0) for seed in range(2)]  # records from before --nproc
    two = [
        dataclasses.replace(
            r,
            run_id=f"two-{r.run_id}",
            tags={**r.tags, **{k: f"two-{v}" for k, v in r.tags.items() if k.endswith("_hash")}},
            params={**r.params, "world_size": "2", "sharding": "ddp"},
        )
        for r in one
    ]
    names = sorted(section.name for section in sections_of(one + two))
    assert names == ["study (world_size 1, sharding none)", "study (world_size 2, sharding ddp)"], names


def test_a_cuda_claim_is_testable_on_a_study_the_harness_recorded_as_gpu() -> None:
    """The harness logs a GPU run's device as ``gpu``; the cards say ``cuda``, as Composer does."""
    from cadence_harness.reading.conditions import parse_conditions, unmet

    study = {"device": {"gpu"}, "precision": {"amp_bf16"}, "data": {"cifar10"}, "min_steps": 800}
    for wanted in ("cuda", "gpu"):
        assert unmet(parse_conditions({"device": wanted}, "claim"), study) == []
    assert unmet(parse_conditions({"device": "cuda"}, "claim"), {**study, "device": {"gpu", "cpu"}}) == [
        "made on cuda; this study ran on cpu, gpu"
    ]
    assert unmet(parse_conditions({"device": "cuda"}, "claim"), {**study, "device": {"cuda:0"}}) == []
