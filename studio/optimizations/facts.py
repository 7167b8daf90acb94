"""What a technique declares about itself beyond applying it, read by the layers above from the registry:

- `autotune`: whether the auto-tuner tries it ("candidate"), only when asked to include techniques that
  take minutes to prepare ("slow_to_prepare"), or never ("excluded");
- `grid`: the settings the auto-tuner searches for it, in order (`DEFAULTS_ONLY`: its defaults alone), or a
  function giving them where they depend on the machine (the CPU's core counts);
- `presets`: Compare's ready-made configurations that show it off, each with its place in Compare's list;
- `ladder_rung`: the rung of the documentation's speed ladder that adds it, or None;
- `memory_effect`: how it changes the peak memory the estimate predicts before a run (`NO_MEMORY_EFFECT`).

Every registered technique declares each of them, even as "none" (`register` refuses one that does not), so
a new technique cannot be left out of a table by forgetting it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Autotune = Literal["candidate", "excluded", "slow_to_prepare"]
Points = tuple[dict[str, Any], ...]
Grid = Points | Callable[[], Points]
DEFAULTS_ONLY: Points = ({},)  # a grid of one point: the technique's default settings


@dataclass(frozen=True)
class Preset:
    """A ready-made Compare configuration: `techniques` together, shown at `position` among all the
    techniques' presets (declared by the technique it shows off, which it names last)."""

    position: int
    techniques: tuple[str, ...]

    @property
    def label(self) -> str:
        """The configuration as Compare and the API write it: 'bf16,channels_last'."""
        return ",".join(self.techniques)


@dataclass(frozen=True)
class LadderRung:
    """The speed-ladder rung that adds the technique: its place (rungs run in `position` order), its words,
    what it adds instead where the technique cannot run here (`fallback`), and what it takes away of the
    rungs before it (`remove`; `replaces_conflicts`: everything the technique conflicts with)."""

    position: int
    label: str
    fallback: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()
    replaces_conflicts: bool = False


@dataclass(frozen=True)
class MemoryEffect:
    """How a technique changes a run's peak memory, as the estimate models it:

    - `gpu_weights`: which weights sit on the GPU during the run: "all", the largest model only (model
      offload), one layer at a time (sequential offload), or an even share per GPU (a device map);
    - `decodes`: what the VAE decodes at once: the whole "batch", "one_image" (slicing), "one_tile" (tiling);
    - `remedy`: offered, alone or in pairs, when a run is predicted not to fit on its GPU.
    """

    gpu_weights: Literal["all", "largest_model", "one_layer", "split_over_gpus"] = "all"
    decodes: Literal["batch", "one_image", "one_tile"] = "batch"
    remedy: bool = False


NO_MEMORY_EFFECT = MemoryEffect()


class _Undeclared:
    """The default of a fact a technique did not declare (`Optimization.undeclared` names them)."""

    def __repr__(self) -> str:
        return "UNDECLARED"


UNDECLARED: Any = _Undeclared()
# Each fact, and what a technique that is not registered (a test's stand-in) is taken to declare.
NEUTRAL: dict[str, Any] = {
    "autotune": "candidate",
    "grid": DEFAULTS_ONLY,
    "presets": (),
    "ladder_rung": None,
    "memory_effect": NO_MEMORY_EFFECT,
}
FACTS = tuple(NEUTRAL)


def points(grid: Grid) -> list[dict[str, Any]]:
    """A grid's settings, in order (a function's, computed now)."""
    return [dict(p) for p in (grid() if callable(grid) else grid)]
