"""What the first call of a configuration costs, said before it runs: from the run log (the first call of each
configuration on a pipeline, even one already warm with another), else from a machine's card."""

from __future__ import annotations

from studio.cards.collection import DOCS_CARDS, load_folder
from studio.cards.measured_first_calls import compile_cost, from_cards
from tests import tiny


def test_a_configuration_first_called_on_a_warm_pipeline_logs_its_own_first_call(studio):
    studio.generate(tiny.request(steps=2))
    assert studio.first_call(tiny.request(["openvino"], steps=2)) is None, "nothing logged for it yet"
    converted = studio.generate(tiny.request(["openvino"], steps=2))
    again = studio.generate(tiny.request(["openvino"], steps=2))
    assert converted.metrics["first_call_seconds"] == converted.metrics["latency_s"]
    assert again.metrics.get("first_call_seconds") is None, "the second call is not a first call"
    found = studio.first_call(tiny.request(["openvino"], steps=2))
    assert found is not None and found.count == 1
    assert found.cold_s == converted.metrics["first_call_seconds"] and found.cold_steps == 2
    assert found.sentence().startswith("The first call of openvino took ")
    # the conversion makes it worth saying: later calls are a small part of it, and the sentence gives them
    assert found.notable and found.warm_s == again.metrics["latency_s"]
    assert "; later calls " in found.sentence()
    # another size is another first call (a compile, a conversion, per shape); another model, none logged
    assert studio.first_call(tiny.request(["openvino"], steps=2, width=96, height=96)) is None
    assert studio.first_call(tiny.request(["channels_last"], steps=2)) is None


def test_the_slowest_first_call_is_the_cold_one_and_the_newest_is_said_beside_it(studio):
    # going back to no technique rebuilds the pipeline from its components, so openvino converts again (its
    # model cache on disk makes that one quicker)
    for optimizations in (["openvino"], [], ["openvino"]):
        studio.generate(tiny.request(optimizations, steps=2))
    rows = [
        r
        for r in studio.runlog.runs()
        if r["config_label"] == "openvino" and r.get("first_call_seconds") is not None
    ]
    found = studio.first_call(tiny.request(["openvino"], steps=2))
    assert found.count == len(rows) == 2
    assert found.cold_s == max(r["first_call_seconds"] for r in rows)
    assert found.latest_s == rows[0]["first_call_seconds"] and "the slowest of 2" in found.sentence()


def test_a_card_says_what_a_configuration_not_run_here_cost_on_its_machine():
    cards = load_folder(DOCS_CARDS).cards
    found = from_cards(cards, "sd15-arch", "openvino[mode=hybrid_int8]")
    assert found and all(f["seconds"] > 0 for f in found)
    assert [f["seconds"] for f in found] == sorted((f["seconds"] for f in found), reverse=True)
    assert {"machine", "width", "height", "steps"} <= set(found[0])
    assert from_cards(cards, "sd15-arch", "warp_drive") == []


def test_a_profile_run_logged_without_a_latency_leaves_the_first_call_note_working(studio):
    """A Profile run is logged ok with a step time and no call latency; what a configuration's first call
    cost is then read from the other runs, not broken by it."""
    studio.generate(tiny.request(["openvino"], steps=2))
    studio.profile(tiny.request(["openvino"], steps=2))
    again = studio.generate(tiny.request(["openvino"], steps=2))
    found = studio.first_call(tiny.request(["openvino"], steps=2))
    assert found is not None and found.warm_s == again.metrics["latency_s"]
    studio.profile(tiny.request(steps=2))  # the only run of the baseline: no latency, no first call
    assert studio.first_call(tiny.request(steps=2)) is None


def test_a_first_compile_measured_nowhere_is_estimated_from_the_cards_of_its_technique():
    """torch_compile on the bundled model, in any configuration the cards measured: the range across their
    machines and the median to expect; a technique no card measured says so; nothing to prepare, nothing."""
    cards = load_folder(DOCS_CARDS).cards
    firsts = sorted(
        row["first_call_s"]
        for card in cards
        for entry in card["models"]
        if entry["model"] == "tiny-shapes"
        for row in entry.get("rows") or []
        if "torch_compile" in row["config"] and row.get("first_call_s")
    )
    assert len(firsts) >= 2, "the project's cards measured a compile of the bundled model"
    said, expect = compile_cost(cards, tiny.request(["torch_compile"]))
    assert expect == firsts[len(firsts) // 2] if len(firsts) % 2 else expect > firsts[0]
    assert "its first call compiles the denoiser (torch.compile)" in said and "expect about" in said
    assert f"{firsts[0]:.0f} s–{firsts[-1]:.0f} s" in said
    said, expect = compile_cost(cards, tiny.request(["aot_package"]))
    assert expect is None and "nothing measured how long that takes" in said
    assert compile_cost(cards, tiny.request(["channels_last"])) is None
