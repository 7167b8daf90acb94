"""Latency of a generate through gradio_client vs the same call on the engine directly.

One process: the app is launched in-process on a free port around the same Studio the
direct calls use; calls are interleaved, medians compared (target: overhead <= 5% of a
tiny-shapes 20-step generation).

Two clients are measured. `Client(url)` as constructed by default builds a new httpx client
for every request, and httpx loads the system CA bundle into a fresh SSL context each time
(~50-180 ms here, even for a plain http:// URL). `Client(url, ssl_verify=context)` hands httpx
one prebuilt `ssl.SSLContext` (certificates are still verified on https) and removes that cost;
the README recommends it.

Run: .venv/bin/python -m benchmarks.client_overhead [--rounds 9]
"""

from __future__ import annotations

import argparse
import os
import ssl
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from gradio_client import Client

from benchmarks.timing import describe, overhead, times
from studio.engine import Studio
from studio.request import build_request
from studio.ui import build_demo

PROMPT = "a big red circle on the left, on a white background"


def gradio_floor(rounds: int) -> list[float]:
    """Round trips of a no-op echo endpoint: what Gradio + gradio_client cost by themselves on this
    machine."""
    import time

    import gradio as gr

    with gr.Blocks() as echo:
        box, out = gr.Textbox(), gr.Textbox()
        gr.Button().click(lambda x: x, box, out, api_name="echo")
    echo.queue()
    _, url, _ = echo.launch(prevent_thread_lock=True, quiet=True)
    client, samples = Client(url, verbose=False, ssl_verify=ssl.create_default_context()), []
    try:
        for _ in range(rounds):
            start = time.perf_counter()
            client.predict("hi", api_name="/echo")
            samples.append(time.perf_counter() - start)
    finally:
        echo.close()
    return samples


def main(rounds: int, steps: int) -> None:
    home = tempfile.mkdtemp(prefix="bench-client-")
    studio = Studio(db_path=f"{home}/runs.db", outputs=f"{home}/out")
    demo = build_demo(studio)
    _, url, _ = demo.launch(prevent_thread_lock=True, quiet=True)
    client = Client(url, verbose=False)
    reusing = Client(url, verbose=False, ssl_verify=ssl.create_default_context())
    request = build_request(model="tiny-shapes", prompt=PROMPT, seed=1, steps=steps)
    args = ("tiny-shapes", "", "auto", "fp32", [], PROMPT, "", 1, steps, 6.0, 64, 64, "default", "")
    try:
        timed = times(
            {
                "engine (Studio.generate)": lambda: studio.generate(request),
                "gradio_client /generate": lambda: client.predict(*args, api_name="/generate"),
                "  same, shared SSL context": lambda: reusing.predict(*args, api_name="/generate"),
            },
            rounds,
        )
    finally:
        demo.close()
    print(f"tiny-shapes, {steps} steps, CPU, one process, interleaved:")
    for name, samples in timed.items():
        print(f"  {name:26} {describe(samples)}")
    ratio = overhead(timed["gradio_client /generate"], timed["engine (Studio.generate)"])
    tuned = overhead(timed["  same, shared SSL context"], timed["engine (Studio.generate)"])
    print(f"  gradio_client overhead, default Client(url): {ratio:+.2%}")
    print(
        f"  gradio_client overhead, Client(url, ssl_verify=ssl.create_default_context()): {tuned:+.2%} "
        "(target: <= 5%)"
    )
    print(
        "  for reference, a no-op Gradio echo endpoint round trip (shared SSL context): "
        f"{describe(gradio_floor(rounds))}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    main(args.rounds, args.steps)
