"""Shared plumbing for the training scripts: run folder, image cache, checkpoints, LR schedule."""

from __future__ import annotations

import logging
import math
import os
import random
import time
from pathlib import Path

import numpy as np
import torch

from .dataset import make_specs, render_array

logger = logging.getLogger(__name__)

RUNS_DIR = Path(__file__).resolve().parent / "runs"


def cached_images(count: int, seed: int, runs_dir: Path = RUNS_DIR) -> tuple[np.ndarray, list]:
    """Render (or load from the run folder) ``count`` seeded scenes; returns (uint8 images, specs)."""
    specs = make_specs(count, seed)
    path = runs_dir / f"images_{count}_{seed}.npy"
    if path.exists():
        return np.load(path), specs
    runs_dir.mkdir(parents=True, exist_ok=True)
    logger.info("rendering %d images (seed %d)", count, seed)
    images = render_array(specs)
    np.save(path, images)
    return images, specs


def to_tensor(images: np.ndarray) -> torch.Tensor:
    """uint8 (N, H, W, 3) -> float (N, 3, H, W) in [-1, 1]."""
    return torch.from_numpy(images).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)


def cosine_lr(step: int, total: int, peak: float, warmup: int, floor: float = 0.05) -> float:
    """Linear warm-up then cosine decay to ``floor * peak``."""
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * frac)))


def save_checkpoint(path: Path, state: dict) -> None:
    """Atomically write a checkpoint (with the RNG states) to ``path``."""
    state = dict(state)
    state["rng"] = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def load_checkpoint(path: Path) -> dict | None:
    """Load a checkpoint and restore the RNG states; None when there is none."""
    if not path.exists():
        return None
    state = torch.load(path, weights_only=False)
    torch.set_rng_state(state["rng"]["torch"])
    np.random.set_state(state["rng"]["numpy"])
    random.setstate(state["rng"]["python"])
    logger.info("resumed from %s at step %d", path, state["step"])
    return state


def ema_update(ema: torch.nn.Module, model: torch.nn.Module, decay: float) -> None:
    """ema <- decay * ema + (1 - decay) * model, parameter by parameter."""
    with torch.no_grad():
        for e, p in zip(ema.parameters(), model.parameters(), strict=True):
            e.lerp_(p, 1.0 - decay)


class ThreadGovernor:
    """Use 2 threads when the other processes leave the CPU idle, 1 when they are busy.

    A niced 2-thread torch job stalls at every parallel barrier when another process holds
    one core, so under contention one thread is much faster; alone, two are faster.
    """

    def __init__(self, max_threads: int = 2) -> None:
        # never more threads than the cores this process may run on (``taskset -c 1`` -> 1)
        self.max_threads = min(max_threads, len(os.sched_getaffinity(0)))
        self._last = self._sample()
        torch.set_num_threads(1)  # start safe; update() raises it when the CPU turns out to be free

    @staticmethod
    def _sample() -> tuple[float, float, float]:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        values = [float(v) for v in fields]
        busy, total = sum(values) - values[3] - values[4], sum(values)
        own = sum(float(v) for v in Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[11:13])
        return busy, total, own

    def update(self) -> int:
        """Re-decide the thread count from the CPU use of others since the last call."""
        now = self._sample()
        busy, total, own = (a - b for a, b in zip(now, self._last, strict=True))
        self._last = now
        cores = os.cpu_count() or 1
        others = (busy - own) / max(total, 1e-9) * cores
        threads = self.max_threads if others < 0.35 else 1
        if threads != torch.get_num_threads():
            torch.set_num_threads(threads)
            logger.info("other processes use %.1f cores: training with %d thread(s)", others, threads)
        return threads


def refit_total(step: int, start: int, t0: float, deadline: float, reserve: float = 0.0) -> int:
    """Total step count that ends at ``deadline`` at the rate seen since ``t0`` (``reserve`` s kept free)."""
    now = time.perf_counter()
    rate = (step - start) / max(now - t0, 1e-9)
    left = max(0.0, deadline - now - reserve)
    return max(step + 1, step + int(rate * left))
