"""docs/benchmarks.md's "What is fastest where" table is what the cards in docs/cards/ render (as the
README's techniques table is the registry's): change a figure in its card, then run
`python -m studio.cards.doc_table`. Every winner in those cards is a configuration the request accepts."""

from __future__ import annotations

import pytest

from studio import devices
from studio.cards import doc_table
from studio.errors import UnavailableError
from studio.request import build_request, parse_config, with_config


def test_the_docs_table_is_what_the_cards_render():
    doc = doc_table.DOC.read_text()
    assert doc_table.table_in(doc) == doc_table.render(doc_table.docs_cards()), (
        "docs/benchmarks.md's 'What is fastest where' table is stale: run `python -m studio.cards.doc_table`"
    )


def test_the_table_has_a_row_per_card_that_measured_sd15_arch_gpus_first():
    table = doc_table.render(doc_table.docs_cards()).splitlines()
    assert table[0] == doc_table.HEADER and len(table) == 2 + 6
    assert table[2].startswith("| NVIDIA H100 80GB HBM3") and "none faster: `torch_compile`" in table[-1]


def test_a_stale_table_is_caught_and_written_again(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text(doc_table.DOC.read_text().replace("PyTorch fp32: 25.69 s", "PyTorch fp32: 20.00 s"))
    assert doc_table.table_in(doc.read_text()) != doc_table.render(doc_table.docs_cards())
    assert doc_table.write(doc) is True and doc.read_text() == doc_table.DOC.read_text()
    assert doc_table.write(doc) is False


def winners():
    return [
        (card["device"], entry["model"], w["config"])
        for card in doc_table.docs_cards()
        for entry in card["models"]
        for w in entry["winners"]
    ]


@pytest.mark.parametrize("device, model, config", winners())
def test_every_winner_in_the_docs_cards_is_a_configuration_the_request_accepts(device, model, config):
    names, _ = parse_config(config)
    assert names
    if device != "cpu":
        return  # a GPU's configurations (fp16, CUDA graphs) are refused on this machine for want of CUDA
    request = build_request(model=model, prompt="a photo", device="cpu")
    try:
        configured = with_config(request, config)
    except UnavailableError as exc:  # a technique this machine lacks (an optional package): said, not silent
        assert "Remove it" in str(exc) or "Choose" in str(exc)
        return
    assert configured.config_label == config
    assert devices.resolve("cpu") == "cpu"
