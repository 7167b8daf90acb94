"""Stage 2 of training: the UNet and the text encoder, jointly, on precomputed VAE latents.

    # first:
    python -m pipelines.tiny_shapes.train_vae --steps 3500 --batch 16
    # then, in parallel:
    taskset -c 0 python -m pipelines.tiny_shapes.train_vae --decoder-only --minutes 55 --batch 16 &
    taskset -c 1 python -m pipelines.tiny_shapes.train --minutes 58 --batch 64 --lr 8e-4 --ema 0.999

Seeded and resumable (``runs/unet/ckpt.pt`` is picked up automatically; pass a larger
``--steps`` to continue a finished run). Every ``--eval-every`` steps the EMA weights draw
24 prompts, the analyzer scores colour/shape/position/size/background and a grid is saved
to ``runs/unet/``. At the end the EMA weights are saved to ``assets/tiny-shapes/``.
"""

from __future__ import annotations

import argparse
import copy
import logging
import time
from pathlib import Path

import torch
from diffusers import UNet2DConditionModel
from transformers import CLIPTextModel

from . import models
from .build import ASSET_DIR, make_tokenizer, save_trained
from .dataset import SHAPES
from .evaluate import eval_prompts, evaluate, generate, grid, score
from .prompts import PromptSampler
from .runs_io import RUNS_DIR, ThreadGovernor, cosine_lr, ema_update, load_checkpoint, save_checkpoint
from .train_vae import encode_dataset, load_vae

logger = logging.getLogger(__name__)

UNET_DIR = RUNS_DIR / "unet"
MIN_SNR_GAMMA = 5.0


def measure_scaling_factor(mean: torch.Tensor, std: torch.Tensor) -> float:
    """1 / standard deviation of sampled latents, so the UNet sees unit-variance latents."""
    gen = torch.Generator().manual_seed(0)
    sample = mean + std * torch.randn(mean.shape, generator=gen)
    return float(1.0 / sample.std())


def diffusion_loss(
    unet, text_encoder, sched, x0: torch.Tensor, ids: torch.Tensor, min_snr: bool = False
) -> torch.Tensor:
    """v-prediction MSE, optionally min-SNR-5 weighted.

    Plain v-MSE is the default: min-SNR weighting for v-prediction, min(SNR, 5) / (SNR + 1),
    is nearly zero at high noise, where the layout (position) of the picture is decided; with
    it the model ignored position.
    """
    noise = torch.randn_like(x0)
    t = torch.randint(0, sched.config.num_train_timesteps, (x0.shape[0],))
    noisy = sched.add_noise(x0, noise, t)
    target = sched.get_velocity(x0, noise, t)
    cond = text_encoder(ids)[0]
    pred = unet(noisy, t, cond).sample
    if not min_snr:
        return (pred - target).pow(2).mean()
    abar = sched.alphas_cumprod[t]
    snr = abar / (1 - abar)
    weight = snr.clamp(max=MIN_SNR_GAMMA) / (snr + 1)
    return (weight * (pred - target).pow(2).mean(dim=(1, 2, 3))).mean()


def scene_weights(specs: list, shape_weight: dict[str, float]) -> torch.Tensor | None:
    """Each scene's chance of being drawn into a batch, relative: `shape_weight[shape]` (1 for shapes not
    named); None without any (uniform draws, as the runs before the setting)."""
    if not shape_weight:
        return None
    return torch.tensor([shape_weight.get(spec.shape, 1.0) for spec in specs])


