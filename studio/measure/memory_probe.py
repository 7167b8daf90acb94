"""Peak memory of one run: the CUDA allocator's peak on GPUs, the process's peak RSS on CPU.

On Linux the kernel's peak-RSS mark (VmHWM) is reset before each run by writing 5 to
/proc/self/clear_refs, so one run's peak does not leak into the next. Where that is not
possible a sampling thread records the highest RSS it sees.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import psutil
import torch

_STATUS = Path("/proc/self/status")
_CLEAR = Path("/proc/self/clear_refs")


def _vm_hwm() -> int:
    match = re.search(r"VmHWM:\s+(\d+)\s+kB", _STATUS.read_text())
    return int(match.group(1)) * 1024 if match else 0


def _can_reset_hwm() -> bool:
    try:
        _CLEAR.write_text("5")
    except OSError:
        return False
    return _STATUS.exists()


def weight_bytes(pipe: Any, device: str | None = None) -> int:
    """Bytes of the parameters and buffers of a pipeline's torch modules (each tensor once), or of those on
    `device` only: what of the pipeline is resident there before a call (none of an offloaded one's)."""
    where = None if device is None else torch.device(device)
    seen: dict[tuple[torch.device, int], int] = {}
    for module in (m for m in vars(pipe).values() if isinstance(m, torch.nn.Module)):
        for t in (*module.parameters(), *module.buffers()):
            if where is None or _same_device(t.device, where):
                seen[(t.device, t.data_ptr())] = t.numel() * t.element_size()
    return sum(seen.values())


def _same_device(have: torch.device, want: torch.device) -> bool:
    return have.type == want.type and (want.index is None or have.index == want.index)


def rss() -> int:
    """Resident memory of this process now, in bytes."""
    return psutil.Process().memory_info().rss


class PeakMemory:
    """Context manager measuring the peak memory of the block on `device`.

    After the block: `peak` (bytes at the peak), `baseline` (bytes before), `kind`.
    """

    def __init__(self, device: str):
        self.device = device
        self.kind = "cuda_allocated" if device.startswith("cuda") else "cpu_rss"
        self.peak = 0
        self.baseline = 0
        self._sampler: threading.Thread | None = None
        self._stop = threading.Event()

    def __enter__(self) -> PeakMemory:
        if self.kind == "cuda_allocated":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.baseline = torch.cuda.memory_allocated(self.device)
        elif _can_reset_hwm():
            self.baseline = rss()
        else:
            self.baseline = self.peak = rss()
            self._sampler = threading.Thread(target=self._sample, daemon=True)
            self._sampler.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, rss())

    def __exit__(self, *exc: object) -> None:
        if self.kind == "cuda_allocated":
            torch.cuda.synchronize(self.device)
            self.peak = torch.cuda.max_memory_allocated(self.device)
        elif self._sampler is None:
            self.peak = _vm_hwm()
        else:
            self._stop.set()
            self._sampler.join()

    @property
    def added(self) -> int:
        """How far the peak rose above the memory in use when the block started."""
        return max(0, self.peak - self.baseline)
