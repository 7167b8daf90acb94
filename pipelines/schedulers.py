"""The schedulers a request may name, as diffusers class names: importable without diffusers (validation
checks names with it; the loader resolves the classes)."""

from __future__ import annotations

from typing import Any

# name -> (diffusers scheduler class name, or None for the pipeline's own; config overrides)
SCHEDULERS: dict[str, tuple[str | None, dict[str, Any]]] = {
    "default": (None, {}),
    # diffusers' DDIM clips its predicted clean sample to [-1, 1] unless a config says otherwise: right for
    # pixel-space models, wrong for latents (SD's own config turns it off; the bundled model's DPM-Solver
    # config has no such key, and with the default its images lost their shapes and colours)
    "ddim": ("DDIMScheduler", {"clip_sample": False}),
    "euler": ("EulerDiscreteScheduler", {}),
    "euler_a": ("EulerAncestralDiscreteScheduler", {}),
    "dpmpp_2m": ("DPMSolverMultistepScheduler", {"algorithm_type": "dpmsolver++"}),
    "unipc": ("UniPCMultistepScheduler", {}),
    # PLMS, as SD's own scheduler config and AUTOMATIC1111 run it: without its Runge-Kutta warm-up steps
    # (with them a call needs 4 steps or more, and is not PLMS)
    "pndm": ("PNDMScheduler", {"skip_prk_steps": True}),
    "lms": ("LMSDiscreteScheduler", {}),
    # the schedulers few-step adapters were distilled for (`pipelines.distilled`)
    "lcm": ("LCMScheduler", {}),
    # LCM over a 10-step original schedule: what the bundled model's few-step adapter was distilled on
    "lcm_10": ("LCMScheduler", {"original_inference_steps": 10}),
    "tcd": ("TCDScheduler", {}),
    "euler_trailing": ("EulerDiscreteScheduler", {"timestep_spacing": "trailing"}),
    "ddim_trailing": ("DDIMScheduler", {"clip_sample": False, "timestep_spacing": "trailing"}),
}

# name -> the sampler's name in AUTOMATIC1111's `parameters` text (what its users read and paste)
A1111_SAMPLERS: dict[str, str] = {
    "ddim": "DDIM",
    "euler": "Euler",
    "euler_a": "Euler a",
    "dpmpp_2m": "DPM++ 2M",
    "unipc": "UniPC",
    "pndm": "PLMS",
    "lms": "LMS",
    "lcm": "LCM",
}


def fresh_scheduler(scheduler: Any, steps: int) -> Any:
    """A new scheduler of `scheduler`'s type and config, its timesteps set for `steps` (the one given is left
    as it was). Flow matching with a dynamic shift wants the pipeline's `mu` (from the image's size): it gets
    a neutral one, which moves the timesteps but not their count."""
    fresh = type(scheduler).from_config(scheduler.config)
    if fresh.config.get("use_dynamic_shifting"):
        fresh.set_timesteps(steps, mu=0.0)
    else:
        fresh.set_timesteps(steps)
    return fresh


def denoiser_calls(scheduler: Any, steps: int) -> int:
    """How many times a diffusers pipeline's loop calls the denoiser for `steps` steps with `scheduler`: once
    per entry of the timesteps it sets (PNDM's PLMS steps + 1 times, Heun's 2 * steps - 1)."""
    return len(fresh_scheduler(scheduler, steps).timesteps)


def steps_refused(scheduler: Any, steps: int) -> str | None:
    """Why `scheduler` cannot take `steps` steps (its own message), or None. A scheduler that cannot set its
    timesteps outside its pipeline at all is not refused here: only a failure at `steps` that 50 steps do not
    share is about the step count."""
    try:
        fresh_scheduler(scheduler, steps)
    except (ValueError, IndexError) as exc:
        try:
            fresh_scheduler(scheduler, 50)
        except (ValueError, IndexError):
            return None
        return str(exc)
    return None


def menu_choices() -> list[tuple[str, str]]:
    """(label, name) of each scheduler for a menu: the sampler as AUTOMATIC1111's users know it, with the name
    the CLI and the API take."""
    return [
        ("Model's own", name) if name == "default" else (f"{A1111_SAMPLERS.get(name, name)} ({name})", name)
        for name in SCHEDULERS
    ]
