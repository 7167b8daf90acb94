"""The suite's one-build-per-graph compiled packages (tests/startup/package_memo.py): an identical export is
served the first build's package, anything a build reads that differs (the tensors' values included: a
package holds some inside itself) is another key, and every process the suite starts has the wrapper in
place."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

from tests.server import studio_environment
from tests.startup import package_memo


class Small(torch.nn.Module):
    def __init__(self, width: int = 8, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.linear = torch.nn.Linear(width, width)

    def forward(self, sample):
        return torch.relu(self.linear(sample))


def _exported(module=None, rows: int = 2, width: int = 8, layout=None):
    sample = torch.ones(rows, width) if layout is None else layout
    return torch.export.export((module or Small(width)).eval(), (sample,), strict=False)


def test_an_identical_export_is_served_the_first_builds_package(tmp_path):
    builds = []

    def compile_(exported, package_path=None, inductor_configs=None):
        builds.append(package_path)
        with open(package_path, "wb") as out:
            out.write(f"build {len(builds)}".encode())
        return package_path

    memoized = package_memo.wrap(compile_, tmp_path / "memo")
    configs = {"freezing": False}
    first, second, other = (str(tmp_path / name) for name in ("a.pt2", "b.pt2", "c.pt2"))
    assert memoized(_exported(), package_path=first, inductor_configs=configs) == first
    assert memoized(_exported(), package_path=second, inductor_configs=configs) == second
    assert builds == [first], "the same graph at the same shape is built once"
    assert open(second, "rb").read() == b"build 1"
    memoized(_exported(rows=3), package_path=other, inductor_configs=configs)
    assert builds == [first, other], "another shape is another build"
    assert (tmp_path / "memo" / package_memo.HITS_FILE).read_text().count("\n") == 1


def test_whatever_a_build_reads_changes_the_key():
    base = package_memo.key(_exported(), {})
    assert package_memo.key(_exported(), {}) == base, "the same export, the same key"
    assert package_memo.key(_exported(module=Small(seed=1)), {}) != base, "other values, another key"
    assert package_memo.key(_exported(rows=3), {}) != base
    assert package_memo.key(_exported(width=4), {}) != base
    assert package_memo.key(_exported(), {"freezing": True}) != base
    assert (
        package_memo.key(_exported(module=Small().to(torch.bfloat16), layout=torch.ones(2, 8).bfloat16()), {})
        != base
    )
    assert package_memo.key(_exported(layout=torch.ones(8, 2).t()), {}) != base, "strides are part of it"


def test_every_process_the_suite_starts_has_the_wrapper_servers_included():
    assert os.environ[package_memo.FOLDER_VARIABLE]
    assert hasattr(torch._inductor.aoti_compile_and_package, "memo_folder")
    probe = "import torch._inductor as i; print(hasattr(i.aoti_compile_and_package, 'memo_folder'))"
    env = studio_environment()  # what the suite's servers start with
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True", done.stderr[-2000:]
