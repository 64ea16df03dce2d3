"""The metric catalogue: coverage of real exporter outputs, row sanity, spot checks, lookup, rules, errors."""

from __future__ import annotations

import csv
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from peerwatch.catalog import (
    COLUMNS,
    Catalog,
    CatalogError,
    Category,
    Direction,
    Family,
    RuleError,
    RuleSet,
    Unit,
    looks_like_state,
    observed_kind,
)
from peerwatch.catalog.load import MTYPES

NaN = np.nan
SAMPLES = Path(__file__).resolve().parents[1] / "src" / "peerwatch" / "data" / "samples"
# node_exporter's textfile-collector test metrics: user data, not node_exporter's; explained by rules
TEXTFILE_FIXTURE = re.compile(r"^testmetric\d_\d$")


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.default()


def exposition_names(path: Path) -> tuple[set[str], set[str]]:
    """(names in # TYPE lines, sample names) of a text exposition, parsed simply."""
    types: set[str] = set()
    samples: set[str] = set()
    for line in path.read_text(encoding="utf-8").split("\n"):  # not splitlines: label values hold U+2028
        if line.startswith("# TYPE "):
            types.add(line.split()[2])
        elif line and not line.startswith("#"):
            match = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line)
            assert match, line
            samples.add(match.group(0))
    return types, samples


def unexplained(catalog: Catalog, names: set[str]) -> list[str]:
    return sorted(n for n in names if catalog.lookup(n) is None)


# ---- every family the exporters publish is known ----


def test_node_exporter_e2e_output_fully_known(catalog: Catalog, shared_data: Path) -> None:
    types, samples = exposition_names(shared_data / "node_exporter" / "e2e-output.txt")
    assert len(types) == 1228
    fixture = {n for n in types | samples if TEXTFILE_FIXTURE.match(n)}
    assert len(fixture) == 4
    assert unexplained(catalog, (types | samples) - fixture) == []
    for name in fixture:  # not node_exporter's own families: made up by rules, never dropped
        assert catalog.classify(name, frozenset({"foo"}), "untyped").source.startswith("rule:")


def test_node_exporter_timex_names_from_source_note_known(catalog: Catalog, shared_data: Path) -> None:
    note = (shared_data / "node_exporter" / "SOURCE.md").read_text(encoding="utf-8")
    names = set(re.findall(r"node_timex_\w+", note)) - {"node_timex_"}
    assert len(names) == 17
    assert unexplained(catalog, names) == []


@pytest.mark.parametrize(
    "path",
    [
        "datadog-dcgm-fixture/metrics.txt",
        "all-smi/sample-metrics-docker-cpu-only.prom",
    ],
)
def test_real_scrapes_fully_known(catalog: Catalog, shared_data: Path, path: str) -> None:
    types, samples = exposition_names(shared_data / path)
    assert types and samples
    assert unexplained(catalog, types | samples) == []


@pytest.mark.parametrize("name", ["node_exporter.prom", "dcgm_exporter.prom", "all_smi.prom"])
def test_bundled_samples_fully_known(catalog: Catalog, name: str) -> None:
    types, samples = exposition_names(SAMPLES / name)
    assert unexplained(catalog, {n for n in types | samples if not TEXTFILE_FIXTURE.match(n)}) == []


def test_dcgm_counter_csvs_fully_known_including_commented_fields(catalog: Catalog, shared_data: Path) -> None:
    names: set[str] = set()
    labels: set[str] = set()
    for path in (shared_data / "dcgm-exporter").glob("*.csv"):
        for line in path.read_text(encoding="utf-8").splitlines():
            match = re.match(r"^\s*#?\s*((?:DCGM|dcgm)_\w+)\s*,\s*(\w+)\s*,", line)
            if match:
                (labels if match.group(2) == "label" else names).add(match.group(1))
    assert len(names) > 80 and "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" in names  # a commented-out field
    assert unexplained(catalog, names) == []
    assert all(catalog.lookup(n) is None for n in labels)  # label-type fields are labels, not series


