# ruff: noqa: E501  (the classification tables below are one rule per line, however long)
"""Draft src/peerwatch/catalog/families.csv from the third-party metric lists (a dev tool).

    .venv/bin/python scripts/build_catalog.py [SHARED_DATA] [OUT_CSV]

Names and declared types come from tests/data (node_exporter's e2e output, the dcgm-exporter
CSVs including their commented-out fields, the Datadog dcgm fixture, all-smi's name list, API.md
and sample, Backend.AI's metrics.csv), the peerwatch agent's own family table
(peerwatch.agent.families), plus the EXTRA lists below for families those files lack
(default-on node_exporter collectors the e2e test cannot fake, newer InfiniBand counters, DCGM
fields users enable, the scraper's own series, common training throughput/MFU gauges). Category, bad direction, unit and entity labels
come from the ordered tables below, first match wins, hand-checked; a name no table row matches
is an error. Rerunning reproduces the committed CSV: fix a row here, not in the CSV.
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from peerwatch.agent.families import FAMILIES as AGENT_FAMILIES  # noqa: E402
from peerwatch.catalog import COLUMNS, Catalog  # noqa: E402

Info = tuple[str, str, str]  # exporter, mtype, help
EXPORTER_ORDER = (
    "prometheus",
    "node_exporter",
    "dcgm_exporter",
    "all_smi",
    "backend_ai",
    "peerwatch_agent",
    "training",
    "client_library",
)
RUNTIME = re.compile(r"^(go|process|promhttp|python)_")
ALL_SMI_COUNTERS = {
    "all_smi_energy_consumed_joules_total",
    "all_smi_tenstorrent_heartbeat",
    "all_smi_tenstorrent_arc0_health",
    "all_smi_tenstorrent_arc3_health",
    "all_smi_furiosa_error_count",
}


# ---------------------------------------------------------------------------------------------
# Families the shared data lacks: name -> (exporter, mtype, help).
# ---------------------------------------------------------------------------------------------
def words(text: str) -> list[str]:
    return text.split()


def _extra() -> dict[str, Info]:
    out: dict[str, Info] = {}

    def add(exporter: str, mtype: str, names: str, help_: str = "") -> None:
        for name in names.split():
            out[name] = (exporter, mtype, help_)

    ne = "node_exporter"
    # filesystem, uname and timex collectors are on by default; the e2e test cannot fake their syscalls
    for n, h in {
        "size_bytes": "Filesystem size in bytes.",
        "free_bytes": "Filesystem free space in bytes.",
        "avail_bytes": "Filesystem space available to non-root users in bytes.",
        "files": "Filesystem total file nodes.",
        "files_free": "Filesystem total free file nodes.",
        "readonly": "Filesystem read-only status.",
        "device_error": "Whether an error occurred while getting statistics for the given device.",
        "mount_info": "Filesystem mount information.",
    }.items():
        add(ne, "gauge", f"node_filesystem_{n}", h)
    add(ne, "gauge", "node_uname_info", "Labeled system information as provided by the uname system call.")
    add(
        ne,
        "gauge",
        "node_timex_offset_seconds node_timex_frequency_adjustment_ratio node_timex_maxerror_seconds "
        "node_timex_estimated_error_seconds node_timex_status node_timex_loop_time_constant node_timex_tick_seconds "
        "node_timex_pps_frequency_hertz node_timex_pps_jitter_seconds node_timex_pps_shift_seconds "
        "node_timex_pps_stability_hertz node_timex_tai_offset_seconds node_timex_sync_status",
        "Kernel clock discipline (adjtimex), see collector/timex.go.",
    )
    add(
        ne,
        "counter",
        "node_timex_pps_jitter_total node_timex_pps_calibration_total node_timex_pps_error_total "
        "node_timex_pps_stability_exceeded_total",
        "Kernel PPS discipline counter (adjtimex).",
    )
    # /proc/meminfo fields of current kernels that the e2e fixture's old meminfo lacks
    add(
        ne,
        "gauge",
        " ".join(
            f"node_memory_{f}_bytes"
            for f in words(
                "MemAvailable Percpu KReclaimable ShmemHugePages ShmemPmdMapped FileHugePages FilePmdMapped Hugetlb "
                "DirectMap1G CmaTotal CmaFree Zswap Zswapped SecPageTables Balloon Unaccepted"
            )
        ),
        "Memory information field.",
    )
    add(ne, "counter", "node_btrfs_device_errors_total", "Errors reported for the device.")
    # InfiniBand port counters and mlx5 hw_counters of newer node_exporter (absent from the fixture's sysfs)
    add(
        ne,
        "counter",
        " ".join(
            f"node_infiniband_{n}_total"
            for n in words(
                "excessive_buffer_overrun_errors local_link_integrity_errors port_receive_remote_physical_errors "
                "port_receive_switch_relay_errors symbol_error vl15_dropped duplicate_requests_packets "
                "implied_nak_seq_errors local_ack_timeout_errors np_cnp_packets_sent np_ecn_marked_roce_packets_received "
                "out_of_buffer_drops out_of_sequence_packets_received packet_sequence_errors req_cqes_errors "
                "req_cqes_flush_errors req_remote_access_errors req_remote_invalid_request_errors resp_cqes_errors "
                "resp_cqes_flush_errors resp_local_length_errors resp_remote_access_errors rnr_nak_retry_packets_received "
                "roce_adp_retransmits roce_adp_retransmits_timeout roce_slow_restart_used roce_slow_restart_cnps "
                "roce_slow_restart rp_cnp_packets_handled rp_cnp_ignored_packets_received rx_atomic_requests "
                "rx_dct_connect_requests rx_read_requests rx_write_requests rx_icrc_encapsulated_errors"
            )
        ),
        "InfiniBand port counter (sysfs counters/ or hw_counters/).",
    )
    add(ne, "gauge", "node_infiniband_lifespan_seconds", "Aging period of the hw counter reads.")

    # DCGM fields users enable beyond the shipped CSVs (names from dcgm_fields.h); per-lane fields L0..L17
    dc = "dcgm_exporter"
    lanes = [f"L{i}" for i in range(18)]
    gauges = (
        "VIDEO_CLOCK APP_SM_CLOCK APP_MEM_CLOCK CLOCKS_EVENT_REASONS CLOCK_THROTTLE_REASONS MAX_SM_CLOCK "
        "MAX_MEM_CLOCK MAX_VIDEO_CLOCK MEM_MAX_OP_TEMP GPU_MAX_OP_TEMP GPU_TEMP_TLIMIT POWER_USAGE_INSTANT "
        "SLOWDOWN_TEMP SHUTDOWN_TEMP POWER_MGMT_LIMIT POWER_MGMT_LIMIT_MIN POWER_MGMT_LIMIT_MAX POWER_MGMT_LIMIT_DEF "
        "ENFORCED_POWER_LIMIT FABRIC_MANAGER_STATUS FABRIC_MANAGER_ERROR_CODE PSTATE FAN_SPEED PCIE_TX_THROUGHPUT "
        "PCIE_RX_THROUGHPUT PCIE_MAX_LINK_GEN PCIE_MAX_LINK_WIDTH PCIE_LINK_GEN PCIE_LINK_WIDTH FB_TOTAL "
        "ECC_CURRENT ECC_PENDING PERSISTENCE_MODE COMPUTE_MODE MIG_MODE MIG_MAX_SLICES BAR1_TOTAL BAR1_USED "
        "BAR1_FREE ROW_REMAP_PENDING THRESHOLD_SRM GPU_NVLINK_ERRORS C2C_LINK_COUNT C2C_LINK_STATUS "
        "C2C_MAX_BANDWIDTH C2C_LINK_POWER_STATE "
        + " ".join(f"BANKS_REMAP_ROWS_AVAIL_{x}" for x in ("MAX", "HIGH", "PARTIAL", "LOW", "NONE"))
        + " "
        + " ".join(f"NVLINK_{d}_BANDWIDTH_{x}" for d in ("TX", "RX") for x in [*lanes, "TOTAL"])
        + " CPU_UTIL_TOTAL CPU_UTIL_USER CPU_UTIL_NICE CPU_UTIL_SYS CPU_UTIL_IRQ CPU_TEMP_CURRENT CPU_TEMP_WARNING "
        "CPU_TEMP_CRITICAL CPU_CLOCK_CURRENT CPU_POWER_UTIL_CURRENT CPU_POWER_LIMIT SYSIO_POWER_UTIL_CURRENT "
        "MODULE_POWER_UTIL_CURRENT NVSWITCH_VOLTAGE_MVOLT NVSWITCH_CURRENT_IDDQ NVSWITCH_CURRENT_IDDQ_REV "
        "NVSWITCH_CURRENT_IDDQ_DVDD NVSWITCH_POWER_VDD NVSWITCH_POWER_DVDD NVSWITCH_POWER_HVDD "
        "NVSWITCH_LINK_THROUGHPUT_TX NVSWITCH_LINK_THROUGHPUT_RX NVSWITCH_TEMPERATURE_CURRENT "
        "NVSWITCH_TEMPERATURE_LIMIT_SLOWDOWN NVSWITCH_TEMPERATURE_LIMIT_SHUTDOWN NVSWITCH_THROUGHPUT_TX "
        "NVSWITCH_THROUGHPUT_RX"
    )
    counters = (
        "TOTAL_APP_CLOCKS_VIOLATION TOTAL_BASE_CLOCKS_VIOLATION "
        + " ".join(
            f"ECC_{b}_{v}_{loc}"
            for b in ("SBE", "DBE")
            for v in ("VOL", "AGG")
            for loc in ("L1", "L2", "DEV", "REG", "TEX", "SHM", "CBU", "SRM")
        )
        + " "
        + " ".join(
            f"NVLINK_{k}_COUNT_{x}"
            for k in ("CRC_FLIT_ERROR", "CRC_DATA_ERROR", "REPLAY_ERROR", "RECOVERY_ERROR")
            for x in lanes
        )
        + " "
        + " ".join(f"NVLINK_BANDWIDTH_{x}" for x in lanes)
        + " NVLINK_ERROR_DL_CRC NVLINK_ERROR_DL_RECOVERY NVLINK_ERROR_DL_REPLAY "
        "CLOCKS_EVENT_REASON_SW_POWER_CAP_NS CLOCKS_EVENT_REASON_SYNC_BOOST_COUNT_NS "
        "CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN_NS CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN_NS "
        "CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN_NS C2C_LINK_ERROR_INTR C2C_LINK_ERROR_REPLAY "
        "C2C_LINK_ERROR_REPLAY_B2B "
        + " ".join(
            f"NVLINK_COUNT_{x}"
            for x in words(
                "TX_PACKETS TX_BYTES RX_PACKETS RX_BYTES RX_MALFORMED_PACKET_ERRORS RX_BUFFER_OVERRUN_ERRORS "
                "RX_ERRORS RX_REMOTE_ERRORS RX_GENERAL_ERRORS LOCAL_LINK_INTEGRITY_ERRORS TX_DISCARDS "
                "LINK_RECOVERY_SUCCESSFUL_EVENTS LINK_RECOVERY_FAILED_EVENTS LINK_RECOVERY_EVENTS RX_SYMBOL_ERRORS "
                "EFFECTIVE_ERRORS"
            )
        )
        + " NVSWITCH_FATAL_ERRORS NVSWITCH_NON_FATAL_ERRORS "
        + " ".join(
            f"NVSWITCH_LINK_{k}_ERRORS" for k in ("FATAL", "NON_FATAL", "REPLAY", "RECOVERY", "FLIT", "CRC", "ECC")
        )
        + " "
        + " ".join(f"NVSWITCH_LINK_{k}_ERRORS_LANE{i}" for k in ("CRC", "ECC") for i in range(8))
    )
    add(dc, "gauge", " ".join(f"DCGM_FI_DEV_{n}" for n in gauges.split()), "DCGM field (dcgm_fields.h).")
    add(dc, "counter", " ".join(f"DCGM_FI_DEV_{n}" for n in counters.split()), "DCGM counter field (dcgm_fields.h).")
    prof = (
        "PIPE_TENSOR_IMMA_ACTIVE PIPE_TENSOR_HMMA_ACTIVE PIPE_TENSOR_DFMA_ACTIVE PIPE_INT_ACTIVE NVLINK_TX_BYTES "
        "NVLINK_RX_BYTES C2C_TX_ALL_BYTES C2C_TX_DATA_BYTES C2C_RX_ALL_BYTES C2C_RX_DATA_BYTES "
        + " ".join(f"NVLINK_L{i}_{d}_BYTES" for i in range(18) for d in ("TX", "RX"))
        + " "
        + " ".join(f"{e}{i}_ACTIVE" for e, n in (("NVDEC", 8), ("NVJPG", 8), ("NVOFA", 2)) for i in range(n))
    )
    add(dc, "gauge", " ".join(f"DCGM_FI_PROF_{n}" for n in prof.split()), "DCGM profiling field (dcgm_fields.h).")

    # what the scraper adds to every target, and client_python's default collectors
    pr = "prometheus"
    add(pr, "gauge", "up", "1 if the target was scraped successfully, 0 if not (added by the scraper).")
    add(pr, "gauge", "scrape_duration_seconds", "Duration of the scrape (added by the scraper).")
    add(pr, "gauge", "scrape_samples_scraped", "Number of samples the target exposed.")
    add(pr, "gauge", "scrape_samples_post_metric_relabeling", "Samples remaining after metric relabelling.")
    add(pr, "gauge", "scrape_series_added", "Approximate number of new series in this scrape.")
    add(pr, "gauge", "scrape_timeout_seconds", "Configured scrape timeout (extra-scrape-metrics).")
    add(pr, "gauge", "scrape_sample_limit", "Configured sample limit (extra-scrape-metrics).")
    add(pr, "gauge", "scrape_body_size_bytes", "Uncompressed size of the scraped body (extra-scrape-metrics).")
    cl = "client_library"
    add(
        cl,
        "counter",
        "python_gc_objects_collected_total python_gc_objects_uncollectable_total python_gc_collections_total",
        "prometheus_client garbage-collector statistics.",
    )
    add(cl, "gauge", "python_info", "Python platform information (prometheus_client).")
    add(cl, "counter", "go_memstats_lookups_total", "Total number of pointer lookups (client_golang before 1.12).")

    # A training job's own speed, as jobs commonly export it (the engine's training detector reads
    # these; docs/detection.md): generic names, Hugging Face Trainer's log keys, and Composer's
    # SpeedMonitor / OLMo keys with "/" turned into "_" as Prometheus names need.
    tr = "training"
    add(
        tr,
        "gauge",
        "training_throughput training_tokens_per_second training_samples_per_second training_steps_per_second "
        "train_tokens_per_second train_samples_per_second train_steps_per_second "
        "throughput_tokens_per_sec throughput_samples_per_sec throughput_batches_per_sec "
        "throughput_device_tokens_per_sec throughput_device_samples_per_sec throughput_device_batches_per_sec "
        "throughput_device_tps",
        "Training job throughput (higher is better); one series per job or per rank.",
    )
    add(
        tr,
        "gauge",
        "training_mfu train_mfu throughput_device_mfu model_flops_utilization",
        "Training job model FLOPs utilisation (higher is better); one series per job or per rank.",
    )
    return out


EXTRA = _extra()

# dcgm-exporter 1.x compatibility names -> the modern field whose classification they share
DCGM_1X_ALIASES = {
    "dcgm_sm_clock": "DCGM_FI_DEV_SM_CLOCK",
    "dcgm_memory_clock": "DCGM_FI_DEV_MEM_CLOCK",
    "dcgm_memory_temp": "DCGM_FI_DEV_MEMORY_TEMP",
    "dcgm_gpu_temp": "DCGM_FI_DEV_GPU_TEMP",
    "dcgm_power_usage": "DCGM_FI_DEV_POWER_USAGE",
    "dcgm_total_energy_consumption": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "dcgm_fi_prof_pcie_tx_bytes": "DCGM_FI_PROF_PCIE_TX_BYTES",
    "dcgm_fi_prof_pcie_rx_bytes": "DCGM_FI_PROF_PCIE_RX_BYTES",
    "dcgm_pcie_replay_counter": "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "dcgm_gpu_utilization": "DCGM_FI_DEV_GPU_UTIL",
    "dcgm_mem_copy_utilization": "DCGM_FI_DEV_MEM_COPY_UTIL",
    "dcgm_enc_utilization": "DCGM_FI_DEV_ENC_UTIL",
    "dcgm_dec_utilization": "DCGM_FI_DEV_DEC_UTIL",
    "dcgm_xid_errors": "DCGM_FI_DEV_XID_ERRORS",
    "dcgm_power_violation": "DCGM_FI_DEV_POWER_VIOLATION",
    "dcgm_thermal_violation": "DCGM_FI_DEV_THERMAL_VIOLATION",
    "dcgm_sync_boost_violation": "DCGM_FI_DEV_SYNC_BOOST_VIOLATION",
    "dcgm_board_limit_violation": "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION",
    "dcgm_low_util_violation": "DCGM_FI_DEV_LOW_UTIL_VIOLATION",
    "dcgm_reliability_violation": "DCGM_FI_DEV_RELIABILITY_VIOLATION",
    "dcgm_fb_free": "DCGM_FI_DEV_FB_FREE",
    "dcgm_fb_used": "DCGM_FI_DEV_FB_USED",
    "dcgm_ecc_sbe_volatile_total": "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "dcgm_ecc_dbe_volatile_total": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "dcgm_ecc_sbe_aggregate_total": "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
    "dcgm_ecc_dbe_aggregate_total": "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    "dcgm_retired_pages_sbe": "DCGM_FI_DEV_RETIRED_SBE",
    "dcgm_retired_pages_dbe": "DCGM_FI_DEV_RETIRED_DBE",
    "dcgm_retired_pages_pending": "DCGM_FI_DEV_RETIRED_PENDING",
    "dcgm_nvlink_flit_crc_error_count_total": "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "dcgm_nvlink_data_crc_error_count_total": "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "dcgm_nvlink_replay_error_count_total": "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "dcgm_nvlink_recovery_error_count_total": "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    "dcgm_nvlink_bandwidth_total": "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "dcgm_fi_prof_gr_engine_active": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "dcgm_fi_prof_sm_active": "DCGM_FI_PROF_SM_ACTIVE",
    "dcgm_fi_prof_sm_occupancy": "DCGM_FI_PROF_SM_OCCUPANCY",
    "dcgm_fi_prof_pipe_tensor_active": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "dcgm_fi_prof_dram_active": "DCGM_FI_PROF_DRAM_ACTIVE",
}


# ---------------------------------------------------------------------------------------------
# Category and bad direction: first row whose regex is found in the name wins.
# ---------------------------------------------------------------------------------------------
CATEGORY_TABLE = r"""
# --- the scraper and exporter internals
^(go|process|promhttp|python)_                                            runtime        none
^up$                                                                      state          down
^scrape_duration_seconds$                                                 latency        up
^scrape_samples_(scraped|post_metric_relabeling)$                         quantity       down
^scrape_series_added$                                                     quantity       up
^scrape_(timeout_seconds|sample_limit)$                                   capacity       none
^scrape_body_size_bytes$                                                  quantity       none
^node_scrape_collector_duration_seconds$                                  latency        up
^node_scrape_collector_success$                                           state          down
^node_textfile_scrape_error$                                              state          up
^node_textfile_mtime_seconds$                                             time           none
_info$                                                                    info           none
# --- node_exporter: faults first
^node_infiniband_(link_downed|link_error_recovery|symbol_error|vl15_dropped|port_errors_received)_total$  error_counter up
^node_infiniband_(excessive_buffer_overrun|local_link_integrity|port_constraint|port_receive_remote_physical|port_receive_switch_relay)_errors\w*_total$  error_counter up
^node_infiniband_port_discards_(received|transmitted)_total$              error_counter  up
^node_infiniband_(implied_nak_seq|local_ack_timeout|packet_sequence|req_cqes|req_cqes_flush|req_remote_access|req_remote_invalid_request|resp_cqes|resp_cqes_flush|resp_local_length|resp_remote_access|rx_icrc_encapsulated)_errors_total$  error_counter up
^node_infiniband_(duplicate_requests_packets|out_of_buffer_drops|out_of_sequence_packets_received|rnr_nak_retry_packets_received|roce_adp_retransmits|roce_adp_retransmits_timeout|rp_cnp_ignored_packets_received)_total$  error_counter up
^node_infiniband_(state_id|physical_state_id|rate_bytes_per_second)$     state          down
^node_infiniband_(port_transmit_wait|np_cnp_packets_sent|np_ecn_marked_roce_packets_received|rp_cnp_packets_handled|roce_slow_restart\w*)_total$  load up
^node_infiniband_lifespan_seconds$                                        capacity       none
^node_infiniband_((legacy_)?multicast_packets_\w+|rx_\w+_requests)_total$  throughput   none
^node_infiniband_(legacy_\w+|port_data_\w+|port_packets_\w+|unicast_packets_\w+)_total$  throughput down
^node_network_(receive|transmit)_drop_total$                             discard        up
^node_network_(receive|transmit)_(errs|fifo|frame|carrier|colls)_total$  error_counter up
^node_network_carrier(_up|_down)?_changes_total$                          error_counter  up
^node_network_(up|carrier)$                                               state          down
^node_network_dormant$                                                    state          up
^node_network_speed_bytes$                                                state          down
^node_network_mtu_bytes$                                                  state          both
^node_network_(receive|transmit)_(bytes|packets)_total$                   throughput     down
^node_network_(receive|transmit)_(compressed|multicast|nohandler)_total$  throughput     none
^node_network_transmit_queue_length$                                      capacity       none
^node_network_(address_assign_type|device_id|flags|iface_id|iface_link|iface_link_mode|name_assign_type|net_dev_group|protocol_type)$  info none
^node_edac_                                                               error_counter  up
^node_memory_HardwareCorrupted_bytes$                                     error_counter  up
^node_kernel_hung_tasks_total$                                            error_counter  up
^node_vmstat_oom_kill$                                                    error_counter  up
^node_nfs_rpc_retransmissions_total$                                      error_counter  up
^node_nfsd_(rpc_errors|file_handles_stale)_total$                         error_counter  up
^node_mountstats_nfs_(operations_major_timeouts|transport_bad_transaction_ids|transport_bind|transport_connect|event_jukebox_delay)_total$  error_counter up
^node_netstat_\w+_(InErrors|InErrs|RcvbufErrors|SndbufErrors)$           error_counter  up
^node_netstat_TcpExt_(ListenDrops|ListenOverflows|TCPRcvQDrop)$         discard        up
^node_netstat_TcpExt_SyncookiesFailed$                                   error_counter  up
^node_fibrechannel_(dumped_frames|error_frames|fcp_packet_aborts|invalid_crc|invalid_tx_words|link_failure|loss_of_signal|loss_of_sync|nos)_total$  error_counter up
^node_softnet_dropped_total$                                              discard        up
^node_qdisc_drops_total$                                                  discard        up
^node_nf_conntrack_stat_(drop|early_drop)$                                discard        up
^node_nf_conntrack_stat_insert_failed$                                    error_counter  up
^node_lnstat_(drop|early_drop|insert_failed|table_fulls|unresolved_discards|res_failed)_total$  error_counter up
^node_xfrm_                                                               error_counter  up
^node_bcache_io_errors$                                                   error_counter  up
^node_bcachefs_(errors|error_throw|device_io_errors|data_read_fail_and_poison)_total$  error_counter up
^node_btrfs_device_errors_total$                                          error_counter  up
^node_wifi_station_(beacon_loss|transmit_failed)_total$                   error_counter  up
^node_timex_pps_(error|stability_exceeded|jitter)_total$                  error_counter  up
^node_zfs_\w*(cksum_bad|io_error|writes_error|dmu_tx_error|erpt_dropped|_set_failed)$  error_counter up
# --- node_exporter: states
^node_filesystem_(readonly|device_error)$                                 state          up
^node_pcidevice_current_link_(transfers_per_second|width)$               state          down
^node_pcidevice_power_state$                                              state          both
^node_md_degraded$                                                        state          up
^node_md_(state|disks)$                                                   state          both
^node_dmmultipath_device_active$                                          state          down
^node_dmmultipath_device_paths_failed$                                    state          up
^node_dmmultipath_path_state$                                             state          both
^node_drbd_(connected|disk_state_is_up_to_date)$                          state          down
^node_drbd_node_role_is_primary$                                          state          both
^node_hwmon_(temp_crit_alarm_celsius|fan_alarm|in_alarm|intrusion_alarm)$  state         up
^node_bcache_congested$                                                   state          up
^node_power_supply_(online|present)$                                      state          down
^node_timex_sync_status$                                                  state          down
^node_timex_status$                                                       state          both
^node_watchdog_bootstatus$                                                state          both
^node_zfs_zpool_state$                                                    state          both
# --- node_exporter: everything else, by subsystem
^node_arp_entries$                                                        quantity       both
^node_bcache_(cache_available_percent)$                                   capacity       down
^node_bcache_root_usage_percent$                                          capacity       up
^node_bcache_btree_read_average_duration_seconds$                         latency        up
^node_bcache_dirty_data_bytes$                                            memory         up
^node_bcache_(dirty_target_bytes|average_key_size_sectors|priority_stats_\w+|btree_cache_size_bytes)$  capacity none
^node_bcache_(active_journal_entries|btree_nodes|tree_depth)$             quantity       none
^node_bcache_                                                             throughput     none
^node_bcachefs_(device_bucket_size_bytes|device_buckets|device_durability|compression_\w+_bytes)$  capacity none
^node_bcachefs_btree_cache_size_bytes$                                    memory         none
^node_bcachefs_btree_write_average_size_bytes$                            quantity       none
^node_bcachefs_                                                           throughput     none
^node_bonding_active$                                                     quantity       down
^node_bonding_slaves$                                                     capacity       none
^node_boot_time_seconds$                                                  time           none
^node_btrfs_(commit_seconds_total|last_commit_seconds|max_commit_seconds)$  latency      up
^node_btrfs_commits_total$                                                throughput     none
^node_btrfs_used_bytes$                                                   capacity       up
^node_btrfs_                                                              capacity       none
^node_buddyinfo_blocks$                                                   memory         none
^node_cgroups_enabled$                                                    info           none
^node_cgroups_cgroups$                                                    quantity       none
^node_(context_switches|forks|intr|interrupts)_total$                     load           both
^node_cooling_device_cur_state$                                           cooling        up
^node_cooling_device_max_state$                                           capacity       none
^node_cpu_(core|package)_throttles_total$                                 temperature    up
^node_cpu_(scaling_)?frequency_hertz$                                     clock          down
^node_cpu_scaling_frequency_(max|min)_hertz$                              capacity       none
^node_cpu_(scaling_governor|isolated)$                                    info           none
^node_cpu_(guest_)?seconds_total$                                         utilization    both
^node_disk_io_now$                                                        load           up
^node_disk_io_time_seconds_total$                                         utilization    up
^node_disk_io_time_weighted_seconds_total$                                load           up
^node_disk_(read|write|discard|flush_requests)_time_seconds_total$        latency        up
^node_disk_(read_bytes|written_bytes|reads_completed|writes_completed)_total$  throughput down
^node_disk_ata_write_cache(_enabled)?$                                    info           none
^node_disk_ata_rotation_rate_rpm$                                         capacity       none
^node_disk_(reads_merged|writes_merged|discards_completed|discards_merged|discarded_sectors|flush_requests)_total$  throughput none
^node_dmmultipath_device_paths_active$                                    quantity       down
^node_dmmultipath_device_(paths|size_bytes)$                              capacity       none
^node_drbd_out_of_sync_bytes$                                             quantity       up
^node_drbd_(application_pending|local_pending|remote_pending|remote_unacknowledged)$  load up
^node_drbd_epochs$                                                        quantity       none
^node_drbd_                                                               throughput     none
^node_entropy_available_bits$                                             quantity       none
^node_entropy_pool_size_bits$                                             capacity       none
^node_fibrechannel_seconds_since_last_reset_total$                        time           none
^node_fibrechannel_(rx|tx)_(frames|words)_total$                          throughput     down
^node_filefd_allocated$                                                   quantity       up
^node_filefd_maximum$                                                     capacity       none
^node_filesystem_(avail_bytes|free_bytes|files_free)$                     capacity       down
^node_filesystem_(size_bytes|files)$                                      capacity       none
^node_hwmon_temp_celsius$                                                 temperature    up
^node_hwmon_fan_rpm$                                                      cooling        down
^node_hwmon_fan_output$                                                   cooling        both
^node_hwmon_in_volts$                                                     power          both
^node_hwmon_freq_freq_mhz$                                                clock          down
^node_hwmon_(chip_names|sensor_label|\w+_beep_enabled|fan_manual)$       info           none
^node_hwmon_(fan_\w+|in_m\w+_volts|temp_(crit|max)_celsius|pwm_\w+)$   capacity       none
^node_ipvs_backend_connections_(active|inactive)$                         quantity       both
^node_ipvs_backend_weight$                                                capacity       none
^node_ipvs_                                                               throughput     none
^node_ksmd_(run|merge_across_nodes)$                                      info           none
^node_ksmd_full_scans_total$                                              throughput     none
^node_ksmd_sleep_seconds$                                                 capacity       none
^node_ksmd_                                                               memory         none
^node_lnstat_                                                             throughput     none
^node_load(1|5|15)$                                                       load           both
^node_md_blocks_synced$                                                   quantity       none
^node_md_(blocks|disks_required|raid_disks)$                              capacity       none
^node_memory_(MemTotal|SwapTotal|CommitLimit|Hugepagesize|DirectMap\w+|VmallocTotal|VmallocChunk|CmaTotal)_bytes$  capacity none
^node_memory_HugePages_Total$                                             capacity       none
^node_memory_(MemAvailable|MemFree|SwapFree|CmaFree)_bytes$               memory         down
^node_memory_(Committed_AS|Dirty|Writeback|WritebackTmp|NFS_Unstable|SwapCached|KernelStack|PageTables|SecPageTables)_bytes$  memory up
^node_memory_numa_MemTotal$                                               capacity       none
^node_memory_numa_MemFree$                                                memory         down
^node_memory_numa_(Dirty|Writeback|WritebackTmp|NFS_Unstable|KernelStack|PageTables)$  memory up
^node_memory_numa_\w+_total$                                             throughput     none
^node_memory_                                                             memory         both
^node_mountstats_nfs_operations_(queue|request|response)_time_seconds_total$  latency    up
^node_mountstats_nfs_operations_transmissions_total$                      throughput     up
^node_mountstats_nfs_transport_(backlog_queue|pending_queue|sending_queue)_total$  load   up
^node_mountstats_nfs_transport_maximum_rpc_slots$                         load           up
^node_mountstats_nfs_(transport_idle_time_seconds|age_seconds_total)$     time           none
^node_mountstats_nfs_event_                                               throughput     none
^node_mountstats_nfs_                                                     throughput     down
^node_netstat_(Tcp_RetransSegs|TcpExt_TCPTimeouts|TcpExt_TCPOFOQueue|Tcp_OutRsts)$  throughput up
^node_netstat_Tcp_CurrEstab$                                              quantity       both
^node_netstat_Ip_Forwarding$                                              info           none
^node_netstat_\w+_(InOctets|OutOctets|InSegs|OutSegs)$                   throughput     down
^node_netstat_                                                            throughput     none
^node_nf_conntrack_entries$                                               quantity       up
^node_nf_conntrack_entries_limit$                                         capacity       none
^node_nf_conntrack_stat_                                                  throughput     none
^node_nfs_(requests|rpcs|packets)_total$                                  throughput     down
^node_nfs_                                                                throughput     none
^node_nfsd_(server_threads|read_ahead_cache_size_blocks)$                 capacity       none
^node_nfsd_                                                               throughput     none
^node_nvme_namespace_used_bytes$                                          capacity       up
^node_nvme_namespace_                                                     capacity       none
^node_os_version$                                                         info           none
^node_pcidevice_(max_link_\w+|sriov_\w+)$                               capacity       none
^node_pcidevice_(d3cold_allowed|numa_node)$                               info           none
^node_power_supply_(power_watt|voltage_volt)$                             power          both
^node_power_supply_energy_watthour$                                       energy         none
^node_power_supply_capacity$                                              capacity       down
^node_power_supply_cyclecount$                                            quantity       none
^node_power_supply_                                                       capacity       none
^node_pressure_                                                           load           up
^node_processes_max_\w+$                                                 capacity       none
^node_processes_                                                          quantity       both
^node_procs_blocked$                                                      load           up
^node_procs_running$                                                      load           both
^node_qdisc_(bytes|packets)_total$                                        throughput     down
^node_qdisc_                                                              load           up
^node_rapl_                                                               energy         both
^node_schedstat_running_seconds_total$                                    utilization    both
^node_schedstat_timeslices_total$                                         throughput     both
^node_schedstat_waiting_seconds_total$                                    latency        up
^node_slabinfo_                                                           memory         none
^node_sockstat_FRAG6?_                                                    quantity       none
^node_sockstat_\w+_mem(_bytes)?$                                         memory         up
^node_sockstat_TCP_orphan$                                                quantity       up
^node_sockstat_                                                           quantity       both
^node_softirqs_                                                           load           both
^node_softnet_(processed|received_rps)_total$                             throughput     both
^node_softnet_                                                            load           up
^node_sysctl_(kernel_threads_max|fs_file_nr_max)$                         capacity       none
^node_sysctl_                                                             quantity       none
^node_tape_io_now$                                                        load           up
^node_tape_\w+_time_seconds_total$                                       latency        up
^node_tape_                                                               throughput     none
^node_thermal_zone_temp$                                                  temperature    up
^node_time_(seconds|zone_offset_seconds)$                                 time           none
^node_timex_(maxerror|estimated_error|pps_jitter)_seconds$                time           up
^node_timex_(offset_seconds|frequency_adjustment_ratio)$                  time           both
^node_timex_(loop_time_constant|tick_seconds)$                            capacity       none
^node_timex_                                                              time           none
^node_udp_queues$                                                         load           up
^node_vmstat_(pgmajfault|pswpin|pswpout)$                                 load           up
^node_vmstat_                                                             throughput     both
^node_watchdog_timeleft_seconds$                                          time           down
^node_watchdog_(pretimeout_seconds|timeout_seconds)$                      capacity       none
^node_watchdog_                                                           info           none
^node_wifi_station_transmit_retries_total$                                throughput     up
^node_wifi_station_signal_dbm$                                            quantity       down
^node_wifi_station_(inactive_seconds|connected_seconds_total)$            time           none
^node_wifi_interface_frequency_hertz$                                     clock          none
^node_wifi_                                                               throughput     down
^node_xfs_                                                                throughput     none
^node_zfs_(zil_\w+|\w*l2_(read|write)_bytes|\w*memory_\w+_count)$            throughput     none
^node_zfs_\w*(_size|_bytes|_c|_c_max|_c_min|_p|_meta_limit|_meta_max|_meta_min|_meta_used|_sys_free|_need_free|_tempreserve|_evictable_data|_evictable_metadata|_chunk_waste)$  memory none
^node_zfs_\w*(hash_elements|hash_elements_max|hash_chains|hash_chain_max|_cnt|_count|level_\d+)$  quantity none
^node_zfs_                                                                throughput     none
^node_zoneinfo_\w+_total$                                                throughput     none
^node_zoneinfo_((high|low|min|managed|present|spanned)_pages|protection_\d+)$  capacity none
^node_zoneinfo_                                                           memory         none
# --- dcgm-exporter
^DCGM_FI_DEV_XID_ERRORS$                                                  state          up
^DCGM_EXP_XID_ERRORS_COUNT$                                               state          up
^DCGM_EXP_GPU_HEALTH_STATUS$                                              state          up
^DCGM_EXP_P2P_STATUS$                                                     state          both
^DCGM_EXP_CLOCK_EVENTS_COUNT$                                             clock          up
^DCGM_FI_DEV_(CLOCK_THROTTLE_REASONS|CLOCKS_EVENT_REASONS|PSTATE)$        state          up
^DCGM_FI_DEV_(PCIE_LINK_GEN|PCIE_LINK_WIDTH|C2C_LINK_STATUS|COUNT)$       state          down
^DCGM_FI_DEV_(ROW_REMAP_FAILURE|ROW_REMAP_PENDING|THRESHOLD_SRM|GPU_NVLINK_ERRORS|FABRIC_MANAGER_ERROR_CODE)$  state up
^DCGM_FI_DEV_(ECC_CURRENT|ECC_PENDING|PERSISTENCE_MODE|COMPUTE_MODE|MIG_MODE|VGPU_LICENSE_STATUS|FABRIC_MANAGER_STATUS|C2C_LINK_POWER_STATE)$  state both
^DCGM_FI_DEV_(ECC_(SBE|DBE)_\w+|RETIRED_(SBE|DBE|PENDING)|(UN)?CORRECTABLE_REMAPPED_ROWS|PCIE_REPLAY_COUNTER|C2C_LINK_ERROR_\w+)$  error_counter up
^DCGM_FI_DEV_NVLINK_(\w+_ERROR_COUNT_\w+|ERROR_DL_\w+)$                error_counter  up
^DCGM_FI_DEV_NVLINK_COUNT_(\w+_ERRORS|TX_DISCARDS|LINK_RECOVERY_\w+)$   error_counter  up
^DCGM_FI_DEV_NVSWITCH_(\w+_)?ERRORS(_LANE\d)?$                          error_counter  up
^DCGM_FI_DEV_(POWER_VIOLATION|BOARD_LIMIT_VIOLATION|CLOCKS_EVENT_REASON_(SW_POWER_CAP|HW_POWER_BRAKE_SLOWDOWN)_NS)$  power up
^DCGM_FI_DEV_(THERMAL_VIOLATION|CLOCKS_EVENT_REASON_(SW|HW)_THERM_SLOWDOWN_NS)$  temperature up
^DCGM_FI_DEV_(SYNC_BOOST_VIOLATION|RELIABILITY_VIOLATION|TOTAL_APP_CLOCKS_VIOLATION|TOTAL_BASE_CLOCKS_VIOLATION|CLOCKS_EVENT_REASON_SYNC_BOOST_COUNT_NS)$  clock up
^DCGM_FI_DEV_LOW_UTIL_VIOLATION$                                          utilization    none
^DCGM_FI_DEV_(SM_CLOCK|MEM_CLOCK|CPU_CLOCK_CURRENT)$                      clock          down
^DCGM_FI_DEV_VIDEO_CLOCK$                                                 clock          none
^DCGM_FI_DEV_(APP_SM_CLOCK|APP_MEM_CLOCK|MAX_\w+_CLOCK)$                 capacity       none
^DCGM_FI_DEV_(GPU_TEMP|MEMORY_TEMP|CPU_TEMP_CURRENT|NVSWITCH_TEMPERATURE_CURRENT)$  temperature up
^DCGM_FI_DEV_GPU_TEMP_TLIMIT$                                             temperature    down
^DCGM_FI_DEV_(SLOWDOWN_TEMP|SHUTDOWN_TEMP|MEM_MAX_OP_TEMP|GPU_MAX_OP_TEMP|CPU_TEMP_(WARNING|CRITICAL)|NVSWITCH_TEMPERATURE_LIMIT_\w+)$  capacity none
^DCGM_FI_DEV_(POWER_USAGE|POWER_USAGE_INSTANT|CPU_POWER_UTIL_CURRENT|SYSIO_POWER_UTIL_CURRENT|MODULE_POWER_UTIL_CURRENT)$  power both
^DCGM_FI_DEV_NVSWITCH_(VOLTAGE_MVOLT|CURRENT_IDDQ\w*|POWER_\w+)$        power          both
^DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION$                                    energy         both
^DCGM_FI_DEV_(ENFORCED_POWER_LIMIT|POWER_MGMT_LIMIT)$                     capacity       down
^DCGM_FI_DEV_(POWER_MGMT_LIMIT_(MIN|MAX|DEF)|CPU_POWER_LIMIT)$            capacity       none
^DCGM_FI_DEV_(GPU_UTIL|MEM_COPY_UTIL)$                                    utilization    down
^DCGM_FI_DEV_(ENC_UTIL|DEC_UTIL)$                                         utilization    none
^DCGM_FI_DEV_CPU_UTIL_\w+$                                               utilization    both
^DCGM_FI_PROF_(NVDEC|NVJPG|NVOFA)\d_ACTIVE$                              utilization    none
^DCGM_FI_PROF_(\w+_ACTIVE|SM_OCCUPANCY)$                                 utilization    down
^DCGM_FI_PROF_\w+_BYTES$                                                 throughput     down
^DCGM_FI_DEV_(PCIE_(TX|RX)_THROUGHPUT|NVLINK_BANDWIDTH_\w+|NVLINK_(TX|RX)_BANDWIDTH_\w+|NVLINK_COUNT_(TX|RX)_(PACKETS|BYTES))$  throughput down
^DCGM_FI_DEV_NVSWITCH_(LINK_)?THROUGHPUT_(TX|RX)$                         throughput     down
^DCGM_FI_DEV_(PCIE_MAX_LINK_GEN|PCIE_MAX_LINK_WIDTH|FB_TOTAL|FB_RESERVED|BAR1_TOTAL|MIG_MAX_SLICES|C2C_LINK_COUNT|C2C_MAX_BANDWIDTH)$  capacity none
^DCGM_FI_DEV_(FB_FREE|FB_USED|FB_USED_PERCENT|BAR1_USED|BAR1_FREE)$       memory         both
^DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_MAX$                                  capacity       down
^DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_(LOW|NONE)$                           capacity       up
^DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_(HIGH|PARTIAL)$                       capacity       none
^DCGM_FI_DEV_FAN_SPEED$                                                   cooling        both
# --- all-smi
^all_smi_up$                                                              state          down
^all_smi_(gpu_pcie_(gen|width)_current|(tenstorrent|rebellions|furiosa)_pcie_(generation|width))$  state down
^all_smi_(gpu|rebellions)_performance_state$                              state          up
^all_smi_(rebellions_device_status|rebellions_status|furiosa_status|furiosa_ready|furiosa_liveness_status|furiosa_core_status|nvlink_remote_device_type)$  state down
^all_smi_tenstorrent_(faults|throttler)$                                  state          up
^all_smi_(gpu_gsp_firmware_mode|gpu_mig_mode|vgpu_host_mode|vgpu_scheduler_state|vgpu_scheduler_policy|vgpu_active|tenstorrent_ddr_status)$  state both
^all_smi_furiosa_error_count$                                             error_counter  up
^all_smi_tenstorrent_(heartbeat|arc0_health|arc3_health)$                 throughput     down
^all_smi_\w*(temperature_threshold_\w+|thermal_limit_celsius)$          capacity       none
^all_smi_\w*_celsius$                                                    temperature    up
^all_smi_energy_consumed_joules_total$                                    energy         both
^all_smi_gpu_power_limit_current_watts$                                   capacity       down
^all_smi_\w*(power_limit_\w+|power_max_watts|tdp_limit_watts|tdc_limit_amperes|power_cap_watts)$  capacity none
^all_smi_ane_utilization$                                                 power          both
^all_smi_\w*(_watts|_amperes|_volts)$                                    power          both
^all_smi_\w*fan_(speed_)?rpm$                                            cooling        down
^all_smi_tenstorrent_fan_speed_percent$                                   cooling        both
^all_smi_gpu_clock_(graphics|memory)_max_mhz$                             capacity       none
^all_smi_\w*_mhz$                                                        clock          down
^all_smi_tpu_hlo_exec_\w+_microseconds$                                  latency        up
^all_smi_tpu_hlo_queue_size$                                              load           up
^all_smi_\w*(core_count|thread_count|socket_count|tensorcore_count|memory_total_bytes|swap_total_bytes|disk_total_bytes|compute_tops|memory_bandwidth_gbps)$  capacity none
^all_smi_disk_available_bytes$                                            capacity       down
^all_smi_(memory_available_bytes|memory_free_bytes|swap_free_bytes)$     memory         down
^all_smi_swap_used_bytes$                                                 memory         up
^all_smi_\w*memory_bandwidth_utilization$                                utilization    down
^all_smi_(cpu_\w*utilization|vgpu_\w*utilization|gpu_process_\w+_util|process_cpu_percent)$  utilization both
^all_smi_\w*memory\w*_bytes$                                            memory         both
^all_smi_mig_instance_utilization_memory$                                 utilization    down
^all_smi_gaudi_power_utilization_percent$                                 power          both
^all_smi_(memory_utilization|\w+_memory_utilization_percent)$             memory         both
^all_smi_\w*(utilization|utilization_percent|_occupancy|utilization_gpu)$  utilization  down
^all_smi_process_start_time_seconds$                                      time           none
^all_smi_gpu_numa_node_id$                                                info           none
^all_smi_cpu_ane_ops_per_second$                                          throughput     none
^all_smi_(runtime_environment|amd_rocm_version)$                          info           none
# --- Backend.AI
^backendai_\w*(failure|error)\w*_total$                                 error_counter  up
^backendai_layer_retry_count_total$                                       error_counter  up
^backendai_\w*(duration_sec|duration_seconds|processing_time_sec|latency_usec_\w+)$  latency up
^backendai_async_task_count$                                              quantity       up
^backendai_(bgtask_count|layer_operation_triggered_count|event_propagator_count|event_propagator_alias_count)$  quantity both
^backendai_cpu_usage_percent$                                             utilization    up
^backendai_memory_used_(rss|vms)$                                         memory         up
^backendai_(container|device|process)_utilization$                        utilization    both
^backendai_storage_volume_(iops|throughput_bytes)_\w+$                   throughput     both
^backendai_storage_volume_metric_last_updated_timestamp$                  time           none
^backendai_\w*success_count_total$                                       throughput     down
^backendai_\w*_total$                                                    throughput     none
# --- peerwatch agent (docs/agent.md); its *_info families are info above. Xid counts include
# application Xids, so they are states (the xid check judges them), not error counters.
^peerwatch_agent_check_status$                                            state          up
^peerwatch_agent_check_duration_seconds$                                  latency        up
^peerwatch_agent_(last_run|xid_last_seen)_timestamp_seconds$              time           none
^peerwatch_agent_xid_(count|last)$                                        state          up
^peerwatch_agent_pcie_current_link_(width|speed_gts)$                     state          down
^peerwatch_agent_pcie_max_link_(width|speed_gts)$                         capacity       none
^peerwatch_agent_cpu_frequency_ratio$                                     clock          down
^peerwatch_agent_cpu_scaling_max_capped_cpus$                             state          up
^peerwatch_agent_infiniband_port_(state|phys_state|rate_bytes_per_second)$  state        down
^peerwatch_agent_(infiniband_port_errors_total|nvme_media_errors_total)$  error_counter  up
^peerwatch_agent_nvme_controller_state$                                   info           none
^peerwatch_agent_nvme_(critical_warning|endurance_used_percent)$          state          up
^peerwatch_agent_nvme_error_log_entries_total$                            quantity       none
^peerwatch_agent_gpu_utilization_percent$                                 utilization    down
^peerwatch_agent_gpu_(ecc_uncorrected_volatile|remapped_rows)$            error_counter  up
^peerwatch_agent_gpu_(retired_pages_pending|clocks_event_reasons|remapped_rows_pending|remapped_rows_failure)$  state up
# --- training jobs' own speed (see EXTRA)
^(training_mfu|train_mfu|throughput_device_mfu|model_flops_utilization)$  utilization    down
^(training_throughput|(training|train|throughput|throughput_device)_(tokens|samples|steps|batches)_per_(second|sec)|throughput_device_tps)$  throughput down
"""

# ---------------------------------------------------------------------------------------------
# Comparison unit and entity labels (";" between labels, "|" between alternatives, "-" none).
# ---------------------------------------------------------------------------------------------
UNIT_TABLE = r"""
^(go|process|promhttp|python)_                                 exporter        -
^(up|scrape_\w+)$                                              exporter        job
^node_scrape_collector_\w+$                                    exporter        collector
^node_(exporter_build_info|textfile_scrape_error)$             exporter        -
^node_textfile_mtime_seconds$                                  node            file
^node_arp_entries$                                             network_device  device
^node_bcache_                                                  disk            backing_device|cache_device|uuid
^node_(bcachefs|btrfs)_device_                                 filesystem      uuid;device
^node_(bcachefs|btrfs)_                                        filesystem      uuid
^node_bonding_                                                 network_device  master
^node_(buddyinfo|zoneinfo)_                                    numa_node       node;zone
^node_cooling_device_                                          sensor          name
^node_cpu_core_throttles_total$                                cpu_core        package;core
^node_cpu_package_throttles_total$                             cpu_socket      package
^node_cpu_(frequency_hertz|guest_seconds_total|info|isolated|scaling_\w+|seconds_total)$  cpu_core  cpu
^node_disk_                                                    disk            device
^node_dmmultipath_path_state$                                  disk            device;path
^node_drbd_(disk_state_is_up_to_date|node_role_is_primary)$    disk            device;node
^node_(dmmultipath|drbd|md|tape)_                              disk            device
^node_edac_channel_                                            node            controller;csrow;channel
^node_edac_csrow_                                              node            controller;csrow
^node_edac_                                                    node            controller
^node_fibrechannel_                                            network_device  fc_host
^node_filesystem_                                              filesystem      mountpoint
^node_hwmon_chip_names$                                        sensor          chip
^node_hwmon_                                                   sensor          chip;sensor
^node_infiniband_info$                                         ib_port         device
^node_infiniband_                                              ib_port         device;port
^node_(interrupts|lnstat|schedstat|softnet|softirqs_functions)_  cpu_core      cpu
^node_memory_numa_                                             numa_node       node
^node_mountstats_nfs_                                          nfs_mount       export
^node_(network|qdisc)_                                         network_device  device
^node_nvme_namespace_                                          disk            device;nsid
^node_nvme_                                                    disk            device
^node_pcidevice_                                               pci_device      segment;bus;device;function
^node_power_supply_                                            sensor          power_supply
^node_rapl_                                                    cpu_socket      index
^node_slabinfo_                                                node            slab
^node_thermal_zone_temp$                                       sensor          zone
^node_watchdog_                                                node            name
^node_wifi_station_                                            network_device  device;mac_address
^node_wifi_                                                    network_device  device
^node_xfs_                                                     filesystem      device
^node_zfs_zpool_dataset_                                       filesystem      zpool;dataset
^node_zfs_zpool_                                               filesystem      zpool
^node_                                                         node            -
^DCGM_FI_DEV_NVSWITCH_LINK_                                    nvswitch        nvswitch;nvlink
^DCGM_FI_DEV_NVSWITCH_                                         nvswitch        nvswitch
^DCGM_FI_DEV_(NVLINK_COUNT_|NVLINK_ERROR_DL_)                  gpu_link        gpu;nvlink
^DCGM_FI_DEV_(CPU_|SYSIO_POWER|MODULE_POWER)                   cpu_socket      cpu
^DCGM_FI_DEV_COUNT$                                            node            -
^(DCGM_|dcgm_)                                                 gpu             gpu
^all_smi_(up|build_info)$                                      exporter        -
^all_smi_energy_consumed_joules_total$                         gpu             gpu_index;scope
^all_smi_mig_instance_                                         gpu             gpu_index|index;mig_instance
^all_smi_vgpu_(utilization|memory_utilization|memory_used_bytes|memory_total_bytes|active)$  gpu  gpu_index|index;vgpu_id
^all_smi_nvlink_remote_device_type$                            gpu_link        gpu_index|index;link_index
^all_smi_furiosa_(core_status|pe_utilization|core_frequency_mhz)$  gpu         npu_index|index;core
^all_smi_(npu|tenstorrent|rebellions|furiosa|gaudi|tpu)_       gpu             npu_index|index
^all_smi_(gpu|vgpu|ane|dla|combined|thermal_pressure|amd_power)_  gpu          gpu_index|index
^all_smi_cpu_core_utilization$                                 cpu_core        core_id
^all_smi_cpu_socket_                                           cpu_socket      socket_id
^all_smi_disk_                                                 filesystem      mount_point
^all_smi_chassis_fan_speed_rpm$                                sensor          fan_id
^all_smi_                                                      node            -
^backendai_(scheduler|reconciler)_                             service         -
^backendai_storage_volume_                                     service         volume
^backendai_device_utilization$                                 node            device_id
^backendai_                                                    node            -
^peerwatch_agent_check_status$                                 node            component
^peerwatch_agent_check_info$                                   node            check;component
^peerwatch_agent_(check_duration_seconds|last_run_timestamp_seconds|build_info)$  exporter  -
^peerwatch_agent_(xid|gpu)_                                    gpu             gpu
# the agent names a PCI function by one pci_bus_id label (not node_exporter's segment;bus;...): node unit
^peerwatch_agent_pcie_                                         node            pci_bus_id
^peerwatch_agent_cpu_                                          node            -
^peerwatch_agent_infiniband_                                   ib_port         device;port
^peerwatch_agent_nvme_                                         disk            device
^(training_|train_|throughput_|model_flops_utilization$)       node            rank|global_rank
"""


def _clean(text: str) -> str:
    return " ".join(text.split())


def exposition(path: Path, exporter: str, skip: str = "^$") -> dict[str, Info]:
    """Families of a text exposition from its # HELP / # TYPE lines."""
    helps: dict[str, str] = {}
    out: dict[str, Info] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split(None, 3)
        if len(parts) >= 3 and parts[0] == "#" and parts[1] in ("HELP", "TYPE") and not re.match(skip, parts[2]):
            rest = parts[3] if len(parts) > 3 else ""
            if parts[1] == "HELP":
                helps[parts[2]] = _clean(rest)
            else:
                out[parts[2]] = (exporter, rest.strip(), helps.get(parts[2], ""))
    return out


