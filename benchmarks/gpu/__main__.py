"""`python -m benchmarks.gpu`: the GPU benchmark (see `benchmarks.gpu.bench`)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.gpu.bench import main  # noqa: E402

main()
