"""How long the command line takes to answer before any model work: `python -m studio --help` and
`python -m studio generate --help`, each started `--runs` times as a user starts it; median and range, and
whether torch was imported (it must not be: each command imports what it needs when it runs).

    .venv/bin/python -m benchmarks.cli_startup [--runs 5]

Target: under 1.5 s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from studio import devices

ROOT = Path(__file__).resolve().parent.parent
PROBE = (  # `python -m studio ARGS`, then whether torch was imported, on stderr's last line
    "import sys, runpy\nsys.argv = ['studio', *sys.argv[1:]]\ntry:\n"
    "    runpy.run_module('studio', run_name='__main__')\nexcept SystemExit:\n    pass\n"
    "print('torch' in sys.modules, file=sys.stderr)\n"
)


def timed(args: list[str], runs: int) -> tuple[list[float], bool]:
    """Wall seconds of `python -m studio ARGS`, `runs` times, and whether torch got imported."""
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "studio", *args], cwd=ROOT, capture_output=True, check=True)
        seconds.append(time.perf_counter() - start)
    probe = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=ROOT, capture_output=True, text=True)
    return seconds, probe.stderr.strip().splitlines()[-1] == "True"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"CPU: {devices.detect().cpu_name}\n")
    print("| command | median | range | torch imported |")
    print("|---|---|---|---|")
    for command in (["--help"], ["generate", "--help"]):
        seconds, torch = timed(command, args.runs)
        print(
            f"| python -m studio {' '.join(command)} | {statistics.median(seconds):.2f} s | "
            f"{min(seconds):.2f}-{max(seconds):.2f} s | {'yes' if torch else 'no'} |"
        )


if __name__ == "__main__":
    main()
