"""The studio's engine on an offline GPU machine: the kit of wheels it lacks (`kit`, `kit_build`), the GPU
benchmark (`python -m benchmarks.gpu`, through the engine's Compare, sweeps and timing protocol) and its
report.

`benchmarks/gpu/run.sh` is the one command the machine runs; `--dry-run` runs the same code on this CPU with
the bundled model and small numbers. See docs/gpu.md.
"""
