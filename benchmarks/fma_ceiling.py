"""This CPU's fp32 arithmetic ceiling: fused multiply-adds on registers only, no memory, no library. A matmul
peak measures a library's kernel (MKL, OpenBLAS, oneDNN); this measures what any kernel could reach, so a
figure read as a share of it says how much a better kernel could still gain.

A small C loop (GCC's vector extensions, one register width of the CPU's widest fp32 FMA: 64 bytes with
AVX-512, 32 with AVX2) keeps 12 independent accumulators in flight, each `acc = acc * b + c` (one FMA, its
chains different so no compiler folds them), on each of `threads` Python threads at once (ctypes releases the
GIL). Needs a C compiler (`cc`); without one it says so instead of guessing.

    .venv/bin/python -m benchmarks.fma_ceiling [--threads N]
"""

from __future__ import annotations

import argparse
import ctypes
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import torch

from studio import devices

ACCUMULATORS = 12
SOURCE = """
typedef float vec __attribute__((vector_size(WIDTH)));
long lanes(void) { return WIDTH / 4; }
float run(long iterations) {
    vec acc[ACC], b, c;
    for (int i = 0; i < WIDTH / 4; i++) { b[i] = 0.999999f; c[i] = 1e-7f; }
    for (int j = 0; j < ACC; j++) for (int i = 0; i < WIDTH / 4; i++) acc[j][i] = 1.0f + 0.01f * (j + 1);
    for (long n = 0; n < iterations; n++) {
        #pragma GCC unroll 12
        for (int j = 0; j < ACC; j++) acc[j] = acc[j] * b + c;
    }
    float sum = 0.0f;
    for (int j = 0; j < ACC; j++) for (int i = 0; i < WIDTH / 4; i++) sum += acc[j][i];
    return sum;
}
"""


def vector_width() -> int:
    """Bytes in one register of this CPU's widest fp32 FMA (from its flags, read at run time)."""
    hw = devices.detect()
    if hw.avx512:
        return 64
    return 32 if {"avx2", "fma"} <= hw.cpu_flags else 16


def build(width: int) -> ctypes.CDLL:
    """The loop compiled for this CPU (`-march=native`), loaded.

    Raises:
        RuntimeError: no C compiler, or it failed (its message included).
    """
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("no C compiler (cc) on this machine")
    with tempfile.TemporaryDirectory(prefix="fma-ceiling-") as name:
        folder = Path(name)
        (folder / "fma.c").write_text(SOURCE)
        library = folder / "fma.so"
        command = [compiler, "-O2", "-march=native", "-ffp-contract=fast", "-shared", "-fPIC"]
        command += [f"-DWIDTH={width}", f"-DACC={ACCUMULATORS}", str(folder / "fma.c"), "-o", str(library)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode:
            raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}")
        lib = ctypes.CDLL(str(library))  # loaded, so the file may go with its folder
    lib.run.argtypes, lib.run.restype = [ctypes.c_long], ctypes.c_float
    lib.lanes.restype = ctypes.c_long
    return lib


def ceiling(threads: int, seconds: float = 1.0, rounds: int = 3) -> float:
    """GFLOP/s of `threads` threads each running the FMA loop at once (best of `rounds`, each about
    `seconds` long; an FMA counts as 2 FLOPs)."""
    lib = build(vector_width())
    per_iteration = ACCUMULATORS * lib.lanes() * 2
    iterations = 1_000_000
    start = time.perf_counter()
    lib.run(iterations)  # calibrate the length of a timed run
    iterations = max(iterations, int(iterations * seconds / (time.perf_counter() - start)))
    best = 0.0
    for _ in range(rounds):
        workers = [threading.Thread(target=lib.run, args=(iterations,)) for _ in range(threads)]
        start = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        best = max(best, threads * iterations * per_iteration / (time.perf_counter() - start) / 1e9)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    print(f"CPU: {devices.detect().cpu_name}; {vector_width() * 8}-bit FMAs")
    for count in sorted({1, args.threads}):
        print(f"fp32 FMA ceiling, {count} thread{'s' if count > 1 else ''}: {ceiling(count):.0f} GFLOP/s")


if __name__ == "__main__":
    main()
