"""Compiled packages that cannot be used as kept (cut short, built elsewhere, nowhere to keep them, a disk
that fills): each run says why in a sentence, runs compiled, draws the package's image and loses no logged
run."""

from __future__ import annotations

import pytest

from tests.faults import packages
from tests.faults.cases import Workspace

pytestmark = pytest.mark.slow  # the bundled model's package is compiled once, for real


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    return Workspace(tmp_path_factory.mktemp("packages"))


def test_a_truncated_package_is_named_and_compiled_again(workspace):
    outcome = packages.truncated_case(workspace)
    assert "could not be loaded" in outcome.said and "compiled again" in outcome.said
    assert outcome.alive and outcome.runs_lost == 0 and outcome.facts["compiled"] == 1
    assert outcome.facts["rewritten"], "the damaged package was replaced, whole"


def test_a_package_built_elsewhere_is_refused_with_where_it_was_built(workspace):
    outcome = packages.foreign_case(workspace)
    assert "was built for torch 2.9.0+cu128 on cuda (compute capability 9.0)" in outcome.said
    assert outcome.alive and outcome.runs_lost == 0 and outcome.facts["phase"] == "cold"


def test_a_packages_folder_that_cannot_be_written_still_runs_compiled(workspace):
    outcome = packages.unwritable_case(workspace)
    assert "could not be kept" in outcome.said and "the next process compiles again" in outcome.said
    assert outcome.alive and outcome.runs_lost == 0


def test_a_disk_that_fills_while_keeping_a_package_leaves_no_half_entry(workspace):
    outcome = packages.disk_full_case(workspace)
    assert "No space left on device" in outcome.said
    assert outcome.alive and outcome.runs_lost == 0
    assert outcome.facts["left"] == [], "the scratch folder was removed"
