"""The unit a plot's y axis is labelled with: the help text's "(in X)", else the name's suffix, else the
category; counters (drawn as per-second rates) get "/s"."""

from __future__ import annotations

import pytest

from peerwatch.catalog.load import Catalog
from peerwatch.catalog.units import unit_rules


@pytest.mark.parametrize(
    ("metric", "rate", "unit"),
    [
        ("DCGM_FI_DEV_FB_FREE", False, "MiB"),  # help: "Framebuffer memory free (in MiB)."
        ("DCGM_FI_DEV_GPU_TEMP", False, "°C"),  # help says "(in C)"
        ("DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", True, "ns/s"),  # a counter of nanoseconds, as a rate
        ("node_network_receive_bytes_total", True, "B/s"),
        ("DCGM_FI_PROF_NVLINK_TX_BYTES", True, "B/s"),  # upper-case names too
        ("node_hwmon_temp_celsius", False, "°C"),
        ("node_cpu_seconds_total", True, "s/s"),
        ("node_load1", False, ""),  # nothing says: no unit invented
        ("node_intr_total", True, "/s"),
        ("some_unknown_family_bytes", False, "B"),  # not catalogued: the name still says
    ],
)
def test_units(metric: str, rate: bool, unit: str) -> None:
    assert unit_rules().unit(metric, rate) == unit


def test_every_help_unit_is_short() -> None:
    """Units come out as axis labels: none of the catalogue's is a sentence."""
    units = {unit_rules().unit(f.name, f.mtype == "counter") for f in Catalog.default()}
    assert max(len(u) for u in units) <= 12 and "MHz" in units and "W" in units
