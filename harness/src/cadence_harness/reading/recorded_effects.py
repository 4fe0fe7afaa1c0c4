"""What a study's methods declare to the composition check, as their runs recorded it.

The recipe search must know which methods may run together and which follow the run's length (a cyclic run
cannot screen those). It reads both from the records' ``effects.<method>`` params (`records.effects_param`)
and applies the core's own rules to them (`cadence.engine.check_declarations`), never from the methods'
classes: a report then reads the same on every machine that has the records, whatever is installed there.
A method whose runs recorded no declaration takes part in no check: it counts as able to run with any other
and as not following the run's length.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from cadence import Resource
from cadence.engine import DeclaredMethod, MethodConflictError, check_declarations
from cadence_harness.records import RunRecord, arm_methods, arm_spellings, recorded_declaration

__all__ = ["RecordedEffects"]


@dataclass(frozen=True)
class RecordedEffects:
    """Each method, as the arms spell it (a variant ``name@label`` apart from its method: its arguments, and so
    what it declares, may differ), with its declaration in its newest run that recorded one."""

    declared: dict[str, DeclaredMethod] = field(default_factory=dict)

    @classmethod
    def of(cls, records: Iterable[RunRecord]) -> RecordedEffects:
        declared: dict[str, DeclaredMethod] = {}
        for record in sorted(records, key=lambda record: record.end_time, reverse=True):
            for name in arm_spellings(record.arm):
                if name not in declared and (found := recorded_declaration(record, name)) is not None:
                    declared[name] = found
        return cls(declared)

    def conflict(self, methods: Sequence[str]) -> str | None:
        """Why `methods` (spelt as in the arms) cannot run together, in the core's words, or None."""
        try:
            check_declarations([self.declared[name] for name in methods if name in self.declared])
        except MethodConflictError as error:
            return str(error)
        return None

    def run_length(self, arm: str) -> list[str]:
        """The methods of `arm` (without their variant labels) whose behaviour follows the elapsed fraction of
        the run: they read `Resource.DURATION`."""
        return [
            method
            for name, method in zip(arm_spellings(arm), arm_methods(arm), strict=True)
            if name in self.declared and Resource.DURATION in self.declared[name].effects.reads
        ]