class Trainer:
    """Holds the models, EMA copies, optimiser and data; runs, evaluates and checkpoints."""

    def __init__(self, args: argparse.Namespace) -> None:
        torch.manual_seed(args.seed)
        self.args = args
        self.tokenizer = make_tokenizer()
        self.vae = load_vae()
        self.mean, self.std, specs = encode_dataset(self.vae, args.count, args.seed)
        self.scale = measure_scaling_factor(self.mean, self.std)
        self.vae.register_to_config(scaling_factor=self.scale)
        self.prompts = PromptSampler(self.tokenizer, specs, seed=args.seed)
        self.weights = scene_weights(specs, dict(args.shape_weight))
        self.unet = models.make_unet()
        self.text_encoder = models.make_text_encoder(self.tokenizer)
        self.ema_unet = copy.deepcopy(self.unet).requires_grad_(False)
        self.ema_text = copy.deepcopy(self.text_encoder).requires_grad_(False)
        params = list(self.unet.parameters()) + list(self.text_encoder.parameters())
        self.opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
        self.sched = models.make_train_scheduler()
        self.step = 0
        self.eval_seconds = 30.0
        self._resume()
        logger.info(
            "UNet %d params, text encoder %d params, scaling factor %.4f, %d latents",
            models.count_params(self.unet),
            models.count_params(self.text_encoder),
            self.scale,
            len(self.mean),
        )

    def _modules(self) -> dict[str, torch.nn.Module]:
        return {
            "unet": self.unet,
            "text": self.text_encoder,
            "ema_unet": self.ema_unet,
            "ema_text": self.ema_text,
        }

    def _resume(self) -> None:
        state = load_checkpoint(UNET_DIR / "ckpt.pt")
        if state is None:
            if self.args.init_from is not None:
                self._init_from(self.args.init_from)
            return
        for name, module in self._modules().items():
            module.load_state_dict(state[name])
        self.opt.load_state_dict(state["opt"])
        self.prompts.rng.setstate(state["prompt_rng"])
        self.step = state["step"]

    def _init_from(self, folder: Path) -> None:
        """Start from a saved pipeline's UNet and text encoder (fresh optimiser, EMA = the weights)."""
        unet = UNet2DConditionModel.from_pretrained(folder, subfolder="unet")
        text = CLIPTextModel.from_pretrained(folder, subfolder="text_encoder")
        for name, source in (("unet", unet), ("ema_unet", unet), ("text", text), ("ema_text", text)):
            self._modules()[name].load_state_dict(source.state_dict())
        logger.info("initialised the UNet and the text encoder from %s", folder)

    def checkpoint(self) -> None:
        """Write the resumable state."""
        state = {name: m.state_dict() for name, m in self._modules().items()}
        state.update(opt=self.opt.state_dict(), step=self.step, prompt_rng=self.prompts.rng.getstate())
        save_checkpoint(UNET_DIR / "ckpt.pt", state)

    def train_step(self) -> float:
        """One optimisation step on a random batch; returns the loss."""
        args = self.args
        for group in self.opt.param_groups:
            group["lr"] = cosine_lr(self.step, args.steps, args.lr, warmup=200)
        if self.weights is None:
            idx = torch.randint(0, len(self.mean), (args.batch,))
        else:
            idx = torch.multinomial(self.weights, args.batch, replacement=True)
        # Posterior means, not samples: the posterior std (~0.25) is not small next to the latent
        # spread (~2.1, one channel only ~0.6), and sampling it washed out colour detail.
        x0 = self.mean[idx] * self.scale
        ids = self.prompts.batch(idx.tolist())
        loss = diffusion_loss(
            self.unet, self.text_encoder, self.sched, x0, ids, min_snr=self.step < args.min_snr_until
        )
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.unet.parameters(), 1.0)
        self.opt.step()
        decay = min(args.ema, (1 + self.step) / (10 + self.step))
        ema_update(self.ema_unet, self.unet, decay)
        ema_update(self.ema_text, self.text_encoder, decay)
        self.step += 1
        return loss.item()

    def pipeline(self):
        """A pipeline on the EMA weights (for evaluation)."""
        return models.assemble(self.vae, self.ema_text, self.tokenizer, self.ema_unet)

    def quick_eval(self) -> dict[str, float]:
        """Score 24 prompts x 1 seed with the EMA weights and save a grid."""
        pipe = self.pipeline()
        pipe.set_progress_bar_config(disable=True)
        UNET_DIR.mkdir(parents=True, exist_ok=True)
        prompts = eval_prompts(24)
        images = generate(pipe, prompts, seed=0)
        grid(images).save(UNET_DIR / f"samples_{self.step:05d}.png")
        return score(images, prompts)

    def run(self) -> None:
        """Train to ``--steps`` (or until ``--minutes`` are spent), logging, evaluating, checkpointing."""
        args, avg = self.args, None
        self.t0, self.start, self.deadline = time.perf_counter(), self.step, None
        if args.minutes:
            self.deadline = self.t0 + 60 * args.minutes
        governor = ThreadGovernor()
        while self.step < args.steps:
            loss = self.train_step()
            avg = loss if avg is None else 0.98 * avg + 0.02 * loss
            if self.step % 50 == 0:
                governor.update()
                self._log(avg)
            if self.step % 250 == 0:
                self._rebudget()
            if self.step % args.eval_every == 0 or self.step == args.steps:
                self.save_and_eval()

    def _log(self, avg: float) -> None:
        rate = (self.step - self.start) / (time.perf_counter() - self.t0)
        eta = (self.args.steps - self.step) / max(rate, 1e-9) / 60
        logger.info(
            "step %d/%d  loss %.4f  lr %.2e  %.0f samples/s  eta %.1f min",
            self.step,
            self.args.steps,
            avg,
            self.opt.param_groups[0]["lr"],
            rate * self.args.batch,
            eta,
        )

    def _rebudget(self) -> None:
        """With ``--minutes``, re-fit the total step count (and so the LR schedule) to the time left."""
        if self.deadline is None:
            return
        now = time.perf_counter()
        rate = (self.step - self.start) / (now - self.t0)
        evals_left = (self.deadline - now) * rate / self.args.eval_every
        left = max(0.0, self.deadline - now - evals_left * self.eval_seconds)
        self.args.steps = max(self.step + 1, self.step + int(rate * left))
        logger.info("time budget: %.1f min left -> %d steps in total", left / 60, self.args.steps)

    def save_and_eval(self) -> None:
        """Quick evaluation, checkpoint, and the EMA weights saved as the pipeline."""
        t = time.perf_counter()
        self.vae.load_state_dict(load_vae().state_dict())  # the decoder keeps training alongside
        acc = self.quick_eval()
        logger.info("eval step %d: %s", self.step, {k: round(v, 3) for k, v in acc.items()})
        self.checkpoint()
        out = ASSET_DIR if self.args.out is None else self.args.out
        save_trained(self.vae, copy.deepcopy(self.ema_text), self.tokenizer, self.ema_unet, out)
        self.eval_seconds = time.perf_counter() - t

    def final_eval(self) -> None:
        """The full 48 x 2 benchmark on the saved EMA weights."""
        pipe = self.pipeline()
        pipe.set_progress_bar_config(disable=True)
        acc, images = evaluate(pipe)
        grid(images).save(UNET_DIR / "final_eval.png")
        logger.info("final fidelity (48 prompts x 2 seeds): %s", {k: round(v, 3) for k, v in acc.items()})


