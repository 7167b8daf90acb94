"""The schedulers a request may name: how a menu shows them, and which step counts each can take."""

from __future__ import annotations

import diffusers

from pipelines.schedulers import SCHEDULERS, menu_choices, steps_refused


def test_the_menu_offers_every_scheduler_once_under_the_name_automatic1111_users_know():
    choices = dict((value, label) for label, value in menu_choices())
    assert list(choices) == list(SCHEDULERS)
    assert choices["pndm"] == "PLMS (pndm)" and choices["dpmpp_2m"] == "DPM++ 2M (dpmpp_2m)"
    assert choices["default"] == "Model's own"


def test_a_step_count_a_scheduler_cannot_take_is_told_apart_from_one_set_by_its_pipeline():
    warm_up = diffusers.PNDMScheduler(skip_prk_steps=False)  # Runge-Kutta warm-up: 4 steps or more
    assert steps_refused(warm_up, 3) and steps_refused(warm_up, 4) is None
    assert steps_refused(diffusers.PNDMScheduler(skip_prk_steps=True), 1) is None
    # flow matching's dynamic shift wants the pipeline's `mu`: not a question of steps, so not refused
    flow = diffusers.FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True)
    assert steps_refused(flow, 2) is None