def dcgm_csv(path: Path) -> dict[str, Info]:
    """dcgm-exporter counter CSV rows, commented-out ones included; `label` rows are not series."""
    out: dict[str, Info] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\s*#?\s*((?:DCGM|dcgm)_\w+)\s*,\s*(\w+)\s*,\s*(.*)$", line)
        if m and m.group(2) != "label":
            out[m.group(1)] = ("dcgm_exporter", m.group(2), _clean(m.group(3)))
    return out


def all_smi(folder: Path) -> dict[str, Info]:
    """all-smi: the name list, API.md's tables (help), the sample (types); counters per the code."""
    helps: dict[str, str] = {}
    table_row = re.compile(r"^\|\s*`(all_smi_\w+)`\s*\|\s*([^|]*?)\s*\|\s*([^|]*?)\s*\|", re.M)
    for m in table_row.finditer((folder / "API.md").read_text()):
        # the readiness table has Type then Value columns; the others Description then Unit
        text = m.group(3) if m.group(2) in ("gauge", "counter") else m.group(2)
        helps.setdefault(m.group(1), _clean(text.replace("`", "")))
    names = set((folder / "metric-names.txt").read_text().split()) | set(helps)
    sample = exposition(folder / "sample-metrics-docker-cpu-only.prom", "all_smi")
    names |= set(sample)
    return {
        n: ("all_smi", "counter" if n in ALL_SMI_COUNTERS else "gauge", helps.get(n) or sample.get(n, ("", "", ""))[2])
        for n in names
    }


