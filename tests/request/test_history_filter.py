"""History's filter is built by name, once, from whatever a face holds; a typo is refused, not matched."""

from __future__ import annotations

import pytest

from studio.errors import ValidationError
from studio.request import HistoryFilter


def test_a_filter_is_taken_by_name_from_what_a_face_holds():
    form = {
        "model": "tiny-shapes",
        "device": "",
        "status": "ok",
        "since": "2026-11-01",
        "limit": None,
        "x": 1,
    }
    f = HistoryFilter.of(form)
    assert (f.model, f.device, f.status, f.technique, f.limit) == ("tiny-shapes", None, "ok", None, 200)
    assert f.since == "2026-11-01T00:00:00.000+00:00", "a date is the start of that day in UTC"
    with pytest.raises(TypeError):
        HistoryFilter("tiny-shapes", "cpu")  # seven fields in a row cannot be told apart: by name only


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"status": "done"}, "status must be one of running, ok"),
        ({"technique": "bf17"}, "Unknown technique 'bf17' in the filter."),
        ({"since": "yesterday"}, "since must be a date or time such as 2026-11-01"),
        ({"limit": 0}, "limit must be a whole number between 1 and 5000"),
    ],
)
def test_a_typo_is_refused_with_a_sentence(given, says):
    with pytest.raises(ValidationError, match=says):
        HistoryFilter.of(given)