def test_all_smi_names_and_api_doc_fully_known(catalog: Catalog, shared_data: Path) -> None:
    folder = shared_data / "all-smi"
    listed = set((folder / "metric-names.txt").read_text(encoding="utf-8").split())
    assert len(listed) == 181
    documented = {n for n in re.findall(r"`(all_smi_\w+)`", (folder / "API.md").read_text()) if not n.endswith("_")}
    assert unexplained(catalog, listed | documented) == []
    assert all(catalog.lookup(n).exporter == "all_smi" for n in listed)  # type: ignore[union-attr]


def test_backend_ai_declared_and_exposed_names_known(catalog: Catalog, shared_data: Path) -> None:
    with (shared_data / "backend.ai" / "metrics.csv").open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 59
    for row in rows:
        declared, mtype = row["metric_name_as_declared"], row["type"]
        family = catalog.lookup(declared)
        assert family is not None and family.mtype == mtype and family.exporter == "backend_ai", declared
        if mtype == "counter":
            assert catalog.lookup(declared.removesuffix("_total") + "_total") is family
        if mtype == "histogram":
            for suffix in ("_bucket", "_sum", "_count", "_created"):
                assert catalog.family_name(declared + suffix) == declared


# ---- every row is sane ----


ENTITY_OF_UNIT = {  # the first entity label (alternatives) each unit must name
    Unit.gpu: {"gpu", "gpu_index|index", "npu_index|index", "gpu_index"},
    Unit.gpu_link: {"gpu", "gpu_index|index"},
    Unit.ib_port: {"device"},
    Unit.nfs_mount: {"export"},
    Unit.filesystem: {"mountpoint", "mount_point", "uuid", "device", "zpool"},
    Unit.network_device: {"device", "master", "fc_host"},
    Unit.disk: {"device", "backing_device|cache_device|uuid"},
    Unit.cpu_core: {"cpu", "core_id", "package"},
    Unit.nvswitch: {"nvswitch"},
    Unit.pci_device: {"segment"},
    Unit.numa_node: {"node"},
}


def test_every_row_uses_the_vocabularies_consistently(catalog: Catalog) -> None:
    assert len(catalog) > 1900
    for f in catalog:
        assert f.mtype in MTYPES and f.source == "catalog" and f.known, f.name
        assert isinstance(f.category, Category) and isinstance(f.unit, Unit) and isinstance(f.bad, Direction)
        if f.unit in ENTITY_OF_UNIT:
            assert f.entity_labels and f.entity_labels[0] in ENTITY_OF_UNIT[f.unit], f.name
        if f.category is Category.error_counter:
            assert f.bad is Direction.up, f.name
        if f.category is Category.state:
            assert f.bad is not Direction.none, f.name
        if f.category in (Category.info, Category.runtime):
            assert f.bad is Direction.none, f.name
        assert (f.category is Category.runtime) == (f.exporter == "client_library"), f.name
        if f.mtype in ("histogram", "summary"):
            assert not re.search(r"_(bucket|sum|count|created)$", f.name), f.name


def test_counts_by_exporter_category_and_unit(catalog: Catalog) -> None:
    by_exporter = Counter(f.exporter for f in catalog)
    by_category = Counter(f.category.value for f in catalog)
    by_unit = Counter(f.unit.value for f in catalog)
    print("\nfamilies by exporter:", dict(by_exporter.most_common()))
    print("families by category:", dict(by_category.most_common()))
    print("families by unit:", dict(by_unit.most_common()))
    errors = {e: n for (e, c), n in Counter((f.exporter, f.category) for f in catalog).items() if c == "error_counter"}
    states = {e: n for (e, c), n in Counter((f.exporter, f.category) for f in catalog).items() if c == "state"}
    print("error counters by exporter:", errors, "states by exporter:", states)
    assert by_exporter["node_exporter"] >= 1224 and by_exporter["all_smi"] >= 181 and by_exporter["backend_ai"] == 59
    assert by_exporter["prometheus"] >= 5 and by_exporter["dcgm_exporter"] >= 100
    # the reference cluster had 28 error counters and 11 states active; the catalogue knows more
    assert errors["node_exporter"] >= 28 and errors["dcgm_exporter"] >= 28
    assert sum(states.values()) >= 11 and set(states) >= {"node_exporter", "dcgm_exporter", "all_smi", "prometheus"}


