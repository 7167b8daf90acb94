"""A profiled step (`studio.measure.step_profile.ProfileResult.as_json()`) in words and units: the summary
paragraph, the tables of time by kind and of the top operators, the bar chart's rows, and Markdown."""

from __future__ import annotations

from typing import Any


def duration(seconds: float | None) -> str:
    """'1.23 s', '12.3 ms' or '123 µs'."""
    if seconds is None:
        return "–"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1e3:.1f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} µs"


def share(value: float | None) -> str:
    """'31%', or '3.1%' below ten percent."""
    if value is None:
        return "–"
    return f"{value * 100:.0f}%" if value >= 0.1 else f"{value * 100:.1f}%"


def _scaled(value: float, unit: str) -> str:
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def flops(value: float | None) -> str:
    """'1.41 TFLOP' ('–' when nothing was counted)."""
    return _scaled(value, "FLOP") if value else "–"


def rate(value: float | None) -> str:
    """'2.36 TFLOP/s'."""
    return _scaled(value, "FLOP/s") if value else "–"


def _kind(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(k for k in data["kinds"] if k["kind"] == name)


def summary(data: dict[str, Any]) -> str:
    """One paragraph: the step's time, what dominates it, its FLOPs and how close it comes to the peak."""
    step = f"Step {data['profiled_step']} of {data['steps']}"
    what = f"{data['model']} ({data['config']}, {data['dtype']}, {data['width']}×{data['height']}"
    what += f", batch {data['batch']}) on {data['device']}"
    if data["unprofiled_step_s"] is not None:
        took = f"took {duration(data['unprofiled_step_s'])} ({duration(data['step_s'])} under the profiler)"
    else:
        took = f"took {duration(data['step_s'])} under the profiler"
    top = _kind(data, data["dominant"])
    lines = [
        f"{step} of {what} {took}.",
        f"Most of it goes to {top['label']}: {duration(top['seconds'])}, {share(top['share'])} of the "
        f"profiled step ({data['time_basis']}).",
    ]
    if data["dominant"] == "overhead":
        lines.append("The step is bound by Python and dispatch overhead, not by arithmetic.")
    if data["flops"]:
        achieved = f"It does {flops(data['flops'])}: {rate(data['achieved_flops_per_s'])} achieved"
        achieved += f" (over {data['achieved_over']})"
        if data["peak_fraction"] is not None:
            achieved += (
                f", {share(data['peak_fraction'])} of this device's measured {data['dtype']} matmul peak "
                f"({rate(data['peak_flops_per_s'])}: {data['peak_note']})."
            )
            if data["peak_fraction"] > 1:
                achieved += (
                    " Above the peak: some kernels beat the plain matmul measured (TF32 or Winograd "
                    "convolutions)."
                )
        else:
            achieved += f"; the {data['dtype']} matmul peak could not be measured here."
        lines.append(achieved)
    return " ".join([*lines, *data.get("notes", [])])


def kind_rows(data: dict[str, Any]) -> list[dict[str, str]]:
    """Time by kind as rows of words: kind, time, share, FLOPs."""
    return [
        {
            "Kind": k["label"],
            "Time": duration(k["seconds"]),
            "Share": share(k["share"]),
            "FLOPs": flops(k["flops"]),
        }
        for k in data["kinds"]
    ]


def op_rows(data: dict[str, Any]) -> list[dict[str, str]]:
    """The top operators as rows of words: name, kind, calls, self CPU (and CUDA) time, share."""
    on_cuda = data["device"].startswith("cuda")
    rows = []
    for op in data["top_ops"]:
        row = {"Operator": op["name"], "Kind": op["kind"], "Calls": str(op["calls"])}
        row["Self CPU"] = duration(op["self_cpu_s"])
        if on_cuda:
            row["Self CUDA"] = duration(op["self_cuda_s"])
        row["Share"] = share(op["share"])
        rows.append(row)
    return rows


def chart_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The bar chart's rows: one per kind (its label without the examples), its time in milliseconds."""
    return [
        {"kind": k["label"].split(" (")[0], "time (ms)": round(k["seconds"] * 1e3, 3)} for k in data["kinds"]
    ]


def table(rows: list[dict[str, str]]) -> str:
    """Rows of words as a Markdown table."""
    if not rows:
        return "_no operators_"
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(r[h]).replace("|", "\\|") for h in head) + " |" for r in rows]
    return "\n".join(lines)


def markdown(data: dict[str, Any]) -> str:
    """The summary, the time by kind and the top operators, as Markdown (the CLI prints this)."""
    return "\n\n".join([summary(data), table(kind_rows(data)), table(op_rows(data))])
