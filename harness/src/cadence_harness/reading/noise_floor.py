"""The timing null: an *identity arm*, one whose runs compute exactly a baseline run (the same seed, run length,
final accuracy (on a GPU, within its nondeterminism) and FLOPs, under another budget's name, e.g. Scale Schedule
at ratio 0.5 against the baseline's half budget), measures nothing but the machine: its time ratios are the
study's timing noise floor (`NoiseFloor`), shown instead of speedups. Only the pairs that ran on one machine set
the floor: a twin run on another machine shows how far two machines differ, and times of different machines are
never compared (`cadence_harness.records.same_machine`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from cadence_harness.records import RunRecord, budget_value, same_machine

__all__ = ["GPU_ACCURACY_TOLERANCE", "NoiseFloor", "identity_arms"]


@dataclass(frozen=True)
class NoiseFloor:
    """The time ratios (baseline time / arm time) of runs that compute exactly what a baseline run computes.

    `ratios` are the pairs that ran on one machine: the floor. Twins that ran on another machine than their
    baseline run (`elsewhere`) show how far two machines' times differ, and set no floor."""

    arms: tuple[str, ...]
    ratios: tuple[tuple[str, int, float], ...]  # (the arm's budget, seed, ratio), arm and baseline on one machine
    on_gpu: bool = False  # whether any pair ran on a GPU, where "the same accuracy" allows the kernels' nondeterminism
    elsewhere: tuple[tuple[str, int, float], ...] = ()  # the same, each pair on two machines
    machines: str = ""  # the machines of `elsewhere`: "<the arm's> against the baseline's <...>"

    @property
    def factor(self) -> float | None:
        """The largest factor by which two identical computations on one machine differed in time (>= 1); None
        where no pair ran on one machine."""
        return max((math.exp(abs(math.log(r))) for _, _, r in self.ratios), default=None)

    def format(self) -> str:
        accuracy = "accuracy within the GPU kernels' nondeterminism" if self.on_gpu else "accuracy to the bit"
        same = f"computes exactly the baseline's runs (same seed, run length and FLOPs, {accuracy})"
        text = f"Timing noise floor: {' and '.join(self.arms)} {same}"
        if self.factor is not None:
            text += (
                f", yet its time ratios were {_shown(self.ratios)} (n={len(self.ratios)} pairs): identical "
                f"computations differed in time by up to {self.factor:.2f}x. Time speedups of that size are timing "
                "noise, and time claims smaller than it are inconclusive here."
            )
        if self.elsewhere:
            lead = " Its twins run on another machine" if self.factor is not None else ", but ran on another machine"
            text += (
                f"{lead} ({self.machines}), where the time ratios were {_shown(self.elsewhere)} "
                f"(n={len(self.elsewhere)} pairs): the machines differ, and times of different machines are never "
                "compared here."
            )
            if self.factor is None:
                text += " This study's timing noise on one machine is unmeasured, so its time claims are inconclusive."
        return text


def _shown(ratios: Sequence[tuple[str, int, float]]) -> str:
    return ", ".join(f"{r:.2f}" for _, _, r in ratios)


# On a GPU the same program does not give the same bits: cuDNN's and atomics' summation orders vary from run to
# run. In cifar10_fast_study (H200, bf16) Scale Schedule 0.5's 14 twins of the baseline's half-budget runs had the
# same FLOPs; 9 had the same accuracy to the bit, 5 differed by 0.06 to 0.39 pp of 10,000 test images.
GPU_ACCURACY_TOLERANCE = 0.005  # 0.5 pp: an identical computation's accuracy on a GPU, as fractions


def _on_gpu(run: RunRecord, twin: RunRecord) -> bool:
    return "gpu" in (run.params.get("device"), twin.params.get("device"))


def _twins(run: RunRecord, twin: RunRecord) -> bool:
    """Whether `run` computes what the baseline's `twin` computes: the same FLOPs, and the same accuracy (to the
    bit on a CPU; within `GPU_ACCURACY_TOLERANCE` where either ran on a GPU, whose kernels are not deterministic)."""
    flops, accuracy = run.metrics.get("final/flops"), run.metrics.get("final/accuracy")
    twin_accuracy = twin.metrics.get("final/accuracy")
    if flops is None or flops != twin.metrics.get("final/flops") or accuracy is None or twin_accuracy is None:
        return False
    if _on_gpu(run, twin):
        return abs(accuracy - twin_accuracy) <= GPU_ACCURACY_TOLERANCE
    return accuracy == twin_accuracy


def identity_arms(records: Sequence[RunRecord]) -> NoiseFloor | None:
    """The arms of `records` whose runs repeat a baseline run of the same seed and run length (``max_duration``)
    under another budget's name with the same final accuracy and FLOPs (`_twins`; two such pairs or more, and
    none that differs), and their time ratios; None where there is none. Same-budget arms are never identities: a method
    that changes how (not what) the machine computes, channels_last say, may give the same numbers, and its time
    difference is its effect."""
    base = {
        (r.seed, r.params.get("max_duration"), r.family_hash): r
        for r in records
        if r.arm == "baseline" and not r.cycles
    }
    by_arm: dict[str, list[RunRecord]] = defaultdict(list)
    for record in records:
        if record.arm != "baseline" and not record.cycles:
            by_arm[record.arm].append(record)
    ratios: list[tuple[str, int, float]] = []  # (the arm's budget, seed, ratio): `NoiseFloor.ratios`
    elsewhere: list[tuple[str, int, float]] = []  # the same, each pair on two machines
    arms, machines, on_gpu = [], set(), False
    for arm, runs in sorted(by_arm.items()):
        pairs, gpu = [], False
        for run in runs:
            twin = base.get((run.seed, run.params.get("max_duration"), run.family_hash))
            if twin is None or twin.budget == run.budget:
                continue  # nothing the baseline ran for as long under another budget's name
            times = twin.metrics.get("final/train_s"), run.metrics.get("final/train_s")
            if not _twins(run, twin) or not times[0] or not times[1]:
                break  # one run that differs: the arm computes something else
            pairs.append((run, twin, times[0] / times[1]))
            gpu = gpu or _on_gpu(run, twin)
        else:
            if len(pairs) >= 2:
                arms.append(arm)
                on_gpu = on_gpu or gpu
                for run, twin, ratio in pairs:
                    one = same_machine((run, twin)) is not None
                    (ratios if one else elsewhere).append((run.budget, run.seed, ratio))
                    if not one:
                        machines.add(f"{run.params.get('device_name', '?')} against the baseline's "
                                     f"{twin.params.get('device_name', '?')}")  # fmt: skip
    if not arms:
        return None
    ratios.sort(key=_by_budget)
    elsewhere.sort(key=_by_budget)
    return NoiseFloor(tuple(arms), tuple(ratios), on_gpu, tuple(elsewhere), "; ".join(sorted(machines)))


def _by_budget(pair: tuple[str, int, float]) -> tuple[float, int]:
    return budget_value(pair[0]), pair[1]