# ---- the rows that carry fault signal, checked by hand ----

SPOT = [
    # name, category, unit, bad, entity labels
    ("node_infiniband_link_downed_total", "error_counter", "ib_port", "up", ("device", "port")),
    ("node_infiniband_symbol_error_total", "error_counter", "ib_port", "up", ("device", "port")),
    ("node_infiniband_link_error_recovery_total", "error_counter", "ib_port", "up", ("device", "port")),
    ("node_infiniband_port_errors_received_total", "error_counter", "ib_port", "up", ("device", "port")),
    ("node_infiniband_port_discards_transmitted_total", "error_counter", "ib_port", "up", ("device", "port")),
    ("node_infiniband_state_id", "state", "ib_port", "down", ("device", "port")),
    ("node_infiniband_physical_state_id", "state", "ib_port", "down", ("device", "port")),
    ("node_infiniband_port_data_received_bytes_total", "throughput", "ib_port", "down", ("device", "port")),
    ("DCGM_FI_DEV_XID_ERRORS", "state", "gpu", "up", ("gpu",)),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "error_counter", "gpu", "up", ("gpu",)),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "error_counter", "gpu", "up", ("gpu",)),
    ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "error_counter", "gpu", "up", ("gpu",)),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "error_counter", "gpu", "up", ("gpu",)),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L3", "error_counter", "gpu", "up", ("gpu",)),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "state", "gpu", "up", ("gpu",)),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "error_counter", "gpu", "up", ("gpu",)),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "error_counter", "gpu", "up", ("gpu",)),
    ("DCGM_FI_DEV_RETIRED_DBE", "error_counter", "gpu", "up", ("gpu",)),
    ("DCGM_FI_DEV_PCIE_LINK_GEN", "state", "gpu", "down", ("gpu",)),
    ("DCGM_FI_DEV_PCIE_LINK_WIDTH", "state", "gpu", "down", ("gpu",)),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "state", "gpu", "up", ("gpu",)),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "state", "gpu", "up", ("gpu",)),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "throughput", "gpu", "down", ("gpu",)),
    ("DCGM_FI_DEV_GPU_TEMP", "temperature", "gpu", "up", ("gpu",)),
    ("DCGM_FI_DEV_GPU_UTIL", "utilization", "gpu", "down", ("gpu",)),
    ("DCGM_FI_DEV_NVSWITCH_FATAL_ERRORS", "error_counter", "nvswitch", "up", ("nvswitch",)),
    ("dcgm_ecc_dbe_volatile_total", "error_counter", "gpu", "up", ("gpu",)),
    ("node_network_receive_errs_total", "error_counter", "network_device", "up", ("device",)),
    ("node_network_transmit_drop_total", "discard", "network_device", "up", ("device",)),
    ("node_network_transmit_errs_total", "error_counter", "network_device", "up", ("device",)),
    ("node_network_up", "state", "network_device", "down", ("device",)),
    ("node_network_carrier", "state", "network_device", "down", ("device",)),
    ("node_edac_uncorrectable_errors_total", "error_counter", "node", "up", ("controller",)),
    ("node_nfs_rpc_retransmissions_total", "error_counter", "node", "up", ()),
    ("node_mountstats_nfs_transport_bad_transaction_ids_total", "error_counter", "nfs_mount", "up", ("export",)),
    ("node_mountstats_nfs_operations_major_timeouts_total", "error_counter", "nfs_mount", "up", ("export",)),
    ("node_mountstats_nfs_operations_queue_time_seconds_total", "latency", "nfs_mount", "up", ("export",)),
    ("node_disk_read_time_seconds_total", "latency", "disk", "up", ("device",)),
    ("node_filesystem_avail_bytes", "capacity", "filesystem", "down", ("mountpoint",)),
    ("node_cpu_seconds_total", "utilization", "cpu_core", "both", ("cpu",)),
    ("node_hwmon_temp_celsius", "temperature", "sensor", "up", ("chip", "sensor")),
    ("node_pressure_io_stalled_seconds_total", "load", "node", "up", ()),
    ("node_intr_total", "load", "node", "both", ()),
    ("node_pcidevice_current_link_width", "state", "pci_device", "down", ("segment", "bus", "device", "function")),
    ("node_memory_HardwareCorrupted_bytes", "error_counter", "node", "up", ()),
    ("node_kernel_hung_tasks_total", "error_counter", "node", "up", ()),
    ("up", "state", "exporter", "down", ("job",)),
    ("all_smi_gpu_pcie_gen_current", "state", "gpu", "down", ("gpu_index|index",)),
    ("all_smi_gpu_pcie_width_current", "state", "gpu", "down", ("gpu_index|index",)),
    ("all_smi_gpu_performance_state", "state", "gpu", "up", ("gpu_index|index",)),
    ("all_smi_gpu_temperature_celsius", "temperature", "gpu", "up", ("gpu_index|index",)),
    ("all_smi_up", "state", "exporter", "down", ()),
    ("backendai_async_task_count", "quantity", "node", "up", ()),
    ("backendai_rpc_failure_requests_total", "error_counter", "node", "up", ()),
    ("backendai_scheduler_operation_duration_sec", "latency", "service", "up", ()),
    ("go_goroutines", "runtime", "exporter", "none", ()),
]


