"""How busy the rest of the machine was while we measured: other processes' CPU time and VM steal time.

Read from Linux's /proc/stat (all CPUs' busy and steal ticks) and this process's own CPU time over
the measurement. `busy_pct` is the share of all cores' time that *other* processes used; `steal_pct`
the share the hypervisor gave to other guests. Above `BUSY_PCT` (either) the figures are reported as
unreliable. Where /proc/stat does not exist (macOS, Windows) both are None: unknown, not zero.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

STAT = Path("/proc/stat")
BUSY_PCT = 15.0  # other processes (or steal) above this share of all cores: the host was busy


def _cpu_ticks() -> tuple[float, float] | None:
    """(busy, steal) seconds summed over all CPUs since boot, or None where unknown."""
    try:
        fields = STAT.read_text().splitlines()[0].split()[1:]
    except OSError:
        return None
    ticks = [int(v) for v in fields]
    hz = os.sysconf("SC_CLK_TCK")
    user, nice, system, _idle, _iowait, irq, softirq = ticks[:7]
    steal = ticks[7] if len(ticks) > 7 else 0
    return (user + nice + system + irq + softirq) / hz, steal / hz


def _own_cpu() -> float:
    times = psutil.Process().cpu_times()
    return times.user + times.system + times.children_user + times.children_system


@dataclass(frozen=True)
class HostLoad:
    """Other processes' and the hypervisor's share of the machine during a measurement, in percent."""

    busy_pct: float | None
    steal_pct: float | None
    seconds: float

    @property
    def busy(self) -> bool:
        return any(v is not None and v > BUSY_PCT for v in (self.busy_pct, self.steal_pct))

    def note(self) -> str | None:
        """A sentence for the user when the host was busy, else None."""
        if not self.busy:
            return None
        parts = [
            f"other processes used {self.busy_pct:.0f}% of the CPU" if self.busy_pct is not None else "",
            f"the hypervisor stole {self.steal_pct:.0f}%"
            if self.steal_pct is not None and self.steal_pct > BUSY_PCT
            else "",
        ]
        return (
            f"The host was busy while this was measured ({', '.join(p for p in parts if p)}): "
            "the timings are unreliable; measure again when the machine is quiet."
        )


class HostMonitor:
    """Context manager: `with HostMonitor() as m: ...` then `m.result` is a `HostLoad`."""

    def __init__(self) -> None:
        self.result = HostLoad(None, None, 0.0)

    def __enter__(self) -> HostMonitor:
        self._start = time.monotonic(), _cpu_ticks(), _own_cpu()
        return self

    def __exit__(self, *exc: object) -> None:
        wall0, ticks0, own0 = self._start
        wall, ticks, own = time.monotonic() - wall0, _cpu_ticks(), _own_cpu() - own0
        if ticks0 is None or ticks is None or wall <= 0:
            self.result = HostLoad(None, None, wall)
            return
        capacity = wall * (os.cpu_count() or 1)
        others = max(0.0, (ticks[0] - ticks0[0]) - own)
        steal = max(0.0, ticks[1] - ticks0[1])
        self.result = HostLoad(round(100 * others / capacity, 1), round(100 * steal / capacity, 1), wall)


class CoreWatch:
    """Other processes' busy cores, sampled in a daemon thread every `interval` seconds: `busy_cores()`
    answers at once (the most seen over the last `window` samples, so a core another process takes shows
    within a second), at the cost of reading /proc/stat a few times a second. None where it cannot be read.
    """

    def __init__(self, interval: float = 0.25, window: int = 4):
        self.interval, self.window = interval, window
        self._samples: list[float] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def _sample(self, seconds: float) -> float | None:
        """Other processes' busy cores over the next `seconds`."""
        wall0, ticks0, own0 = time.monotonic(), _cpu_ticks(), _own_cpu()
        time.sleep(seconds)
        wall, ticks, own = time.monotonic() - wall0, _cpu_ticks(), _own_cpu() - own0
        if ticks0 is None or ticks is None or wall <= 0:
            return None
        return max(0.0, (ticks[0] - ticks0[0]) - own) / wall

    def _loop(self) -> None:
        while True:
            busy = self._sample(self.interval)
            if busy is None:
                return
            with self._lock:
                self._samples = [*self._samples, busy][-self.window :]

    def busy_cores(self) -> float | None:
        """How many cores other processes kept busy lately (a first call waits one short sample)."""
        with self._lock:
            samples = list(self._samples)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="studio-core-watch", daemon=True)
                self._thread.start()
        if not samples:
            first = self._sample(0.1)
            return first
        return max(samples)


CORE_WATCH = CoreWatch()
