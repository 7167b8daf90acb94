"""The public server: bounded queue, no file served but generated outputs, secrets kept out, optional auth."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote

import httpx
import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError
from PIL import Image

from tests.server import Server, generate_args

TOKEN = "hf_fakeSECRETtoken123"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("hard"), HF_TOKEN=TOKEN).start()  # the studio's default queue
    yield srv
    srv.stop()


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "{db}",
        "{home}/../../etc/passwd",
        quote("../../etc/passwd", safe=""),
        "..%2f..%2fetc%2fpasswd",
        "{home}/server.log",
        "app.py",
    ],
)
def test_file_routes_refuse_everything_but_outputs(server, path):
    path = path.format(db=server.home / "runs.db", home=server.home)
    for prefix in ("gradio_api/file=", "file="):
        r = httpx.get(server.url + prefix + path, timeout=10)
        assert r.status_code in (403, 404), (prefix, path, r.status_code)
        assert "root:" not in r.text and "SQLite format" not in r.text


def test_generated_outputs_are_served(server):
    client = Client(server.url, verbose=False)
    image_path, _, metrics = client.predict(*generate_args(), api_name="/generate")
    assert image_path.endswith(".png") and metrics["run_id"] >= 1


def test_secrets_stay_out_of_api_info_logs_errors_and_database(server):
    client = Client(server.url, verbose=False)
    with pytest.raises(AppError) as info:
        client.predict(*generate_args(model="nobody/private-model"), api_name="/generate")
    assert "Could not load" in str(info.value) and TOKEN not in str(info.value)
    texts = [httpx.get(server.url + p, timeout=10).text for p in ("gradio_api/info", "config")]
    texts.append(str(client.predict(api_name="/system")))
    texts.append(server.log())
    texts.append((server.home / "runs.db").read_bytes().decode("latin-1"))
    for text in texts:
        assert TOKEN not in text


def test_optional_authentication(tmp_path):
    srv = Server(tmp_path, STUDIO_AUTH="ada:lovelace")
    try:
        srv.start(path="")
        r = httpx.post(srv.url + "gradio_api/call/system", json={"data": []}, timeout=10)
        assert r.status_code in (401, 403)
        with pytest.raises(Exception, match="(?i)login|auth|401|403"):
            Client(srv.url, verbose=False).predict(api_name="/system")
        client = Client(srv.url, auth=("ada", "lovelace"), verbose=False)
        assert "cpu" in client.predict(api_name="/system")[0]["hardware"]["devices"]
    finally:
        srv.stop()


def test_concurrent_clients_get_the_images_they_would_get_alone(server):
    """Eight clients at once, with seeds no other test here draws: each gets the image it gets alone, and
    each of the 16 runs is logged once, ok."""
    seeds = range(300, 308)
    client = Client(server.url, verbose=False)

    def pixels(c: Client, seed: int) -> bytes:
        """The image's pixels (each PNG also carries its own run id and timings as text)."""
        return Image.open(c.predict(*generate_args(seed=seed), api_name="/generate")[0]).tobytes()

    alone = {s: pixels(client, s) for s in seeds}
    with ThreadPoolExecutor(len(seeds)) as pool:
        together = dict(
            zip(seeds, pool.map(lambda s: pixels(Client(server.url, verbose=False), s), seeds), strict=True)
        )
    assert together == alone
    from studio.runlog import RunLog

    runs = [r for r in RunLog(server.home / "runs.db").runs(limit=1000) if r["seed"] in seeds]
    assert len(runs) == 16 and {r["status"] for r in runs} == {"ok"}


def _run_row(home, seed):
    with sqlite3.connect(f"file:{home / 'runs.db'}?mode=ro", uri=True) as db:
        return db.execute(
            "select status, error from runs where seed = ? order by id desc", (seed,)
        ).fetchone()


def test_client_disconnect_mid_run_is_logged_cancelled_and_frees_the_slot(server):
    seed = 4242
    script = (
        f"from gradio_client import Client\n"
        f"Client({server.url!r}, verbose=False).predict(*{generate_args(steps=200, seed=seed)!r}, "
        "api_name='/generate')"
    )
    client_proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        while (_run_row(server.home, seed) or ("",))[0] != "running":
            assert time.monotonic() < deadline and client_proc.poll() is None, "the run never started"
            time.sleep(0.2)
        time.sleep(1.0)  # a few denoising steps in
    finally:
        client_proc.kill()  # the client vanishes: its connection closes without a word
        client_proc.wait()
    deadline = time.monotonic() + 30
    while _run_row(server.home, seed)[0] == "running":
        assert time.monotonic() < deadline, "the run kept computing for a client that is gone"
        time.sleep(0.2)
    status, error = _run_row(server.home, seed)
    assert status == "cancelled" and "the client disconnected" in error, (status, error)
    start = time.monotonic()
    health = Client(server.url, verbose=False).predict(*generate_args(), api_name="/generate")
    assert health[2]["latency_s"] > 0 and time.monotonic() - start < 60, "the slot must be free again"


def test_it_listens_where_the_studio_or_a_space_says(monkeypatch):
    """STUDIO_HOST/STUDIO_PORT first; else Gradio's GRADIO_SERVER_NAME/PORT (a Hugging Face Space sets
    0.0.0.0: listening on 127.0.0.1 there, the Space would never answer); else this machine only, on 7860."""
    from studio.ui import launch_kwargs

    for name in ("STUDIO_HOST", "STUDIO_PORT", "GRADIO_SERVER_NAME", "GRADIO_SERVER_PORT"):
        monkeypatch.delenv(name, raising=False)
    assert (launch_kwargs()["server_name"], launch_kwargs()["server_port"]) == ("127.0.0.1", 7860)
    monkeypatch.setenv("GRADIO_SERVER_NAME", "0.0.0.0")
    monkeypatch.setenv("GRADIO_SERVER_PORT", "7861")
    assert (launch_kwargs()["server_name"], launch_kwargs()["server_port"]) == ("0.0.0.0", 7861)
    monkeypatch.setenv("STUDIO_HOST", "127.0.0.2")
    monkeypatch.setenv("STUDIO_PORT", "7999")
    assert (launch_kwargs()["server_name"], launch_kwargs()["server_port"]) == ("127.0.0.2", 7999)
