"""Diffusion Studio entry point (Hugging Face Spaces runs this file)."""

# First: on ZeroGPU it imports `spaces` before anything touches CUDA.
import studio.engine.zerogpu  # noqa: F401
from studio.ui import build_demo, launch_kwargs

demo = build_demo()

if __name__ == "__main__":
    demo.launch(**launch_kwargs())