@pytest.mark.parametrize(("name", "category", "unit", "bad", "entity"), SPOT)
def test_fault_relevant_rows(
    catalog: Catalog, name: str, category: str, unit: str, bad: str, entity: tuple[str, ...]
) -> None:
    family = catalog.lookup(name)
    assert family is not None, name
    assert (family.category, family.unit, family.bad, family.entity_labels) == (category, unit, bad, entity)


def test_all_smi_entity_is_the_index_not_the_model_name(catalog: Catalog) -> None:
    family = catalog.lookup("all_smi_gpu_utilization")
    assert family is not None
    labels = {"gpu": "NVIDIA H100 80GB HBM3", "gpu_index": "3", "instance": "n1"}
    assert family.component(labels) == "gpu/3"
    assert family.component({"gpu": "NVIDIA H100", "index": "5"}) == "gpu/5"  # older all-smi


# ---- lookup of series names ----


@pytest.mark.parametrize(
    ("sample", "family"),
    [
        ("go_gc_duration_seconds", "go_gc_duration_seconds"),  # summary quantile series
        ("go_gc_duration_seconds_sum", "go_gc_duration_seconds"),
        ("go_gc_duration_seconds_count", "go_gc_duration_seconds"),
        ("backendai_rpc_request_duration_seconds_bucket", "backendai_rpc_request_duration_seconds"),
        ("backendai_rpc_request_duration_seconds_created", "backendai_rpc_request_duration_seconds"),
        ("backendai_api_request_count", "backendai_api_request_count_total"),  # OpenMetrics family name
        ("backendai_api_request_count_created", "backendai_api_request_count_total"),
        ("backendai_bgtask_count", "backendai_bgtask_count"),  # exact beats the _count suffix
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER_total", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"),
        ("node_cpu_seconds_total", "node_cpu_seconds_total"),
    ],
)
def test_lookup_maps_series_names_to_families(catalog: Catalog, sample: str, family: str) -> None:
    assert catalog.family_name(sample) == family
    assert sample in catalog


@pytest.mark.parametrize("sample", ["node_load1_bucket", "node_load1_total", "DCGM_FI_DEV_GPU_TEMP_sum", "nope"])
def test_lookup_rejects_suffixes_that_do_not_fit_the_type(catalog: Catalog, sample: str) -> None:
    assert catalog.lookup(sample) is None
    assert catalog.family_name(sample) == sample


# ---- rules for unknown families ----

