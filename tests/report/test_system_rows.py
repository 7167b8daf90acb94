"""This machine in words (the System view and `python -m studio system`): its RAM, and the version of every
library that shapes a run's speed, OpenVINO and NNCF among them."""

from __future__ import annotations

import psutil

from studio import devices, settings
from studio.report import machine_rows


def test_the_rows_name_the_ram_and_the_runtimes_that_shape_speed():
    hw = devices.detect().summary()
    rows = dict(machine_rows(hw, settings.versions()))
    assert rows["RAM"] == f"{round(psutil.virtual_memory().total / 2**30, 1):g} GB"
    for library in ("torch", "diffusers", "openvino", "nncf"):
        assert f"{library} " in rows["Libraries"], rows["Libraries"]


def test_a_hardware_record_without_ram_has_no_ram_row():
    hw = {**devices.detect().summary(), "ram_gb": 0}
    assert "RAM" not in dict(machine_rows(hw, {}))
