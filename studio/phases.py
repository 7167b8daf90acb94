"""Which phase a first call paid for what a technique prepares (compiles, converts, calibrates), and how long.

A technique that prepares something before it can run (torch.compile's graphs, an OpenVINO model, a compiled
package) says which of three phases it paid, each time it pays one, with `record`:

- "cold": compiled, converted or calibrated now, from nothing kept;
- "warm": rebuilt from this machine's caches (inductor's cache and torch's compile-cache artifacts, OpenVINO's
  cached conversions and compiled blobs): faster than cold, still work done in this process;
- "package": a compiled package loaded as it is (an AOTInductor package): no compile at all.

The events sit in the pipeline's stats (`PHASES`), each with the wall-clock time it was recorded at, so the
engine can say which of them a run paid (`since`) and sum them up (`summary`): a first call is as slow as its
slowest phase, so "cold" wins over "warm", and "warm" over "package".
"""

from __future__ import annotations

import time
from typing import Any

COLD, WARM, PACKAGE = "cold", "warm", "package"
ORDER = (COLD, WARM, PACKAGE)  # the slowest first
PHASES = "phases"  # the stats key of the list of events
# The techniques whose first call prepares something (and records a phase), with what it does.
PREPARING = {
    "torch_compile": "compiles the denoiser (torch.compile)",
    "aot_package": "compiles the denoiser into a package (AOTInductor), unless one is kept",
    "jit_trace_unet": "traces the UNet (torch.jit.trace)",
    "openvino": "converts the model to OpenVINO and compiles it, unless its cache has it",
    "int8_static": "calibrates and converts the UNet to int8",
}
MEANING = {
    COLD: "compiled, converted or calibrated now",
    WARM: "rebuilt from this machine's caches",
    PACKAGE: "loaded compiled",
}


def record(
    stats: dict[str, Any], *, technique: str, phase: str, seconds: float, what: str, note: str = ""
) -> None:
    """Add one event to a pipeline's stats: `technique` paid `phase` for `seconds` preparing `what`
    ("the UNet at 2x4x32x32"); `note`: a sentence the run's warnings carry (why a kept package or cache
    could not be used and the work was done again)."""
    if phase not in ORDER:
        raise ValueError(f"unknown phase {phase!r}; one of {', '.join(ORDER)}")
    stats.setdefault(PHASES, []).append(
        {
            "technique": technique,
            "phase": phase,
            "seconds": round(float(seconds), 4),
            "what": what,
            **({"note": note} if note else {}),
            "at": time.time(),
        }
    )


def since(events: list[dict[str, Any]], start: float) -> list[dict[str, Any]]:
    """Of a pipeline's events (`stats[PHASES]`), those recorded at or after `start` (a `time.time()`), oldest
    first, without their timestamps."""
    return [{k: v for k, v in e.items() if k != "at"} for e in events if e["at"] >= start]


def summary(events: list[dict[str, Any]]) -> tuple[str | None, float | None]:
    """(the slowest phase among `events`, the seconds all of them took), or (None, None) without events."""
    if not events:
        return None, None
    phase = min((e["phase"] for e in events), key=ORDER.index)
    return phase, round(sum(e["seconds"] for e in events), 3)