RULE_CASES = [
    # name, labels, declared type -> exporter, category, unit, entity labels, bad
    (
        "node_infiniband_foo_errors_total",
        {"device", "port"},
        "counter",
        "node_exporter",
        "error_counter",
        "ib_port",
        ("device", "port"),
        "up",
    ),
    (
        "node_network_new_drops_total",
        {"device"},
        "counter",
        "node_exporter",
        "discard",
        "network_device",
        ("device",),
        "up",
    ),
    (
        "node_hwmon_power_average_watt",
        {"chip", "sensor"},
        "gauge",
        "node_exporter",
        "power",
        "sensor",
        ("chip", "sensor"),
        "both",
    ),
    (
        "node_ethtool_rx_crc_errors",
        {"device"},
        "untyped",
        "node_exporter",
        "error_counter",
        "network_device",
        ("device",),
        "up",
    ),
    ("DCGM_FI_DEV_NEW_TEMP", {"gpu", "UUID"}, "gauge", "dcgm_exporter", "temperature", "gpu", ("gpu",), "up"),
    (
        "DCGM_FI_DEV_NVSWITCH_NEW_ERRORS",
        {"nvswitch"},
        "counter",
        "dcgm_exporter",
        "error_counter",
        "nvswitch",
        ("nvswitch",),
        "up",
    ),
    (
        "DCGM_FI_DEV_NVLINK_NEW_UTIL",
        {"gpu", "nvlink"},
        "gauge",
        "dcgm_exporter",
        "utilization",
        "gpu_link",
        ("gpu", "nvlink"),
        "down",
    ),
    (
        "all_smi_gpu_hbm_temperature_celsius",
        {"gpu", "gpu_index", "gpu_uuid"},
        "gauge",
        "all_smi",
        "temperature",
        "gpu",
        ("gpu_index|index",),
        "up",
    ),
    ("acme_gpu_util", {"gpu_index"}, "gauge", "unknown", "utilization", "gpu", ("gpu_index",), "down"),
    ("acme_board_watts", {"UUID"}, "gauge", "unknown", "power", "gpu", ("UUID",), "both"),
    (
        "acme_port_symbol_errors",
        {"device", "port"},
        None,
        "unknown",
        "error_counter",
        "ib_port",
        ("device", "port"),
        "up",
    ),
    ("acme_mount_latency_seconds", {"export"}, "histogram", "unknown", "latency", "nfs_mount", ("export",), "up"),
    ("acme_fs_used_bytes", {"mountpoint"}, "gauge", "unknown", "memory", "filesystem", ("mountpoint",), "both"),
    ("acme_core_temp", {"cpu"}, "gauge", "unknown", "temperature", "cpu_core", ("cpu",), "up"),
    ("acme_energy_joules_total", set(), "counter", "unknown", "energy", "node", (), "both"),
    ("acme_rx_bytes_total", set(), "counter", "unknown", "throughput", "node", (), "down"),
    ("acme_busy_seconds_total", set(), "counter", "unknown", "utilization", "node", (), "both"),
    ("acme_build_info", {"version"}, "gauge", "unknown", "info", "node", (), "none"),
    ("acme_link_up", set(), "gauge", "unknown", "state", "node", (), "down"),
    ("acme_fan_rpm", set(), "gauge", "unknown", "cooling", "node", (), "down"),
    ("acme_core_clock_mhz", set(), "gauge", "unknown", "clock", "node", (), "down"),
    (
        "backendai_agent_new_failure_count_total",
        {"agent_id"},
        "counter",
        "backend_ai",
        "error_counter",
        "node",
        (),
        "up",
    ),
    ("python_gc_new_total", set(), "counter", "client_library", "runtime", "exporter", (), "none"),
    ("scrape_new_thing", {"job", "instance"}, "gauge", "prometheus", "quantity", "exporter", ("job",), "both"),
    ("acme_widgets", set(), None, "unknown", "quantity", "node", (), "both"),
]


