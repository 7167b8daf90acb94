"""`python -m studio packages`: what the compiled packages kept cost on disk, and removing them."""

from __future__ import annotations

import json

import pytest

from studio.cli import main


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_HOME", str(tmp_path))
    for key, size in (("aaa111", 3_000_000), ("bbb222", 5_200_000)):
        folder = tmp_path / "packages" / key
        folder.mkdir(parents=True)
        (folder / "package.pt2").write_bytes(b"x" * 10)
        meta = {"format": 1, "model": "sd15-arch", "part": "UNet", "inputs": "2x4x32x32", "compile_s": 103.3}
        meta |= {"size_mb": size / 1e6, "created_at": "2026-11-28 12:34"}
        meta["environment"] = {"torch": "2.13.0+cpu", "device": "cpu"}
        (folder / "package.json").write_text(json.dumps(meta))
    return tmp_path


def test_the_listing_says_what_each_package_is_and_the_total_on_disk(home, capsys):
    assert main(["packages"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("2 compiled package(s), 8.2 MB in ")
    assert "aaa111  sd15-arch UNet at 2x4x32x32  3.0 MB  compiled in 103 s" in out
    assert main(["packages", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["total_mb"] == 8.2 and [p["key"] for p in data["packages"]] == ["aaa111", "bbb222"]


def test_remove_deletes_one_or_all_and_an_unknown_key_is_a_sentence(home, capsys):
    assert main(["packages", "--remove", "aaa111", "--json"]) == 0
    assert [p["key"] for p in json.loads(capsys.readouterr().out)["packages"]] == ["bbb222"]
    assert not (home / "packages" / "aaa111").exists()
    assert main(["packages", "--remove", "nope"]) == 2
    assert "No compiled package 'nope' is kept" in capsys.readouterr().err
    assert main(["packages", "--remove", "all"]) == 0
    assert not list((home / "packages").iterdir())
