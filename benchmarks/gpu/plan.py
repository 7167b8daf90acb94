"""What the GPU benchmark measures and with which numbers: one `Plan` for the GPU and, with `--dry-run`, the
same plan with small numbers on this CPU (the bundled model at 64x64, a few steps, one round).

The dry run is the real code: the same sections, sweeps and records, on `tiny-shapes`, on the CPU; what cannot
run there is recorded as unavailable with the registry's reason, like any technique a device cannot run.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from studio.errors import ValidationError
from studio.optimizations import REGISTRY
from studio.optimizations.compile import MODES
from studio.request import parse_config

SECTIONS = ("memory", "compute-limit", "techniques", "ladder")  # per model, in this order; targets come last
PROMPT = "a photo of an astronaut riding a horse on mars"
DRY_PROMPT = "a big red circle on the left, on a white background"
DRY_SKIP = {
    "torch_compile": (
        "not compiled with small numbers (inductor takes ~90 s per graph on a 2-core CPU); --with-compile"
    ),
    "aot_package": (
        "not compiled with small numbers (AOTInductor takes ~60 s a package on a 2-core CPU); --with-compile"
    ),
}


@dataclass(frozen=True)
class ModelPlan:
    """One model at one size and step count; `role` names the speed targets it is held to ('sd15', 'sdxl',
    'flux', 'sd3'). `combinations` are whole configurations measured with the techniques, by name:
    "combination" keeps the math, "fast" may change the image (fp8, a step cache). `baseline` is the precision
    every figure of the model is against on a GPU (fp16 for the UNets, bf16 for the transformers, as they were
    trained)."""

    role: str
    model: str
    side: int
    steps: int
    sections: tuple[str, ...]
    combinations: tuple[tuple[str, tuple[str, ...]], ...] = ()
    baseline: tuple[str, ...] = ("fp16",)


# The best of sd15-arch's ladder on an H100 (CUDA graphs: 0.54 s against 1.56 s for the default mode)
COMBINATION = ("channels_last", "cudnn_benchmark", "torch_compile[mode=reduce-overhead]")
# The transformers': fused QKV projections, cuDNN's attention through diffusers' dispatcher (Flux only),
# each repeated block compiled (a compile of seconds, not minutes). Flux's other combinations, in the order
# they are measured (the most telling first, for a run that a time limit stops): fp8 matmuls with row-wise
# scales (the public recipes' quantization), then with a step cache, CUDA graphs per block (alone, with fp8,
# with fp8 and a looser cache), inductor's max-autotune with the public recipes' options, the whole
# transformer compiled with CUDA graphs.
REGIONAL = "torch_compile[regional=true]"
FLUX_KERNELS = ("fused_qkv", "attention_backend[backend=_native_cudnn]")
FLUX_KEEP = (*FLUX_KERNELS, REGIONAL)
FP8_ROW = "fp8[granularity=row]"
GRAPHS = "torch_compile[regional=true,mode=reduce-overhead]"
TUNED = "torch_compile[regional=true,mode=max-autotune-no-cudagraphs,tuning=coordinate]"
FLUX_COMBINATIONS = (
    ("combination", FLUX_KEEP),
    ("fp8-row", (FP8_ROW, *FLUX_KEEP)),
    ("fast", (FP8_ROW, "first_block_cache", *FLUX_KEEP)),
    ("graphs", (*FLUX_KERNELS, GRAPHS)),
    ("fp8-graphs", (FP8_ROW, *FLUX_KERNELS, GRAPHS)),
    ("fast-graphs", (FP8_ROW, "first_block_cache[threshold=0.12]", *FLUX_KERNELS, GRAPHS)),
    ("tuned", (*FLUX_KERNELS, TUNED)),
    ("whole-graphs", (*FLUX_KERNELS, "torch_compile[mode=reduce-overhead]")),
)
SD3_KEEP = ("fused_qkv", REGIONAL)
# the names a combination may have (--techniques takes them): "combination" keeps the math, the others may not
COMBINATIONS = tuple(label for label, _ in FLUX_COMBINATIONS)
TRANSFORMER_SECTIONS = ("memory", "compute-limit", "techniques")


def _transformer(role: str, model: str, side: int, steps: int, combos: tuple) -> ModelPlan:
    return ModelPlan(role, model, side, steps, TRANSFORMER_SECTIONS, combos, ("bf16",))


GPU_MODELS = (
    ModelPlan("sd15", "sd15-arch", 512, 50, SECTIONS),
    ModelPlan(
        "sdxl",
        "sdxl-arch",
        1024,
        30,
        ("memory", "compute-limit", "techniques"),
        (("combination", COMBINATION),),
    ),
    _transformer("flux", "flux-arch", 1024, 28, FLUX_COMBINATIONS),
    _transformer("sd3", "sd3-arch", 1024, 28, (("combination", SD3_KEEP),)),
)
DRY_MODELS = (
    ModelPlan("sd15", "tiny-shapes", 64, 3, SECTIONS),
    ModelPlan("sdxl", "tiny-shapes", 64, 2, ("techniques",), (("combination", COMBINATION),)),
    _transformer("flux", "flux-tiny", 64, 2, FLUX_COMBINATIONS),
    _transformer("sd3", "sd3-tiny", 64, 2, (("combination", SD3_KEEP),)),
)


@dataclass(frozen=True)
class Plan:
    """Every number of one benchmark run."""

    dry_run: bool
    device: str
    own_precision: bool  # each model's own precision (fp16, bf16) on a GPU; fp32 in the dry run
    models: tuple[ModelPlan, ...]
    warmup: int
    rounds: int
    group: int  # configurations per Compare at most (each Compare times the baseline again)
    revert_steps: int
    memory_steps: int
    memory_batch: int
    matmul_n: int
    out: Path
    work: Path
    deadline: float  # time.monotonic() after which no new work starts (math.inf: no budget)
    prompt: str = PROMPT
    seed: int = 1
    skip: dict[str, str] = field(default_factory=dict)  # technique -> why it is not measured in this run
    compile_mode: str = "max-autotune"  # the ladder's compiled rung
    rungs: str = "all"  # the ladder's rungs: all, or compiled (each beside the fp32 rung)
    reverts: bool = True  # check that reverting each measured technique gives back the baseline's image
    techniques: tuple[str, ...] = ()  # the techniques section measures only these (COMBINATIONS too); () all

    def left(self) -> float:
        """Seconds left before the deadline (math.inf without a budget)."""
        return self.deadline - time.monotonic()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__)
    p.add_argument("--dry-run", action="store_true", help="tiny-shapes on this CPU with small numbers")
    p.add_argument("--tiny", action="store_true", help="the dry run's models and numbers, on the GPU")
    p.add_argument("--out", type=Path, default=Path("gpu-out"), help="results.json, results.md, images.png")
    p.add_argument("--work", type=Path, default=None, help="run log and images (default: a temporary folder)")
    p.add_argument(
        "--models",
        default="",
        help="roles to run, comma-separated, in that order: sd15, sdxl, flux, sd3 (default: all)",
    )
    p.add_argument(
        "--sections", default="", help=f"comma-separated, from {', '.join(SECTIONS)} (default: all)"
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="start no new work after this many seconds (default: no budget, everything runs)",
    )
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--group", type=int, default=8, help="configurations per Compare at most")
    p.add_argument("--with-compile", action="store_true", help="compile in the dry run too")
    p.add_argument(
        "--compile-mode",
        choices=MODES,
        default="max-autotune",
        help="torch.compile mode of the ladder's compiled rung (max-autotune can take minutes to compile)",
    )
    p.add_argument(
        "--rungs",
        choices=("all", "compiled"),
        default="all",
        help="the ladder's rungs: all, or the compiled ones only (each beside the fp32 rung)",
    )
    p.add_argument(
        "--no-reverts",
        dest="reverts",
        action="store_false",
        help="skip the check that reverting each technique gives back the baseline's image",
    )
    p.add_argument(
        "--techniques",
        default="",
        help="the techniques section measures only these, comma-separated, each with settings if given "
        "('torch_compile[regional=true]'; 'combination': the model's keep-the-math combination; flux's "
        "other combinations by name: fp8-row, fast, graphs, fp8-graphs, fast-graphs, tuned, whole-graphs, "
        "which may change the image); default: every technique",
    )
    return p


def _chosen(models: tuple[ModelPlan, ...], roles: str, sections: str) -> tuple[ModelPlan, ...]:
    wanted_roles = [r.strip() for r in roles.split(",") if r.strip()] or [m.role for m in models]
    wanted = {s.strip() for s in sections.split(",") if s.strip()}
    unknown = (wanted - set(SECTIONS)) | {r for r in wanted_roles if r not in {m.role for m in models}}
    if unknown:
        raise SystemExit(
            f"unknown sections or models {sorted(unknown)}; sections: {', '.join(SECTIONS)}; "
            f"models: {', '.join(m.role for m in models)}"
        )
    by_role = {m.role: m for m in models}
    chosen = []
    for m in (by_role[r] for r in dict.fromkeys(wanted_roles)):
        kept = tuple(s for s in m.sections if not wanted or s in wanted)
        chosen.append(dataclasses.replace(m, sections=kept))
    return tuple(chosen)


def _techniques(names: str) -> tuple[str, ...]:
    """'sdpa,torch_compile[mode=max-autotune,regional=true]' -> each technique as written, checked against the
    registry (commas inside brackets separate settings, not techniques)."""
    chosen = tuple(n.strip() for n in re.split(r",(?![^\[]*\])", names) if n.strip())
    unknown = []
    for entry in (n for n in chosen if n not in COMBINATIONS):
        try:
            parsed = parse_config(entry)[0]
        except ValidationError as exc:
            raise SystemExit(f"unknown techniques: {exc}") from exc
        if len(parsed) != 1 or parsed[0] not in REGISTRY:
            unknown.append(entry)
    if unknown:
        raise SystemExit(f"unknown techniques {unknown}; the registry's: {', '.join(REGISTRY)}")
    return chosen


def from_args(args: argparse.Namespace) -> Plan:
    """The plan for a GPU run, for the dry run on this CPU, or (`--tiny`) for the dry run's numbers on the
    GPU, a check of every section on the device in about a minute."""
    dry, small = args.dry_run, args.dry_run or args.tiny
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu-bench-"))
    return Plan(
        dry_run=dry,
        device="cpu" if dry else "cuda:0",
        own_precision=not dry,
        models=_chosen(DRY_MODELS if small else GPU_MODELS, args.models, args.sections),
        warmup=args.warmup if args.warmup is not None else 1,
        rounds=args.rounds or (1 if small else 3),
        group=args.group,
        revert_steps=2,
        memory_steps=2,
        memory_batch=2,
        matmul_n=512 if dry else 2048 if small else 8192,
        out=args.out,
        work=work,
        deadline=math.inf if args.budget_s is None else time.monotonic() + args.budget_s,
        prompt=DRY_PROMPT if small else PROMPT,
        skip=dict(DRY_SKIP) if small and not args.with_compile else {},
        compile_mode=args.compile_mode,
        rungs=args.rungs,
        reverts=args.reverts,
        techniques=_techniques(args.techniques),
    )