@pytest.mark.parametrize(("name", "labels", "mtype", "exporter", "category", "unit", "entity", "bad"), RULE_CASES)
def test_rules_classify_unknown_families(
    catalog: Catalog,
    name: str,
    labels: set[str],
    mtype: str | None,
    exporter: str,
    category: str,
    unit: str,
    entity: tuple[str, ...],
    bad: str,
) -> None:
    assert catalog.lookup(name) is None
    family = catalog.classify(name, frozenset(labels), mtype)
    assert family.source.startswith("rule:") and not family.known
    got = (family.exporter, family.category, family.unit, family.entity_labels, family.bad)
    assert got == (exporter, category, unit, entity, bad), family.source


def test_known_family_comes_from_the_catalogue_even_with_other_types(catalog: Catalog) -> None:
    family = catalog.classify("DCGM_FI_DEV_XID_ERRORS", frozenset({"gpu", "err_code"}), "counter", np.arange(6.0))
    assert family.source == "catalog" and family.category is Category.state


def test_unknown_histogram_series_name_becomes_its_family(catalog: Catalog) -> None:
    family = catalog.classify("acme_request_seconds_bucket", frozenset({"le"}), "histogram")
    assert (family.name, family.mtype, family.category) == ("acme_request_seconds", "histogram", Category.latency)


# ---- observed behaviour (declared types lie) ----

RATE_LIKE = np.array([[3.0, 9.0, 4.0, 8.0, 2.0, 7.0, 6.0], [5.0, 1.0, NaN, 6.0, 5.5, 2.0, 9.0]])
MONOTONE = np.array([[1.0, 2.0, NaN, 5.0, 5.0, 9.0], [0.0, 0.0, 3.0, 3.0, NaN, 4.0]])
WITH_RESET = np.array([[100.0 + 10 * i for i in range(12)] + [4.0, 9.0, 15.0] + [20.0 + 6 * i for i in range(10)]])
STATES = np.array([[4.0, 4.0, 1.0, 4.0, NaN, 4.0], [5.0, 5.0, 5.0, 2.0, 5.0, 5.0]])


@pytest.mark.parametrize(
    ("values", "kind"),
    [
        (RATE_LIKE, "gauge"),
        (MONOTONE, "counter"),
        (WITH_RESET, "counter"),
        (np.array([[1.0, 0.0, 1.0, 0.0, 1.0, 0.0]]), "gauge"),  # flapping, each fall a "reset": too many
        (np.array([[7.0, NaN, 7.0], [2.0, 2.0, NaN]]), "constant"),
        (np.array([[3.0], [4.0]]), "constant"),  # single snapshot: no change seen
        (np.full((3, 4), NaN), "empty"),
        (np.array([1.0, 2.0, 3.0]), "counter"),  # one series as a 1-D array
    ],
)
def test_observed_kind(values: np.ndarray, kind: str) -> None:
    assert observed_kind(values) == kind


def test_a_declared_counter_that_behaves_as_a_rate_becomes_a_gauge(catalog: Catalog) -> None:
    known = catalog.lookup("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL")
    assert known is not None and known.mtype == "counter" and observed_kind(RATE_LIKE) == "gauge"
    family = catalog.classify("acme_link_bandwidth_total", frozenset({"gpu"}), "counter", RATE_LIKE)
    assert (family.mtype, family.category) == ("gauge", Category.throughput)
    assert family.source.startswith("rule:") and "observed:gauge" in family.source


def test_a_monotone_untyped_family_becomes_a_counter(catalog: Catalog) -> None:
    family = catalog.classify("acme_widgets_made", frozenset(), "untyped", MONOTONE)
    assert (family.mtype, family.category) == ("counter", Category.throughput)
    assert "observed:counter" in family.source
    named = catalog.classify("acme_InErrors", frozenset(), "untyped", MONOTONE)  # the name still decides
    assert (named.mtype, named.category) == ("counter", Category.error_counter)


