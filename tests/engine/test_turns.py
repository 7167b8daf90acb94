"""Runs take turns on a device in the order they asked: a run that asks while a sweep computes goes before the
sweep's next run; a thread holding the turn takes it again."""

from __future__ import annotations

import threading
import time

from studio.engine import turns


def test_runs_take_the_device_in_the_order_they_asked_and_never_together():
    order, inside = [], []
    holding, release = threading.Event(), threading.Event()

    def sweep_run(name: str, hold: bool = False) -> None:
        with turns.turn("cpu"):
            inside.append(name)
            assert len(inside) == 1, f"{inside} computed together"
            order.append(name)
            if hold:
                holding.set()
                release.wait(30)
            inside.remove(name)

    first = threading.Thread(target=sweep_run, args=("sweep run 1", True))
    first.start()
    holding.wait(30)
    waiting = []
    for name in ("another visitor's generate", "sweep run 2"):
        thread = threading.Thread(target=sweep_run, args=(name,))
        thread.start()
        waiting.append(thread)
        while len(turns._waiting["cpu"]) < len(waiting):  # asked, and waiting for its turn
            time.sleep(0.01)
    release.set()
    for thread in (first, *waiting):
        thread.join(30)
    assert order == ["sweep run 1", "another visitor's generate", "sweep run 2"]


def test_a_thread_holding_the_turn_takes_it_again_and_other_devices_are_free():
    def on_the_gpu() -> None:
        with turns.turn("cuda:0"):
            pass

    with turns.turn("cpu"), turns.turn("cpu"):
        other = threading.Thread(target=on_the_gpu)
        other.start()
        other.join(5)
        assert not other.is_alive(), "another device waited for the cpu's turn"
