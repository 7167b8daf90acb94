"""The few-step adapter: a latent-consistency-distilled UNet LoRA (LCM-LoRA) of tiny-shapes.

    nice -n 19 .venv/bin/python -m pipelines.tiny_shapes.train_few_step --minutes 35
    nice -n 19 .venv/bin/python -m pipelines.tiny_shapes.train_few_step --measure   # the figures only

How to sample with it (what the studio's ``few_step`` technique registers)::

    pipe.load_lora_weights("assets/loras", weight_name="tiny-shapes-lcm.safetensors", adapter_name="lcm")
    pipe.set_adapters(["lcm"], adapter_weights=[1.0])              # LoRA scale 1.0
    pipe.scheduler = LCMScheduler.from_config(pipe.scheduler.config, original_inference_steps=10)
    pipe(prompt, num_inference_steps=4, guidance_scale=1.0)        # no unconditional pass

``LCMScheduler.from_config`` keeps the model's betas (linear 1e-4..0.02) and v-prediction;
``original_inference_steps=10`` is the skipped teacher schedule the adapter was distilled on
(timesteps 99, 199, ..., 999), so 4 steps run at 999, 799, 499, 299 (6 steps: 999, 899, 699, 499,
399, 199; 8 steps: 999, 899, 799, 699, 499, 399, 299, 199). Everything else is LCMScheduler's
default: ``timestep_scaling`` 10 (what training used), no clipping or thresholding,
``set_alpha_to_one``; ``timestep_spacing`` plays no part in LCM's schedule.

The recipe is diffusers' ``train_lcm_distill_lora_sd_wds.py``: a seeded scene's latent is noised to a
timestep t_n of the skipped schedule; the teacher (the shipped UNet, frozen) with classifier-free
guidance at 6.0 (the model's ``DEFAULT_GUIDANCE``; empty prompt as the unconditional one) takes
one DDIM step to t_{n-1}; the student (the same UNet + LoRA) maps x_{t_n} to a clean sample
through the consistency boundary scalings c_skip, c_out (sigma_data 0.5, timestep scaling 10),
and the target is the target network without gradient at x_{t_{n-1}}: an EMA of the student
(decay 0.95, as in the LCM paper). ``--target-ema 0`` makes the target the student itself, as
diffusers' LCM-LoRA script does; with that, 20 solver steps and lr 5e-4 the student drew speckled,
misshapen images after 1,000 steps (shape 58% on 24 prompts). Pseudo-Huber loss (c = 0.001).
The LoRA (rank 16, alpha 16) covers the attention projections, the transformer feed-forward and
in/out projections, every resnet conv, shortcut and time-embedding projection, and the down/up
samplers. Seeded and resumable (``runs/adapters/lcm/ckpt.pt``); every checkpoint judges 24 prompts
at 4 steps and the best-scoring weights are written to ``assets/loras/tiny-shapes-lcm.safetensors``.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
from pathlib import Path

import torch
from diffusers import LCMScheduler

from . import adapter_training as at
from .evaluate import eval_prompts, evaluate, generate, grid, score
from .language import DEFAULT_GUIDANCE, DEFAULT_STEPS
from .prompts import PromptSampler

logger = logging.getLogger(__name__)

OUT = at.LORA_DIR / "tiny-shapes-lcm.safetensors"
RUN = at.ADAPTER_RUNS / "lcm"
RANK = 16
TARGETS = [
    "to_q",
    "to_k",
    "to_v",
    "to_out.0",
    "proj_in",
    "proj_out",
    "ff.net.0.proj",
    "ff.net.2",
    "conv1",
    "conv2",
    "conv_shortcut",
    "downsamplers.0.conv",
    "upsamplers.0.conv",
    "time_emb_proj",
]
ORIGINAL_STEPS = 10  # the skipped teacher schedule: DDIM over timesteps 99, 199, ..., 999
STEPS = 4
SIGMA_DATA = 0.5
TIMESTEP_SCALING = 10.0
HUBER_C = 0.001


def lcm_scheduler(config: dict, original_steps: int = ORIGINAL_STEPS) -> LCMScheduler:
    """The scheduler the adapter needs, built from the model's own scheduler config."""
    return LCMScheduler.from_config(config, original_inference_steps=original_steps)


