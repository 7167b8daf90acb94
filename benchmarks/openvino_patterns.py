"""How long does NNCF's search for its fusing patterns take in a calibrated OpenVINO build of the bundled
model's UNet, NNCF's own against the studio's (studio/optimizations/openvino/patterns.py), and do they find
the same matches? The searches NNCF makes during a real build are recorded, then each is timed both ways
(CPU seconds, the median of `--rounds`, in this one process).

    .venv/bin/python -m benchmarks.openvino_patterns [--modes hybrid_int8,full_int8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import tempfile
import time

from studio import devices


def record(mode: str) -> list[tuple]:
    """The (graph, patterns, strict) of each pattern search NNCF makes while building the UNet in `mode`."""
    from studio.manager import PipelineManager
    from studio.optimizations.openvino import models, patterns
    from tests import tiny

    models.nncf()  # NNCF imported as the studio imports it (usage reporting blocked), its search installed
    calls: list[tuple] = []
    with patterns.watched(
        lambda graph, pattern_graph, strict, _: calls.append((graph.copy(), pattern_graph, strict))
    ):
        settings = {"mode": mode, "vae": False, "text_encoder": False}
        tiny.run(PipelineManager(), tiny.request(["openvino"], {"openvino": settings}, steps=2))
    return calls


def cpu_seconds(function, calls: list[tuple], rounds: int) -> tuple[float, list]:
    spent, found = [], []
    for _ in range(rounds):
        start = time.process_time()
        found = [function(graph, pattern_graph, strict) for graph, pattern_graph, strict in calls]
        spent.append(time.process_time() - start)
    return statistics.median(spent), found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="hybrid_int8,full_int8")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    os.environ.setdefault("STUDIO_HOME", tempfile.mkdtemp(prefix="studio-patterns-"))
    import torch

    torch.set_num_threads(1)
    from studio.optimizations.openvino import patterns

    hw = devices.detect()
    print(f"CPU: {hw.cpu_name}; one thread; CPU seconds, median of {args.rounds}")
    print("| mode | searches | graph nodes | NNCF's search | the studio's | speedup | same matches |")
    print("|---|---|---|---|---|---|---|")
    for mode in args.modes.split(","):
        calls = record(mode)
        faster = importlib.import_module(patterns.HOME).find_subgraphs_matching_pattern
        theirs, expected = cpu_seconds(faster.__wrapped__, calls, args.rounds)
        ours, found = cpu_seconds(faster, calls, args.rounds)
        same = [sorted(map(tuple, a)) == sorted(map(tuple, b)) for a, b in zip(expected, found, strict=True)]
        nodes = max(len(graph) for graph, _, _ in calls)
        print(
            f"| {mode} | {len(calls)} | {nodes} | {theirs:.2f} s | {ours:.2f} s | "
            f"×{theirs / ours:.1f} | {'yes' if all(same) else f'NO ({same.count(False)} differ)'} |"
        )


if __name__ == "__main__":
    main()
