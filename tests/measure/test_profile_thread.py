"""A profile run on a worker thread, as the app runs every request: the profile is whole, and the server's
log keeps everything the profiler printed but Kineto's "External init callback" line (the thread that loaded
torch is another one; see `studio.measure.step_profile.kineto_init_line_dropped`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROFILE_ON_A_THREAD = """
import sys, threading
import torch
from studio.manager import PipelineManager
from studio.measure.step_profile import profile_step
from studio.request import build_request

torch.set_num_threads(1)
request = build_request(model="tiny-shapes", prompt="a red circle", steps=3, width=64, height=64)
found = {}
worker = threading.Thread(target=lambda: found.update(result=profile_step(PipelineManager(), request)))
worker.start()
worker.join()
print(found["result"].step_s > 0 and len(found["result"].ops) > 0)
"""


def test_a_profile_on_a_worker_thread_leaves_no_kineto_error_in_the_log(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", PROFILE_ON_A_THREAD],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={
            "PATH": "/usr/bin:/bin",
            "HF_HUB_OFFLINE": "1",
            "STUDIO_HOME": str(tmp_path),
            "OMP_NUM_THREADS": "1",
        },
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "True", "the profile is whole"
    assert "External init callback" not in done.stderr
    assert "profiler_start" in done.stderr, "what else the profiler printed meanwhile is kept"