def backend_ai(path: Path) -> dict[str, Info]:
    """Backend.AI's declared metrics under their exposed names (prometheus_client: counters gain _total)."""
    out: dict[str, Info] = {}
    with path.open(encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            name, mtype = row["metric_name_as_declared"], row["type"]
            if mtype == "counter" and not name.endswith("_total"):
                name += "_total"
            out[name] = ("backend_ai", mtype, _clean(row["help"]))
    return out


def gather(data: Path) -> dict[str, Info]:
    """Every family name with its exporter, declared type and help; first source wins."""
    fams: dict[str, Info] = {}
    dcgm = data / "dcgm-exporter"
    sources = [
        exposition(data / "node_exporter" / "e2e-output.txt", "node_exporter", skip=r"^testmetric"),
        dcgm_csv(dcgm / "default-counters.csv"),
        dcgm_csv(dcgm / "dcp-metrics-included.csv"),
        dcgm_csv(dcgm / "1.x-compatibility-metrics.csv"),
        exposition(data / "datadog-dcgm-fixture" / "metrics.txt", "dcgm_exporter"),
        all_smi(data / "all-smi"),
        backend_ai(data / "backend.ai" / "metrics.csv"),
        {name: ("peerwatch_agent", spec.type, spec.help) for name, spec in AGENT_FAMILIES.items()},
        {name: info for name, info in EXTRA.items()},
    ]
    for source in sources:
        for name, (exporter, mtype, help_) in source.items():
            first = fams.setdefault(name, (exporter, mtype, help_))
            if not first[2] and help_:  # e.g. the Datadog fixture's empty HELP lines
                fams[name] = (first[0], first[1], help_)
    return {n: ("client_library", m, h) if RUNTIME.match(n) else (e, m, h) for n, (e, m, h) in fams.items()}


def _table(text: str) -> list[tuple[re.Pattern[str], str, str]]:
    rows = []
    for line in text.strip().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            pattern, a, b = line.split()
            rows.append((re.compile(pattern), a, b))
    return rows


def classify(
    name: str, categories: list[tuple[re.Pattern[str], str, str]], units: list[tuple[re.Pattern[str], str, str]]
) -> tuple[str, str, str, str]:
    """(category, bad, unit, entity_labels) of a family; the 1.x dcgm names borrow their modern twin's."""
    key = DCGM_1X_ALIASES.get(name, name)
    cat = next(((c, b) for p, c, b in categories if p.search(key)), None)
    unit = next(((u, e) for p, u, e in units if p.search(key)), None)
    if cat is None or unit is None:
        raise SystemExit(f"{name}: no {'category' if cat is None else 'unit'} row matches; add one to the tables")
    return cat[0], cat[1], unit[0], "" if unit[1] == "-" else unit[1]


def main(argv: list[str]) -> int:
    data = Path(argv[1]) if len(argv) > 1 else ROOT / "tests" / "data"
    out = Path(argv[2]) if len(argv) > 2 else ROOT / "src" / "peerwatch" / "catalog" / "families.csv"
    fams = gather(data)
    categories, units = _table(CATEGORY_TABLE), _table(UNIT_TABLE)
    rows = []
    for name, (exporter, mtype, help_) in fams.items():
        category, bad, unit, entity = classify(name, categories, units)
        rows.append((name, exporter, mtype, category, unit, entity, bad, help_))
    rows.sort(key=lambda r: (EXPORTER_ORDER.index(r[1]), r[0]))
    with out.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(COLUMNS)
        writer.writerows(rows)
    catalog = Catalog.from_csv(out)  # validates every row
    print(f"{out}: {len(catalog)} families")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
