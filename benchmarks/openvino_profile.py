"""Where an OpenVINO model's time goes on this CPU: the CPU plugin's own per-node counters, summed by node
type and by kernel, for one of the models the `openvino` technique cached.

    .venv/bin/python -m benchmarks.openvino_profile                 # list the cached models
    .venv/bin/python -m benchmarks.openvino_profile ENTRY [--calls 3]

ENTRY is a directory name under `$STUDIO_HOME/openvino/` (or a path to a model.xml). The model is compiled as
the technique compiles it (torch's thread count, one stream, f32 inference precision) with PERF_COUNT on, and
run on seeded random inputs of its static shapes (integer inputs, the timestep, set to 500): time per call,
then each node type's and each kernel's (`exec_type`: `jit_avx2_I8` is an int8 convolution, `brgemm_avx2_f32`
an fp32 matmul) share of the last call.
"""

from __future__ import annotations

import argparse
import collections
import time
from pathlib import Path

import numpy as np

from benchmarks.cpu_peers import cpu_line
from studio.optimizations.openvino import models as ovm


def inputs_of(model) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = []
    for port in model.inputs:
        shape = list(port.get_shape())
        if port.get_element_type().is_integral():
            arrays.append(np.full(shape, 500, dtype=np.int64))
        else:
            arrays.append(rng.standard_normal(shape).astype(np.float32))
    return arrays


def describe(model) -> str:
    return ", ".join(f"{p.get_any_name()} {list(p.get_shape())}" for p in model.inputs)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("entry", nargs="?")
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    core = ovm.openvino().Core()
    if args.entry is None:
        for xml in sorted(ovm.cache_root().glob("*/model.xml")):
            model = core.read_model(xml)
            print(f"{xml.parent.name}  {len(model.get_ops())} nodes  {describe(model)}")
        return
    path = Path(args.entry)
    path = path if path.suffix == ".xml" else ovm.cache_root() / args.entry / "model.xml"
    model = core.read_model(path)
    compiled = ovm.compile_for_cpu(model, "f32", profile=True)
    request = compiled.create_infer_request()
    arrays = inputs_of(model)
    request.infer(arrays)  # the first call prepares the kernels
    start = time.perf_counter()
    for _ in range(args.calls):
        request.infer(arrays)
    per_call = (time.perf_counter() - start) / args.calls
    by_type, by_kernel, count = collections.Counter(), collections.Counter(), collections.Counter()
    for node in request.profiling_info:
        us = node.real_time.total_seconds() * 1e6
        by_type[node.node_type] += us
        by_kernel[f"{node.node_type} {node.exec_type}"] += us
        count[node.node_type] += 1
    total = sum(by_type.values())
    print(f"CPU: {cpu_line()}")
    print(f"{path}: {describe(model)}")
    summed = f"the last call's counters sum to {total / 1e6:.3f} s"
    print(f"{per_call:.3f} s per call ({args.calls} calls); {summed}")
    for title, table in (("node type", by_type), ("kernel", by_kernel)):
        print(f"by {title}:")
        for name, us in table.most_common(args.top):
            nodes = f"  {count[name]} nodes" if title == "node type" else ""
            print(f"  {name:48} {us / 1e3:9.1f} ms  {100 * us / total:5.1f}%{nodes}")


if __name__ == "__main__":
    main()
