"""A stored study as the reading commands see it: a trial whose attributes have another type than engine-tuner
writes (search.record.STORED_TYPES) is left out of every read, with one note naming the study, the trial,
the attribute and what was expected; the rest of the study reads as usual."""
from __future__ import annotations

import sys
from collections.abc import Callable, Container

import optuna
from optuna.trial import FrozenTrial, TrialState

from ..store.optuna_private import storage_of
from ..store.storage import load_study
from .record import STUDY_STORED_TYPES, stored_fault


def _stderr_note(line: str) -> None:
    print(f"note: {line}", file=sys.stderr)


class CheckedStudy(optuna.Study):
    """The same study (storage, sampler, attributes); its trial reads leave out the trials of another shape.
    `left_out`: trial number -> the fault, each said once through `note`."""

    def __init__(self, study: optuna.Study, note: Callable[[str], None] = _stderr_note):
        super().__init__(study_name=study.study_name, storage=storage_of(study), sampler=study.sampler,
                         pruner=study.pruner)
        self.left_out: dict[int, str] = {}
        self.left_out_attrs: set[str] = set()
        self._note = note

    def _get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None,
                    use_cache: bool = False) -> list[FrozenTrial]:
        return [t for t in super()._get_trials(deepcopy, states, use_cache) if self._readable(t)]

    @property
    def user_attrs(self) -> dict:
        """The study's attributes, one of another type than engine-tuner writes left out (said once)."""
        attrs = super().user_attrs
        while (fault := stored_fault(attrs, STUDY_STORED_TYPES)) is not None:
            key, words = fault
            attrs = {k: v for k, v in attrs.items() if k != key}
            if key not in self.left_out_attrs:
                self.left_out_attrs.add(key)
                self._note(f"study {self.study_name}: {words}; it is left out (written by another tool or version, "
                           "or edited by hand)")
        return attrs

    def fault_of(self, number: int) -> str | None:
        """Why trial `number` is left out of the reads, or None (a command that needs it refuses)."""
        self._get_trials(deepcopy=False)
        return self.left_out.get(number)

    def _readable(self, t: FrozenTrial) -> bool:
        if t.number in self.left_out:
            return False
        fault = stored_fault(t.user_attrs)
        if fault is None:
            return True
        self.left_out[t.number] = fault = fault[1]
        self._note(f"study {self.study_name}, trial {t.number}: {fault}; the trial is left out "
                   f"(written by another tool or version, or edited by hand)")
        return False


def load_checked(name: str, url: str, reading: bool = False) -> CheckedStudy:
    """store.storage.load_study, its trials checked as they are read."""
    return CheckedStudy(load_study(name, url, reading))
