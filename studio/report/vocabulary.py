"""The shared vocabulary: every key a run's record has, with its unit and meaning, in CSV column order."""

from __future__ import annotations

from studio.measure.host import BUSY_PCT

# key -> (unit, meaning). The order is the order of CSV columns.
KEYS: dict[str, tuple[str, str]] = {
    "run_id": ("", "the run's id in the run log"),
    "config": (
        "",
        "the configuration: technique names joined by '+', each with the settings given for it in brackets "
        "('deepcache[interval=2]'), or 'baseline'; Compare accepts configurations written this way",
    ),
    "loras": (
        "",
        "the LoRAs the run was drawn with, each {name, scale, hash} (the hash as AUTOMATIC1111 writes it); "
        "none: an empty list",
    ),
    "lora_switch_s": ("s", "the time to put the run's LoRAs on the pipeline (null: they were on it already)"),
    "status": ("", "ok, failed, cancelled, interrupted, running or skipped"),
    "applied": ("", "the techniques actually applied, in order"),
    "latency_s": ("s", "median wall time of one pipeline call, all its images (warm-ups excluded)"),
    "latency_spread_s": ("s", "max - min of the timed calls"),
    "rounds": ("", "timed calls (one per interleaved round in a sweep)"),
    "speedup": ("x", "median over rounds of baseline time / this configuration's time, same round"),
    "speedup_min": ("x", "lowest per-round speedup the verdict reads (from 5 rounds, the extreme left out)"),
    "speedup_max": ("x", "highest per-round speedup the verdict reads (from 5 rounds, the extreme left out)"),
    "verdict": ("", "faster, slower or within noise (from the per-round range); baseline for the baseline"),
    "steps_per_s": ("1/s", "denoising steps per second at the median latency"),
    "batch": ("images", "images per pipeline call (the batch size; latency_s is per call)"),
    "seconds_per_image": ("s", "latency_s / batch"),
    "images_per_s": ("1/s", "images per second at the median latency (throughput)"),
    "first_call_s": ("s", "the first call's time (it pays for traces and compiles)"),
    "first_call_phase": (
        "",
        "what the run paid for its techniques' prepared work: cold (compiled, converted or calibrated now), "
        "warm (rebuilt from this machine's caches) or package (a compiled package loaded); null: nothing to "
        "prepare, or prepared by an earlier run",
    ),
    "prepare_s": ("s", "of the run's calls, the seconds spent preparing in the phase above"),
    "pays_off_after": ("images", "after how many images the first call's extra cost is repaid"),
    "recompiles": ("", "graphs traced or compiled for this pipeline so far"),
    "steps_reused_pct": (
        "%",
        "of the denoiser's calls in the run's last pipeline call, those whose output a step cache reused "
        "instead of computing (first_block_cache); null without one",
    ),
    "peak_memory_mb": (
        "MB",
        "peak memory of the process during a call: CUDA allocator peak, or peak RSS on CPU (all the process "
        "holds, the other pipelines it keeps loaded included)",
    ),
    "run_memory_mb": (
        "MB",
        "memory this run itself needed: its pipeline's weights on the device when the call started plus the "
        "median of what its calls added above the memory in use (activations); unlike peak_memory_mb it "
        "leaves out the other pipelines the process holds; null for runs logged before the weights were "
        "recorded",
    ),
    "weights_mb": ("MB", "of run_memory_mb, its pipeline's weights on the device when the call started"),
    "memory_kind": ("", "cuda_allocated (exact) or cpu_rss (process resident set, coarse)"),
    "memory_change_mb": (
        "MB",
        "memory a configuration needs (its pipeline's weights on the device when the call starts, plus "
        "what the call adds above the memory in use), minus the baseline's; "
        "null below what the probe resolves",
    ),
    "memory_note": ("", "'no measurable difference' when memory_change_mb is null against a baseline"),
    "psnr_db": ("dB", "image difference from the baseline's image (null: identical or no baseline)"),
    "ssim": ("", "structural similarity to the baseline's image, 1 = identical"),
    "fidelity": ("", "tiny-shapes: share of the prompt's colour, shape and position the image shows"),
    "prompt_score": (
        "points",
        "how well the first image shows its prompt, 0-100: the CLIP score (100 × the cosine of CLIP's image "
        "and prompt embeddings, floored at 0), or on a model with its own judge (tiny-shapes) 100 × "
        "fidelity; null when there is no scorer (prompt_score_note says why)",
    ),
    "prompt_score_by": (
        "",
        "what scored it: 'clip:<model id>' or 'fidelity judge'; scores of different scorers do not compare",
    ),
    "prompt_score_change": (
        "points",
        "prompt_score minus the baseline's (same scorer); null without a baseline's score",
    ),
    "prompt_score_note": ("", "why prompt_score is null, as a sentence ('no CLIP model: ...')"),
    "host_busy_pct": ("%", "share of all cores other processes used while this was measured"),
    "host_steal_pct": ("%", "share of CPU time the hypervisor gave to other guests meanwhile"),
    "host_busy": (
        "",
        f"true when either of the two above exceeded {BUSY_PCT:g}%: the figures are unreliable",
    ),
    "warmup_unsettled": ("", "true when the first timed call was much slower than the rest"),
    "cpu_threads": (
        "",
        "torch's CPU threads the run used: the cores free at request time (a sweep decides once for all its "
        "configurations), or what the threads technique set; null off the CPU",
    ),
    "device": ("", "the device the run used"),
    "seed": ("", "the seed of the run"),
    "image_path": ("", "where the first image was saved"),
    "warnings": ("", "sentences the user should read"),
    "error": ("", "why the run failed or was cancelled"),
}


def docs_table() -> str:
    """The keys as a Markdown table for docs/api.md."""
    lines = ["| key | unit | meaning |", "|---|---|---|"]
    lines += [f"| `{k}` | {unit or '–'} | {meaning} |" for k, (unit, meaning) in KEYS.items()]
    return "\n".join(lines)
