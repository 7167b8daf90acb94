"""The suite's files go to the workers longest first: the costs behind that order name real files, and a run's
durations are read back into them."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import FILE_SECONDS
from tests.file_seconds import file_seconds

ROOT = Path(__file__).resolve().parents[1]


def test_every_costed_file_exists_and_the_longest_come_first():
    assert FILE_SECONDS, "no costs: every file would be costed by its markers"
    missing = [name for name in FILE_SECONDS if not (ROOT / name).is_file()]
    assert not missing, f"tests/file_seconds.json names files that are gone: {missing}"
    seconds = list(FILE_SECONDS.values())
    assert seconds == sorted(seconds, reverse=True)


def test_a_runs_durations_sum_per_file_and_short_files_are_left_out():
    lines = [
        "12.50s call     tests/ui/test_browser.py::test_a[1]",
        "3.00s setup    tests/ui/test_browser.py::test_a[1]",
        "2.00s call     tests/test_cli.py::test_b",
        "1094 passed, 36 skipped in 972.43s (0:16:12)",
    ]
    assert file_seconds(lines) == {"tests/ui/test_browser.py": 16}


class _Item:
    """What the ordering reads of a collected test: its node id and its markers."""

    def __init__(self, nodeid: str, *marks: str):
        self.nodeid, self.marks = nodeid, marks

    def get_closest_marker(self, name: str):
        return name if name in self.marks else None


def test_the_files_go_out_longest_first_each_in_its_own_order():
    from tests.conftest import pytest_collection_modifyitems

    longest = next(iter(FILE_SECONDS))  # a measured file outranks any costed by its markers
    items = [
        _Item("tests/test_a.py::test_1"),
        _Item("tests/ui/test_b.py::test_1", "browser"),
        _Item("tests/test_a.py::test_2", "slow"),
        _Item(f"{longest}::test_2"),
        _Item(f"{longest}::test_1"),
        _Item("tests/ui/test_b.py::test_2", "browser"),
    ]
    pytest_collection_modifyitems(None, items)
    assert [item.nodeid for item in items] == [
        f"{longest}::test_2",
        f"{longest}::test_1",
        "tests/ui/test_b.py::test_1",  # a browser file, 12.4 s
        "tests/ui/test_b.py::test_2",
        "tests/test_a.py::test_1",  # one slow test and one other, 10.2 s
        "tests/test_a.py::test_2",
    ]
