"""Diffusion Studio entry point (Hugging Face Spaces runs this file)."""

# First: on ZeroGPU it imports `spaces` before anything touches CUDA.
import studio.engine.zerogpu  # noqa: F401
from studio.errors import StudioError, describe
from studio.ui import build_demo, launch_kwargs

try:
    demo = build_demo()
except StudioError as exc:  # a run log the studio cannot open (STUDIO_DB, a read-only home): one sentence
    raise SystemExit(f"error: {describe(exc)}") from None

if __name__ == "__main__":
    demo.launch(**launch_kwargs())