def boundary_scalings(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Consistency boundary scalings (c_skip, c_out) at integer timesteps, as LCMScheduler computes them."""
    scaled = t.float() * TIMESTEP_SCALING
    c_skip = SIGMA_DATA**2 / (scaled**2 + SIGMA_DATA**2)
    c_out = scaled / (scaled**2 + SIGMA_DATA**2) ** 0.5
    return c_skip.view(-1, 1, 1, 1), c_out.view(-1, 1, 1, 1)


def x0_and_eps(v: torch.Tensor, x_t: torch.Tensor, alpha: torch.Tensor, sigma: torch.Tensor):
    """(predicted clean sample, predicted noise) from a v-prediction at x_t = alpha x0 + sigma eps."""
    return alpha * x_t - sigma * v, alpha * v + sigma * x_t


def distill(args: argparse.Namespace) -> None:
    """Distil the LoRA and write the best-judged weights to ``args.out``."""
    torch.manual_seed(args.seed)
    pipe = at.load_pipeline()
    latents, specs = at.scene_latents(pipe, args.count, args.seed)
    prompts = PromptSampler(pipe.tokenizer, specs, seed=args.seed)
    text_encoder = pipe.text_encoder.requires_grad_(False)
    teacher = copy.deepcopy(pipe.unet).requires_grad_(False).eval()
    unet = pipe.unet
    params = at.add_lora(unet, args.rank, TARGETS)
    # the target network: the student itself (diffusers' LCM-LoRA recipe) or an EMA of it (the LCM paper)
    target_unet = copy.deepcopy(unet).requires_grad_(False) if args.target_ema else unet
    target_params = [p for n, p in target_unet.named_parameters() if "lora_" in n]

    def update_target() -> None:
        with torch.no_grad():
            for tp, p in zip(target_params, params, strict=True):
                tp.lerp_(p, 1.0 - args.target_ema)

    logger.info(
        "LCM LoRA rank %d: %d parameters, %d latents", args.rank, sum(map(torch.numel, params)), len(latents)
    )

    abar = pipe.scheduler.alphas_cumprod.float()
    alpha_all, sigma_all = abar.sqrt(), (1 - abar).sqrt()
    skip = pipe.scheduler.config.num_train_timesteps // args.original_steps
    solver_t = torch.arange(1, args.original_steps + 1) * skip - 1  # 99, 199, ..., 999 for 10
    uncond_ids = pipe.tokenizer(
        [""], padding="max_length", max_length=pipe.tokenizer.model_max_length, return_tensors="pt"
    ).input_ids
    uncond = at.encode_ids(text_encoder, uncond_ids)

    def col(values: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return values[t].view(-1, 1, 1, 1)

    def loss_fn() -> torch.Tensor:
        b = args.batch
        idx = torch.randint(0, len(latents), (b,))
        x0 = latents[idx]
        cond = at.encode_ids(text_encoder, prompts.batch(idx.tolist()))
        n = torch.randint(0, args.original_steps, (b,))
        t = solver_t[n]
        t_prev = (t - skip).clamp(min=0)
        noise = torch.randn_like(x0)
        a_t, s_t = col(alpha_all, t), col(sigma_all, t)
        x_t = a_t * x0 + s_t * noise
        # student: consistency function at (x_t, t)
        c_skip, c_out = boundary_scalings(t)
        pred_x0, _ = x0_and_eps(unet(x_t, t, cond).sample, x_t, a_t, s_t)
        student = c_skip * x_t + c_out * pred_x0
        with torch.no_grad():
            # teacher: one guided DDIM step t -> t_prev
            v = teacher(torch.cat([x_t, x_t]), torch.cat([t, t]), torch.cat([uncond.expand(b, -1, -1), cond]))
            v_uncond, v_cond = v.sample.chunk(2)
            v_guided = v_uncond + args.guidance * (v_cond - v_uncond)
            t_x0, t_eps = x0_and_eps(v_guided, x_t, a_t, s_t)
            a_prev, s_prev = col(alpha_all, t_prev), col(sigma_all, t_prev)
            x_prev = a_prev * t_x0 + s_prev * t_eps
            # target: the student itself, no gradient, at (x_prev, t_prev)
            c_skip_p, c_out_p = boundary_scalings(t_prev)
            tgt_x0, _ = x0_and_eps(target_unet(x_prev, t_prev, cond).sample, x_prev, a_prev, s_prev)
            target = c_skip_p * x_prev + c_out_p * tgt_x0
        diff = (student.float() - target.float()) ** 2
        return (torch.sqrt(diff + HUBER_C**2) - HUBER_C).mean()

    best = {"score": -1.0}
    run = args.run
    best_path = run / "best.json"
    if best_path.exists():
        best = json.loads(best_path.read_text())
    quick = eval_prompts(24)

    def on_checkpoint(step: int) -> None:
        own = pipe.scheduler
        pipe.scheduler = lcm_scheduler(own.config, args.original_steps)
        images = generate(pipe, quick, seed=0, steps=STEPS, guidance=1.0)
        pipe.scheduler = own
        grid(images).save(run / f"samples_{step:05d}.png")
        acc = score(images, quick)
        total = acc["shape"] + acc["colour"] + acc["position"]
        logger.info("step %d, %d steps: %s", step, STEPS, {k: round(v, 3) for k, v in acc.items()})
        if total >= best["score"]:
            best.update(score=total, step=step)
            at.save_lora(unet, args.out)
            best_path.write_text(json.dumps(best))

    def get_state() -> dict:
        state = at.lora_state(unet)
        return {"student": state, "target": at.lora_state(target_unet)} if args.target_ema else state

    def set_state(state: dict) -> None:
        at.load_lora_state(unet, state["student"] if args.target_ema else state)
        if args.target_ema:
            at.load_lora_state(target_unet, state["target"])

    at.train_loop(
        params,
        loss_fn,
        run / "ckpt.pt",
        get_state,
        set_state,
        on_checkpoint,
        lr=args.lr,
        steps=args.steps,
        minutes=None if args.steps else args.minutes,
        checkpoint_every=200,
        warmup=100,
        after_step=update_target if args.target_ema else None,
    )


def measure(
    path: Path, original_steps: int = ORIGINAL_STEPS, run: Path = RUN, steps_list: tuple[int, ...] = (4, 6, 8)
) -> dict[str, dict[str, float]]:
    """The benchmark (48 prompts x 2 seeds): the shipped model (DPM++, 20 steps, guidance 6), the adapter."""
    results = {}
    base = at.load_pipeline()
    acc, images = evaluate(base)
    grid(images).save(run / "eval_baseline.png")
    results[f"baseline {DEFAULT_STEPS} steps"] = acc
    logger.info("baseline, %d steps, guidance %.1f: %s", DEFAULT_STEPS, DEFAULT_GUIDANCE, acc)
    pipe = at.with_lora(path, 1.0, name="lcm")
    pipe.scheduler = lcm_scheduler(pipe.scheduler.config, original_steps)
    for steps in steps_list:
        per_seed = [generate(pipe, eval_prompts(), seed, steps=steps, guidance=1.0) for seed in (0, 1)]
        images = [im for pair in zip(*per_seed, strict=True) for im in pair]
        acc = score(images, [p for p in eval_prompts() for _ in (0, 1)])
        grid(images).save(run / f"eval_lcm_{steps}.png")
        results[f"lcm {steps} steps"] = acc
        logger.info("adapter, %d steps, guidance 1.0: %s", steps, acc)
    (run / "measure.json").write_text(json.dumps(results, indent=1))
    return results


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=35.0, help="time budget (the LR schedule fits it)")
    parser.add_argument("--steps", type=int, default=None, help="fixed step count (bit-for-bit reproducible)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--rank", type=int, default=RANK)
    parser.add_argument("--guidance", type=float, default=DEFAULT_GUIDANCE, help="the teacher's CFG scale")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=8000, help="number of training scenes")
    parser.add_argument(
        "--original-steps", type=int, default=ORIGINAL_STEPS, help="the skipped teacher schedule's length"
    )
    parser.add_argument(
        "--target-ema",
        type=float,
        default=0.0,
        help="EMA decay of the target network (0: the student itself)",
    )
    parser.add_argument("--run", type=Path, default=RUN, help="checkpoint and sample folder")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--measure", action="store_true", help="only measure the saved LoRA")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    args.run.mkdir(parents=True, exist_ok=True)
    if not args.measure:
        distill(args)
    measure(args.out, args.original_steps, args.run)


if __name__ == "__main__":
    main()
