"""Where a sweep is while it runs: configuration k of n, warm-up or round r of R, denoising step s of S.

`Tracker` follows the interleaved protocol's calls (`before`) and the engine's steps (`on_step`) and reports
each change to the sweep's progress callback as (calls done, with the current call's share of its steps;
calls in all; where it is in words). It also remembers where the sweep was and why it stopped, for the
summary of a cancelled sweep (`studio.sweeps.runner.SweepCancelled`).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from studio.measure.bench import StopFn

# (calls done, counting the current call's finished steps as a fraction; calls in all; where, in words)
Progress = Callable[[float, int, str], None]


@dataclass(frozen=True)
class Position:
    """One call of a sweep: its index among the calls (`call` of `calls`, from 0), its configuration
    (`index` of `count`, from 1), its phase (`number` of `of` warm-ups or rounds) and the denoising step
    reached (0 of 0 before the first)."""

    call: int
    calls: int
    index: int
    count: int
    label: str
    phase: str  # "warmup" or "round"
    number: int
    of: int
    step: int = 0
    steps: int = 0

    @property
    def phase_text(self) -> str:
        """'round 2 of 3' or 'warm-up 1 of 1'."""
        return f"{'warm-up' if self.phase == 'warmup' else 'round'} {self.number} of {self.of}"

    def text(self) -> str:
        """'configuration 2 of 3 (channels_last), round 1 of 3, step 7 of 20'."""
        where = f"configuration {self.index} of {self.count} ({self.label}), {self.phase_text}"
        return where + (f", step {self.step} of {self.steps}" if self.steps else "")

    @property
    def done(self) -> float:
        """Calls done, the current one counted by its finished steps."""
        return self.call + (self.step / self.steps if self.steps else 0.0)


class Tracker:
    """Follows one sweep's calls and steps for its progress callback; remembers where it was and why it was
    told to stop."""

    def __init__(
        self,
        labels: list[str],
        warmup: int,
        rounds: int,
        progress: Progress | None,
        should_stop: StopFn | None,
    ):
        self.index = {label: i + 1 for i, label in enumerate(labels)}
        self.warmup, self.rounds = warmup, rounds
        self.calls = len(labels) * (warmup + rounds)
        self.progress, self._should_stop = progress, should_stop
        self.started: Counter[tuple[str, str]] = Counter()
        self.where: Position | None = None
        self.reason: str | None = None

    def before(self, phase: str, label: str) -> None:
        """The protocol is about to make `label`'s next `phase` call."""
        self.started[phase, label] += 1
        self.where = Position(
            call=sum(self.started.values()) - 1,
            calls=self.calls,
            index=self.index[label],
            count=len(self.index),
            label=label,
            phase=phase,
            number=self.started[phase, label],
            of=self.warmup if phase == "warmup" else self.rounds,
        )
        self._report()

    def on_step(self, step: int, steps: int) -> None:
        """The engine finished denoising step `step` of `steps` of the current call."""
        if self.where is not None:
            self.where = dataclasses.replace(self.where, step=step, steps=steps)
            self._report()

    @property
    def stops(self) -> bool:
        """Whether the sweep has a stop check at all."""
        return self._should_stop is not None

    def should_stop(self) -> str | bool | None:
        """The sweep's stop check, remembering why it said stop."""
        why = self._should_stop() if self._should_stop is not None else None
        if why:
            self.reason = why if isinstance(why, str) else "stopped"
        return why

    def _report(self) -> None:
        if self.progress is not None and self.where is not None:
            self.progress(self.where.done, self.calls, self.where.text())
