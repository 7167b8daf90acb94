"""A public studio keeps its visitors apart: started as a Space, each `gradio_client` visitor reads only its
own runs through every endpoint that reads the run log; the owner (a `STUDIO_AUTH` login named as the
Space's author) reads every run; a visitor downloads and deletes their own history."""

from __future__ import annotations

import http.server
import json
import sqlite3
import threading
import time
import zipfile

import httpx
import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

from tests.server import Server

pytestmark = pytest.mark.slow
SECRET_A = "a big red circle on the left, on a black background"
SECRET_B = "a small blue square at the top, on a white background"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("space")
    srv = Server(home, SPACE_ID="someone/studio", SPACE_AUTHOR_NAME="someone").start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def visits(server):
    """Two visitors, each with one run of its own: (client, run id) for A and for B."""
    made = {}
    for name, prompt in (("a", SECRET_A), ("b", SECRET_B)):
        client = Client(server.url, verbose=False)
        _, _, run = client.predict(prompt=prompt, seed=4, steps=2, api_name="/generate")
        made[name] = (client, run["run_id"])
    return made


def runs_in_history(client) -> set[int]:
    *_, records = client.predict(limit=100, api_name="/history")
    return {r["run_id"] for r in records}


def test_each_visitor_reads_only_its_own_runs_in_history(visits):
    (a, a_run), (b, b_run) = visits["a"], visits["b"]
    assert runs_in_history(a) == {a_run}
    assert runs_in_history(b) == {b_run}
    mcp = b.predict(limit=100, api_name="/mcp_history")
    assert [r["run_id"] for r in mcp] == [b_run]


def test_another_visitors_run_cannot_be_loaded_into_the_form(visits):
    (b, _), (_, a_run) = visits["b"], visits["a"]
    with pytest.raises(AppError, match=f"There is no run {a_run} in the run log"):
        b.predict(a_run, api_name="/load_config")
    own = b.predict(visits["b"][1], api_name="/load_config")
    assert SECRET_B in own


def test_the_database_a_visitor_downloads_holds_its_runs_alone(visits, tmp_path):
    b, _ = visits["b"]
    path = b.predict(api_name="/export_db")
    with sqlite3.connect(path) as db:
        prompts = {row[0] for row in db.execute("select prompt from runs")}
        raw = open(path, "rb").read()
    assert prompts == {SECRET_B}
    assert SECRET_A.encode() not in raw, "another visitor's prompt is still in the file's free pages"


def test_the_timeline_counts_a_visitors_own_runs(visits):
    (a, _), (b, _) = visits["a"], visits["b"]
    for client in (a, b):
        *_, eras = client.predict(model="tiny-shapes", steps=2, width=64, height=64, api_name="/timeline")
        assert sum(len(era["runs"]) for era in eras) == 1


def test_the_owner_reads_every_visitors_runs(server, visits, tmp_path):
    """The Space's author, signed in (here with STUDIO_AUTH, on a copy of the same run log), reads every
    visitor's runs and loads any of them."""
    home = tmp_path / "owner"
    home.mkdir()
    with sqlite3.connect(server.home / "runs.db") as source, sqlite3.connect(home / "runs.db") as copy:
        source.backup(copy)
    owner_server = Server(
        home, SPACE_ID="someone/studio", SPACE_AUTHOR_NAME="someone", STUDIO_AUTH="someone:pw"
    )
    owner_server.start()
    try:
        owner = Client(owner_server.url, verbose=False, auth=("someone", "pw"))
        everyone = {visits["a"][1], visits["b"][1]}
        assert everyone <= runs_in_history(owner)
        assert SECRET_A in owner.predict(visits["a"][1], api_name="/load_config")
    finally:
        owner_server.stop()


def test_images_are_not_served_by_url(server, visits):
    outputs = server.home / "outputs"
    image = next(outputs.glob("run-*.png"))
    answer = httpx.get(f"{server.url}gradio_api/file={image}", timeout=10)
    assert answer.status_code == 403


def test_a_visitor_downloads_then_deletes_its_history(server, tmp_path):
    c = Client(server.url, verbose=False)
    _, _, run = c.predict(prompt=SECRET_A, seed=9, steps=2, api_name="/generate")
    archive = c.predict(api_name="/my_history")
    with zipfile.ZipFile(archive) as z:
        names = z.namelist()
        z.extract("runs.db", tmp_path)
    assert f"images/run-{run['run_id']:06d}-0.png" in names
    with sqlite3.connect(tmp_path / "runs.db") as db:
        assert [r[0] for r in db.execute("select id from runs")] == [run["run_id"]]
    said = c.predict(api_name="/forget_my_history")
    assert said == "Deleted 1 run of yours and their images."
    assert runs_in_history(c) == set()
    assert not list((server.home / "outputs").glob(f"run-{run['run_id']:06d}-*.png"))
    with pytest.raises(AppError, match=f"There is no run {run['run_id']}"):
        c.predict(run["run_id"], api_name="/load_config")


