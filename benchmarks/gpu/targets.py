"""The speed targets and the best configurations: what was measured, held to the targets it is for.

- sd15-arch, 512x512, 50 steps: the best configuration that keeps the math takes <= 0.35 s per image and is
  >= x5 faster than fp32 (the ladder's speedup, from the same interleaved rounds as its fp32 rung);
- sdxl-arch, 1024x1024, 30 steps: the best configuration that keeps the math takes <= 1.0 s per image;
- flux-arch, 1024x1024, 28 steps (Flux.1-dev's shapes): the best that keeps the math <= 3.5 s per image; the
  best without a step cache (fp8 matmuls allowed) <= 2.9 s, the public torch.compile + fp8 recipe's time on an
  H100; the best of any configuration (fp8 and a step cache) <= 2.0 s. Those that change the image say by how
  much (PSNR against bf16), and a step cache how many steps it reused.

A target is met or not met only when it was measured as it is stated (that model, size and steps, on a GPU);
otherwise `met` is None and the note says what was measured instead (the dry run, a section not run).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchmarks.gpu.results import Results, is_peak

# Techniques that keep the math (precision, layout, kernels, compilation, placement), as opposed to those that
# approximate it (caches, skipped guidance, merged tokens, int8/fp8): the targets are for configurations made
# of these only. A technique not listed here counts as an approximation.
KEEPS_MATH = frozenset(
    {
        "classic_attention",
        "sdpa",
        "xformers",
        "attention_slicing",
        "fused_qkv",
        "attention_backend",
        "channels_last",
        "jit_trace_unet",
        "torch_compile",
        "vae_slicing",
        "vae_tiling",
        "model_cpu_offload",
        "sequential_cpu_offload",
        "device_map_balanced",
        "group_offload",
        "fp16",
        "bf16",
        "tf32",
        "cudnn_benchmark",
        "autocast",
        "threads",
    }
)


# Techniques that skip computation from one denoising step to the next (reuse features or outputs)
STEP_CACHES = frozenset(
    {"deepcache", "first_block_cache", "pyramid_attention_broadcast", "faster_cache", "taylorseer_cache"}
)


def keeps_math(optimizations: list[str] | tuple[str, ...]) -> bool:
    """Whether a configuration computes the same function (up to precision and summation order)."""
    return set(optimizations) <= KEEPS_MATH


def in_scope(optimizations: list[str] | tuple[str, ...], scope: str) -> bool:
    """Whether a configuration is one a target of `scope` ("keep-math", "no-step-cache" or "any") is for."""
    if scope == "keep-math":
        return keeps_math(optimizations)
    return scope == "any" or not set(optimizations) & STEP_CACHES


@dataclass(frozen=True)
class Target:
    role: str
    model: str
    side: int
    steps: int
    what: str  # "seconds" per image, or "speedup" against fp32
    limit: float
    scope: str = "keep-math"  # or "no-step-cache" (fp8 and the like too), or "any" (step caches too)

    @property
    def stated(self) -> str:
        """The target as a sentence: the model's size and steps, the configuration, the limit."""
        size = f"{self.model} {self.side}x{self.side}, {self.steps} steps"
        which = {
            "keep-math": "best keep-the-math configuration",
            "no-step-cache": "best configuration without a step cache",
            "any": "best configuration (any)",
        }[self.scope]
        if self.what == "seconds":
            return f"{size}: {which} <= {self.limit:.2f} s per image"
        return f"{size}: {which} >= x{self.limit:g} against fp32"


TARGETS = (
    Target("sd15", "sd15-arch", 512, 50, "seconds", 0.35),
    Target("sd15", "sd15-arch", 512, 50, "speedup", 5.0),
    Target("sdxl", "sdxl-arch", 1024, 30, "seconds", 1.0),
    Target("flux", "flux-arch", 1024, 28, "seconds", 3.5),
    Target("flux", "flux-arch", 1024, 28, "seconds", 2.9, scope="no-step-cache"),
    Target("flux", "flux-arch", 1024, 28, "seconds", 2.0, scope="any"),
)


