"""Cards published to and loaded from a Hugging Face dataset repository, with a fake HfApi and
snapshot_download (no network): one upload per card, the token never shown, nothing uploaded without a token
or offline, the local cards only when the repository cannot be read."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub import constants

from studio.cards import hub
from studio.cli import main
from studio.errors import UnavailableError, ValidationError
from studio.optimizations import packages

TOKEN = "hf_secret_token_for_the_test"
V0 = Path(__file__).parent / "fixtures" / "card-v0.json"


class FakeApi:
    """Records what the studio asks of the hub; `fail_on` makes that upload raise (naming the token)."""

    made: list[FakeApi] = []
    fail_on_next: str | None = None

    def __init__(self, token=None):
        self.token, self.calls, self.fail_on = token, [], FakeApi.fail_on_next
        FakeApi.made.append(self)

    def create_repo(self, repo_id, **kw):
        self.calls.append(("create_repo", repo_id, kw))

    def upload_file(self, **kw):
        if self.fail_on and kw["path_in_repo"].endswith(self.fail_on):
            raise OSError(f"503 Service Unavailable for token {self.token}")
        self.calls.append(("upload_file", kw))


@pytest.fixture
def fake_hub(monkeypatch):
    FakeApi.made, FakeApi.fail_on_next = [], None
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    return FakeApi


def cards_in(tmp_path, n=2):
    paths = []
    for i in range(n):
        path = tmp_path / f"card-{i}.json"
        shutil.copy(V0, path)
        paths.append(path)
    return paths


def test_each_card_is_one_upload_to_the_dataset_and_the_token_is_never_shown(
    fake_hub, tmp_path, capsys, caplog
):
    caplog.set_level(logging.DEBUG)
    done = hub.publish(cards_in(tmp_path), "someone/studio-cards")
    (api,) = fake_hub.made
    assert api.token == TOKEN
    assert api.calls[0] == ("create_repo", "someone/studio-cards", {"repo_type": "dataset", "exist_ok": True})
    uploads = [kw for name, kw in api.calls[1:]]
    assert [u["path_in_repo"] for u in uploads] == ["cards/card-0.json", "cards/card-1.json"]
    assert {u["repo_type"] for u in uploads} == {"dataset"} and {u["repo_id"] for u in uploads} == {
        "someone/studio-cards"
    }
    assert done.uploaded == ["cards/card-0.json", "cards/card-1.json"]
    assert done.message == "Published 2 card(s) to https://huggingface.co/datasets/someone/studio-cards."
    out, err = capsys.readouterr()
    assert TOKEN not in out + err + caplog.text + done.message


def test_a_failed_upload_says_how_many_went_and_hides_the_token(fake_hub, tmp_path):
    fake_hub.fail_on_next = "card-1.json"
    done = hub.publish(cards_in(tmp_path), "someone/studio-cards")
    assert done.uploaded == ["cards/card-0.json"]
    assert "stopped after 1 of 2 files" in done.message and "each file uploaded is whole" in done.message
    assert TOKEN not in done.message and "***" in done.message


@pytest.mark.parametrize("why", ["no token", "offline", "bad name"])
def test_nothing_is_uploaded_without_a_token_offline_or_to_a_malformed_name(
    fake_hub, tmp_path, monkeypatch, why
):
    repo = "someone/studio-cards"
    if why == "no token":
        monkeypatch.delenv("HF_TOKEN")
        error, says = UnavailableError, "needs a Hugging Face token with write access in HF_TOKEN"
    elif why == "offline":
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
        error, says = UnavailableError, "HF_HUB_OFFLINE is set"
    else:
        repo, error, says = "not a repo", ValidationError, "write it as OWNER/DATASET"
    with pytest.raises(error, match=says):
        hub.publish(cards_in(tmp_path), repo)
    assert fake_hub.made == []


def test_the_cli_refuses_to_publish_before_it_measures(fake_hub, tmp_path, monkeypatch, capsys):
    import studio.cards.run_suite as runner

    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setattr(runner, "run_cards", lambda *a, **kw: pytest.fail("nothing may run"))
    status = main(["cards", "--configs", "channels_last", "--out", str(tmp_path), "--publish", "a/b"])
    assert status == 2 and "HF_TOKEN" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def local(tmp_path):
    folder = tmp_path / "local"
    folder.mkdir()
    shutil.copy(V0, folder / "mine.json")
    return folder


def test_the_datasets_cards_load_with_the_local_ones(monkeypatch, tmp_path, local):
    asked = []

    def snapshot_download(repo_id, **kw):
        asked.append((repo_id, kw))
        where = tmp_path / "snapshot"
        (where / "cards").mkdir(parents=True)
        shutil.copy(V0, where / "cards" / "theirs.json")
        return str(where)

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    loaded, note = hub.load_hub("someone/studio-cards", local)
    assert asked == [("someone/studio-cards", {"repo_type": "dataset", "allow_patterns": "*.json"})]
    assert note is None and sorted(Path(c["path"]).name for c in loaded.cards) == ["mine.json", "theirs.json"]


@pytest.mark.parametrize("why", ["offline", "unreachable"])
def test_offline_or_unreachable_the_local_cards_only_with_a_sentence(monkeypatch, local, why):
    def snapshot_download(repo_id, **kw):
        if why == "offline":
            pytest.fail("offline, the hub is not asked")
        raise huggingface_hub.errors.LocalEntryNotFoundError("no connection and nothing cached")

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", why == "offline")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    loaded, note = hub.load_hub("someone/studio-cards", local)
    assert [Path(c["path"]).name for c in loaded.cards] == ["mine.json"]
    assert note.endswith("only the local ones.") and "someone/studio-cards" in note


def test_the_machines_view_gathers_this_studios_the_projects_and_a_datasets_cards(monkeypatch, local):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    found = hub.machines("someone/studio-cards", folder=local, here="no machine")
    assert found.note.startswith("Offline (HF_HUB_OFFLINE)") and found.refused == []
    assert len(found.tables["sd15-arch"]) == 6 + 1, "the docs' six machines and the local card"
    assert [Path(c["path"]).name for c in found.cards][0] == "mine.json" and len(found.cards) == 7
    assert found.data() == {"tables": found.tables, "refused": [], "note": found.note}, "no cards in it"
    assert not any(r["this_machine"] for rows in found.tables.values() for r in rows)
    assert hub.machines(str(local), folder=local / "none", here="x").note is None


def test_compiled_packages_travel_beside_the_card(fake_hub, tmp_path):
    """`--publish` uploads this studio's compiled packages (aot_package) as packages/<key>/..., where the
    technique's `source` setting reads them on another machine."""
    kept = tmp_path / "home" / "packages" / "0123abcd"
    kept.mkdir(parents=True)
    (kept / "package.pt2").write_bytes(b"code")
    (kept / "package.json").write_text("{}")
    files = packages.files(tmp_path / "home" / "packages")
    done = hub.publish(cards_in(tmp_path)[:1], "someone/studio-cards", files)
    assert done.uploaded == [
        "cards/card-0.json",
        "packages/0123abcd/package.pt2",
        "packages/0123abcd/package.json",
    ]
    assert "Published 1 card(s) and 1 compiled package(s)" in done.message


def test_a_package_source_on_the_hub_is_downloaded_and_offline_is_a_sentence(monkeypatch, tmp_path):
    published = tmp_path / "snapshot"
    (published / "packages" / "0123abcd").mkdir(parents=True)
    asked = []

    def snapshot_download(repo_id, repo_type=None, allow_patterns=None):
        asked.append((repo_id, repo_type, allow_patterns))
        return str(published)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    roots, note = packages.roots("someone/studio-cards")
    assert roots[0] == published / "packages" and note == ""
    patterns = ["packages/*/package.pt2", "packages/*/package.json"]
    assert asked == [("someone/studio-cards", "dataset", patterns)]

    def offline(repo_id, **kw):
        raise huggingface_hub.errors.LocalEntryNotFoundError("Cannot reach the Hub (offline)")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    roots, note = packages.roots("someone/studio-cards")
    assert roots[-1] == packages.cache_root() and len(roots) <= 2
    assert note.startswith("The compiled packages of someone/studio-cards could not be downloaded")
    assert "offline" in note and note.endswith("not used.")