def test_a_flooding_visitor_is_refused_past_its_bound_and_others_still_get_through(server):
    """Five jobs at once from one visitor: two admitted (the bound), three refused with a sentence before
    they queue (each admitted job takes seconds, the five are sent within milliseconds); another visitor's
    Generate meanwhile runs; once the flood ends the flooder may send again."""
    from gradio_client.exceptions import ValidationError

    flooder = Client(server.url, verbose=False)
    jobs = [flooder.submit(prompt=SECRET_A, seed=i, steps=120, api_name="/generate") for i in range(5)]
    polite = Client(server.url, verbose=False)
    _, _, run = polite.predict(prompt=SECRET_B, seed=1, steps=2, api_name="/generate")
    assert run["status"] == "ok"
    answers = []
    for job in jobs:
        try:
            answers.append(job.result(timeout=300)[2]["status"])
        except ValidationError as exc:
            answers.append(str(exc))
    assert answers.count("ok") == 2, answers
    refusals = [a for a in answers if a != "ok"]
    assert len(refusals) == 3 and all("You already have 2 jobs waiting or running" in a for a in refusals)
    _, _, again = flooder.predict(prompt=SECRET_A, seed=9, steps=2, api_name="/generate")
    assert again["status"] == "ok"


def test_a_long_sweep_holds_another_visitors_generate_behind_one_of_its_runs_not_all(server):
    """Visitor A's Compare is many runs; visitor B's Generate, sent once A's sweep is under way, takes the
    next turn on the CPU and comes back while A's sweep still runs."""
    from gradio_client.utils import Status

    a, b = Client(server.url, verbose=False), Client(server.url, verbose=False)
    sweep = a.submit(
        prompt=SECRET_A,
        seed=3,
        steps=40,
        presets=["channels_last", "classic_attention", "fused_qkv"],
        warmup=0,
        rounds=5,
        api_name="/compare",
    )
    while sweep.status().code not in (Status.PROCESSING, Status.PROGRESS):  # under way before B asks
        assert not sweep.done(), sweep.result()
        time.sleep(0.05)
    _, _, run = b.predict(prompt=SECRET_B, seed=2, steps=2, api_name="/generate")
    assert run["status"] == "ok"
    assert not sweep.done(), "B's Generate waited for A's whole sweep"
    assert sweep.result(timeout=600)[-1], "A's sweep finished with its rows"


class FakeHub(http.server.BaseHTTPRequestHandler):
    """The hub's `whoami-v2` for two tokens: each names its account; any other token is refused (401)."""

    ACCOUNTS = {"hf_alice0000": "alice", "hf_bob00000000": "bob"}

    def do_GET(self):  # noqa: N802 (http.server's name)
        token = (self.headers.get("authorization") or "").removeprefix("Bearer ")
        name = self.ACCOUNTS.get(token) if self.path == "/api/whoami-v2" else None
        body = json.dumps({"name": name, "type": "user"} if name else {"error": "Invalid credentials"})
        self.send_response(200 if name else 401)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


def test_an_api_caller_is_the_account_of_the_token_it_sends(tmp_path):
    """Two clients sending one account's token read that account's runs (a new session included); another
    account's token, an unknown token and no token each read only their own."""
    hub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    srv = Server(tmp_path, SPACE_ID="someone/studio", SPACE_AUTHOR_NAME="someone")
    srv.env.update(HF_HUB_OFFLINE="0", HF_ENDPOINT=f"http://127.0.0.1:{hub.server_address[1]}")
    srv.start()
    try:
        alice = Client(srv.url, verbose=False, token="hf_alice0000")
        _, _, run = alice.predict(prompt=SECRET_A, seed=4, steps=2, api_name="/generate")
        again = Client(srv.url, verbose=False, token="hf_alice0000")
        assert runs_in_history(again) == {run["run_id"]}
        assert SECRET_A in again.predict(run["run_id"], api_name="/load_config")
        for other in ("hf_bob00000000", "hf_unknown000", None):
            assert runs_in_history(Client(srv.url, verbose=False, token=other)) == set(), other
    finally:
        srv.stop()
        hub.shutdown()