def test_few_small_integers_become_a_state(catalog: Catalog) -> None:
    assert looks_like_state(STATES) and not looks_like_state(RATE_LIKE + 0.5)
    assert not looks_like_state(np.array([[0.0, 1000.0, 2000.0]]))
    family = catalog.classify("acme_link_thing", frozenset({"device", "port"}), "gauge", STATES)
    assert (family.category, family.unit) == (Category.state, Unit.ib_port)
    assert "observed:state" in family.source
    named = catalog.classify("acme_chip_temp", frozenset(), "gauge", STATES)  # a named category is not a guess
    assert named.category is Category.temperature


# ---- bad data is refused with its place ----

HEADER = ",".join(COLUMNS)
GOOD = "node_load1,node_exporter,gauge,load,node,,both,1m load average."


@pytest.mark.parametrize(
    ("lines", "where", "message"),
    [
        ([HEADER, GOOD, "x,node_exporter,gauge,nonsense,node,,up,"], ":3", "unknown category 'nonsense'"),
        ([HEADER, GOOD, "x,node_exporter,gauge,load,rack,,up,"], ":3", "unknown unit 'rack'"),
        ([HEADER, GOOD, "x,node_exporter,gauge,load,node,,sideways,"], ":3", "unknown bad 'sideways'"),
        ([HEADER, "x,node_exporter,gaugeish,load,node,,up,"], ":2", "unknown mtype"),
        ([HEADER, GOOD, GOOD], ":3", "duplicate family 'node_load1' (first on line 2)"),
        ([HEADER, GOOD, "x,node_exporter,gauge,load,node"], ":3", "expected 8 fields"),
        ([HEADER, "x,node_exporter,gauge,load,node,,up,,extra"], ":2", "expected 8 fields"),
        ([HEADER, "9x,node_exporter,gauge,load,node,,up,"], ":2", "bad metric name"),
        ([HEADER, "x,node_exporter,gauge,load,disk,dev-ice,up,"], ":2", "bad label name 'dev-ice'"),
        ([HEADER, "x,,gauge,load,node,,up,"], ":2", "empty exporter"),
        (["name,exporter", GOOD], ":1", "header must be"),
        ([HEADER, GOOD, 'z,e,gauge,load,node,,up,"two', 'lines"', "y,e,gauge,bogus,node,,up,"], ":5", "'bogus'"),
    ],
)
def test_bad_csv_row_names_file_and_line(tmp_path: Path, lines: list[str], where: str, message: str) -> None:
    path = tmp_path / "families.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(CatalogError) as info:
        Catalog.from_csv(path)
    assert info.value.where == f"{path}{where}"
    assert str(info.value).startswith(f"{path}{where}: ") and message in str(info.value)


def test_csv_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "families.csv"
    path.write_text(f'{HEADER}\n{GOOD}\nx,acme,counter,error_counter,ib_port,"device;port",up,"Errors, counted."\n')
    catalog = Catalog.from_csv(path)
    assert len(catalog) == 2 and [f.name for f in catalog] == ["node_load1", "x"]
    assert catalog.lookup("x") == Family(
        "x",
        "acme",
        "counter",
        Category.error_counter,
        Unit.ib_port,
        ("device", "port"),
        Direction.up,
        "Errors, counted.",
    )


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[[rule]]\nid = "a"\nexporter = "x"\n', "last rule must have no conditions"),
        ('[[rule]]\nid = "a"\nnmae = "^x"\n', "unknown key(s) ['nmae']"),
        ('[[rule]]\nid = "a"\ncategory = "weird"\n', "'weird' is not a valid Category"),
        ('[[rule]]\nid = "a"\nname = "("\n', "rule 1 (a)"),
        ("[[rule]]\nname = 3\n", "needs a string id"),
        ("[[rule\n", "rules.toml"),
    ],
)
def test_bad_rules_are_refused(tmp_path: Path, toml: str, message: str) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(toml, encoding="utf-8")
    with pytest.raises(RuleError, match=re.escape(message)):
        RuleSet.from_toml(path)


def test_duplicate_rule_ids_are_refused() -> None:
    rows = [{"id": "a", "name": "x", "exporter": "e"}, {"id": "a"}]
    with pytest.raises(RuleError, match="duplicate rule id"):
        RuleSet.from_rows(rows, "test")