def _ok(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("status") == "ok" and r.get("seconds_per_image")]


def best(
    data: dict[str, Any], role: str, scope: str = "keep-math"
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The fastest record of a role (ladder rungs and techniques) among the configurations of `scope`, and
    the ladder's fp32 rung."""
    ladder = _ok(data["ladder"].get(role, {}).get("rows", []))
    techniques = [
        r
        for r in _ok(data["techniques"].get(role, {}).get("rows", []))
        if in_scope(r.get("applied") or (), scope)
    ]
    pool = ladder + techniques
    fastest = min(pool, key=lambda r: r["seconds_per_image"]) if pool else None
    fp32 = next((r for r in ladder if r.get("step") == "fp32"), None)
    return fastest, fp32


def _value(target: Target, fastest: dict[str, Any], fp32: dict[str, Any] | None) -> tuple[float | None, str]:
    if target.what == "seconds":
        return fastest["seconds_per_image"], ""
    if "step" in fastest and fastest.get("speedup") is not None:
        low, high = fastest.get("speedup_min"), fastest.get("speedup_max")
        return fastest["speedup"], f"range x{low}-x{high}, interleaved with fp32"
    if fp32 is None:
        return None, "no fp32 rung was measured"
    return fp32["seconds_per_image"] / fastest[
        "seconds_per_image"
    ], "against the ladder's fp32 (another sweep)"


def judge(target: Target, data: dict[str, Any], device: str) -> dict[str, Any]:
    """One target against what `data` holds."""
    fastest, fp32 = best(data, target.role, target.scope)
    entry: dict[str, Any] = {"target": target.stated, "role": target.role, "limit": target.limit, "met": None}
    if fastest is None:
        return {**entry, "value": None, "config": None, "note": "not measured in this run"}
    value, note = _value(target, fastest, fp32)
    section = data["ladder"].get(target.role) or data["techniques"].get(target.role)
    as_stated = (section["model"], section["side"], section["steps"]) == (
        target.model,
        target.side,
        target.steps,
    )
    if value is not None and as_stated and device.startswith("cuda"):
        entry["met"] = value <= target.limit if target.what == "seconds" else value >= target.limit
    else:
        measured = (
            f"{section['model']} {section['side']}x{section['side']}, {section['steps']} steps on {device}"
        )
        note = "; ".join(filter(None, [note, f"not the target's conditions: measured {measured}"]))
    if not keeps_math(fastest.get("applied") or ()):
        changed = f"changes the image: PSNR {fastest.get('psnr_db')} dB against the baseline"
        if fastest.get("steps_reused_pct") is not None:
            changed += f"; the step cache reused {fastest['steps_reused_pct']:g}% of the denoiser's calls"
        note = "; ".join(filter(None, [changed, note]))
    return {**entry, "value": value, "config": fastest["config"], "note": note}


def fractions(data: dict[str, Any]) -> None:
    """The fraction of the measured matmul peak that the best configuration of each model reaches."""
    for role, entry in data["compute-limit"].items():
        if is_peak(role):
            continue
        fastest, _ = best(data, role)
        if fastest is not None:
            entry["best_config"] = fastest["config"]
            entry["best_seconds_per_image"] = fastest["seconds_per_image"]
            entry["fraction_of_peak"] = entry["seconds_at_peak"] / fastest["seconds_per_image"]


def judged(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target against `data` (results.json's content), after the compute-limit fractions."""
    fractions(data)
    return [judge(t, data, data["device"]) for t in TARGETS]


def judge_all(results: Results) -> list[dict[str, Any]]:
    """Every target, and the compute-limit fractions, written to the results."""
    targets = judged(results.data)
    results.set("targets", targets)
    return targets
