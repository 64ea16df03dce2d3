"""Catalogue roles: the detectors read exporter families by role, so a renamed family is a data change."""

from __future__ import annotations

from dataclasses import replace
from importlib import resources
from pathlib import Path

import pytest

from peerwatch.catalog import Catalog, RoleError, Roles, parse_families
from peerwatch.detect.failslow import ROLES as FAILSLOW_ROLES
from peerwatch.detect.failslow import TEMPERATURE, VIOLATIONS
from peerwatch.detect.states import LINK_STATES, PCIE
from peerwatch.engine import analyze_frames, load_frames
from peerwatch.frames import Frame
from peerwatch.model import Alarm, SeriesKey
from peerwatch.simulate import FaultRequest, Scenario, default_spec, simulate, write_recording

# Roles the detectors ask for by literal name (states, groups, cluster, failslow): each must exist.
ASKED = {"activity", "gpu_utilization", "xid", "throttle_reasons", "nfs_requests", "nfs_response_time"}


def _data(name: str) -> str:
    return resources.files("peerwatch.catalog").joinpath(name).read_text(encoding="utf-8")


def test_every_role_the_detectors_read_exists_and_names_catalogued_families() -> None:
    roles, catalog = Roles.default(), Catalog.default()
    asked = ASKED | set(LINK_STATES) | set(PCIE) | {cap for _, cap in PCIE.values()}
    asked |= {role for _, role in FAILSLOW_ROLES} | {TEMPERATURE, *VIOLATIONS}
    assert asked <= set(roles.families_of), asked - set(roles.families_of)
    for role, names in roles.families_of.items():
        for name in names:
            family = catalog.lookup(name)
            assert family is not None and family.name == name, (role, name)
    assert roles.scale("DCGM_FI_PROF_GR_ENGINE_ACTIVE") == 100.0 and roles.scale("DCGM_FI_DEV_GPU_UTIL") == 1.0


def test_first_and_present_follow_the_order_of_preference() -> None:
    roles = Roles.from_text('[r]\nfamilies = ["a", "b", "c"]\n', "t.toml")
    assert roles.first("r", {"c": 3, "b": 2}) == 2
    assert list(roles.present("r", {"c": 3, "a": 1})) == [1, 3]
    assert roles.first("r", {}) is None
    with pytest.raises(KeyError):
        roles.families("nope")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[r]\nfamilies = []\n", r"t\.toml: \[r\]: families must be a non-empty list"),
        ('[r]\nfamilies = ["a"]\norder = 1\n', r"t\.toml: \[r\]: expected a table with families"),
        ('[r]\nfamilies = ["a"]\nscale = { b = 2.0 }\n', r"t\.toml: \[r\]: scale maps"),
        ('[r]\nfamilies = ["a"]\nscale = { a = 2.0 }\n[s]\nfamilies = ["a"]\nscale = { a = 3.0 }\n', "differs"),
        ("[r\n", r"t\.toml: "),
    ],
)
def test_bad_role_tables_name_the_file_and_role(text: str, message: str) -> None:
    with pytest.raises(RoleError, match=message):
        Roles.from_text(text, "t.toml")


# A newer exporter's names for the same metrics (synthetic names: the rename is the point).
RENAMED = {
    "DCGM_FI_DEV_GPU_UTIL": "DCGM_FI_DEV_GPU_UTILIZATION",
    "DCGM_FI_DEV_PCIE_LINK_GEN": "DCGM_FI_DEV_PCIE_LINK_GENERATION",
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": "DCGM_FI_DEV_PCIE_MAX_LINK_GENERATION",
    "DCGM_FI_DEV_XID_ERRORS": "DCGM_FI_DEV_XID_LAST",
    "node_infiniband_state_id": "node_infiniband_port_state_id",
}


def _renamed_frames(frames: dict[str, Frame]) -> dict[str, Frame]:
    out = {}
    for name, f in frames.items():
        new = RENAMED.get(name, name)
        out[new] = replace(f, name=new, keys=tuple(SeriesKey(new, k.labels) for k in f.keys))
    return out


def _catalog(roles: Roles) -> Catalog:
    text = _data("families.csv")
    for old, new in RENAMED.items():
        text = text.replace(f"\n{old},", f"\n{new},")
    return Catalog(parse_families(text, "families.csv (renamed)"), roles=roles)


def _view(alarms: list[Alarm]) -> list[tuple[object, ...]]:
    return [(a.ts, a.node, a.component, a.diagnosis, a.severity, a.action, round(a.score, 6)) for a in alarms]


@pytest.fixture(scope="module")
def frames(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Frame]:
    out = tmp_path_factory.mktemp("roles") / "rec"
    faults = (
        FaultRequest("pcie_downgrade", node="gpu005", at=0.4),
        FaultRequest("nvlink_xid", node="gpu003", gpu=2, at=0.6),
        FaultRequest("ib_port_down", node="gpu007", at=0.7),
    )
    write_recording(simulate(Scenario("roles", default_spec(10), hours=1.5, seed=5, faults=faults)), out)
    return load_frames([str(Path(out) / "metrics.jsonl")])


def test_a_family_renamed_in_the_catalogue_and_listed_in_its_role_detects_the_same(frames: dict[str, Frame]) -> None:
    before = analyze_frames(frames)
    assert {a.diagnosis for a in before} >= {"pcie_downgrade", "nvlink", "ib_link"}
    text = _data("roles.toml")
    for old, new in RENAMED.items():  # the new name preferred: the old one stays for older exporters
        text = text.replace(f'"{old}"', f'"{new}", "{old}"', 1)
    roles = Roles.from_text(text, "roles.toml (renamed)")
    assert _view(analyze_frames(_renamed_frames(frames), catalog=_catalog(roles))) == _view(before)
    # The same data with the role table not knowing the new names: the detectors no longer see them.
    blind = analyze_frames(_renamed_frames(frames), catalog=_catalog(Roles.default()))
    assert _view(blind) != _view(before)