def _shape_weight(text: str) -> tuple[str, float]:
    shape, _, weight = text.partition("=")
    try:
        value = float(weight)
    except ValueError:
        value = -1.0
    if shape not in SHAPES or not value > 0:
        raise argparse.ArgumentTypeError(
            f"expected SHAPE=WEIGHT with SHAPE one of {', '.join(SHAPES)} and WEIGHT > 0, got {text!r}"
        )
    return shape, value


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=8e-4)
    parser.add_argument("--ema", type=float, default=0.999)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=24000, help="number of training images")
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument("--min-snr-until", type=int, default=0, help="use min-SNR weighting before this step")
    parser.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="time budget: fit the step count (and LR schedule) to it as training goes",
    )
    parser.add_argument(
        "--init-from",
        type=Path,
        default=None,
        help="without a checkpoint, start from this pipeline folder's UNet and text encoder",
    )
    parser.add_argument(
        "--shape-weight",
        type=_shape_weight,
        action="append",
        default=[],
        metavar="SHAPE=W",
        help="draw the scenes of SHAPE W times as often (e.g. circle=0.5: the shape learned first)",
    )
    parser.add_argument("--out", type=Path, default=None, help="pipeline folder (default assets/tiny-shapes)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    trainer = Trainer(args)
    trainer.run()
    trainer.final_eval()


if __name__ == "__main__":
    main()
