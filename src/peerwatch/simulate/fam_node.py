"""node_exporter families with their real names, types and labels (see ``node_exporter/e2e-output.txt``).

A chosen ~75 of its 1,228 families: the ones that carry fault signal on GPU nodes (CPU, memory,
load, pressure, interrupts, processes, vmstat, netstat, network per device, InfiniBand per device
and port, NFS and mountstats per export and operation, disks, timex, boot time).
"""

from __future__ import annotations

import numpy as np

from peerwatch.model import FloatArray
from peerwatch.simulate.cluster import CPU_MODES, DISKS, FIXED_NETDEVS, NFS_MOUNTS, NFS_OPS
from peerwatch.simulate.families import ExporterTable, Family, Src, ValueFn, entity_kinds, target_labels
from peerwatch.simulate.signals import ema
from peerwatch.simulate.targets import EXPORTER_INDEX, EXPORTERS, BoolArray

EXP = EXPORTERS[EXPORTER_INDEX["node"]]
REQ_BYTES, READ_BYTES = 220.0, 1024.0 * 1024.0 + 180.0  # RPC header sizes, 1 MiB payloads


def _dt(s: Src) -> float:
    return s.grid.step


def _cpu(s: Src) -> FloatArray:
    """Seconds per step of each reported CPU in each mode; idle is what is left."""
    w = s.layout.cpu_weight[:, :, None]  # (N, C, 1)
    ones = np.ones_like(w)
    busy = [np.clip(s[f"cpu_{m}"][:, None, :] * (w if m == "user" else ones), 0, 1) for m in CPU_MODES if m != "idle"]
    used = np.clip(sum(busy), 0, 1)
    parts = dict(zip([m for m in CPU_MODES if m != "idle"], busy, strict=True))
    parts["idle"] = 1.0 - used
    stacked = np.stack([parts[m] for m in CPU_MODES], axis=2)  # (N, C, modes, T)
    return stacked.reshape(stacked.shape[0], -1, stacked.shape[-1]) * _dt(s)


def _net(name: str) -> ValueFn:
    """Fixed NICs then one column per job epoch's veth (present only in its epoch)."""

    def fn(s: Src) -> FloatArray:
        fixed = s[name]
        epochs = len(s.veth_names[0])
        veth_name = {"net_rx": "veth_rx", "net_tx": "veth_tx", "net_drop": "veth_drop"}.get(name)
        veth_src = s[veth_name] if veth_name is not None else None
        veth = np.zeros((fixed.shape[0], epochs, fixed.shape[2]))
        if veth_src is not None:
            veth[:] = veth_src[:, None, :]
        return np.concatenate([fixed, veth], axis=1) * _dt(s)

    return fn


def _net_present(s: Src) -> BoolArray:
    n, t, epochs = s.layout.n, s.grid.steps, len(s.veth_names[0])
    veth = (s.act.epoch[None, None, :] == np.arange(epochs)[None, :, None]) & s.act.container[:, None, :]
    return np.concatenate([np.ones((n, len(FIXED_NETDEVS), t), dtype=bool), veth], axis=1)


def _ops(s: Src) -> FloatArray:
    return s["nfs_ops"].reshape(s.layout.n, -1, s.grid.steps) * _dt(s)


def _op_time(kind: str) -> ValueFn:
    def fn(s: Src) -> FloatArray:
        per = s["nfs_queue"] + s["nfs_rtt"] + 0.0002 if kind == "exec" else s[f"nfs_{kind}"]
        return (s["nfs_ops"] * per).reshape(s.layout.n, -1, s.grid.steps) * _dt(s)

    return fn


def _op_bytes(payload_op: int, payload: float) -> ValueFn:
    def fn(s: Src) -> FloatArray:
        size = np.full(len(NFS_OPS), REQ_BYTES)
        size[payload_op] = payload
        per_op = np.asarray(s["nfs_ops"] * size[None, None, :, None], dtype=np.float64)
        return per_op.reshape(s.layout.n, -1, s.grid.steps) * _dt(s)

    return fn


def _mount_reset(s: Src) -> BoolArray:
    return np.repeat(s["mount_reset"], len(NFS_OPS), axis=1)


def _const(v: float, ents: int = 1) -> ValueFn:
    return lambda s: np.full((s.layout.n, ents, s.grid.steps), v)


def _node(s: Src, n: int) -> dict[str, str]:
    return target_labels(EXP, s.layout.names[n])


F = Family
C = "counter"
G = "gauge"
U = "untyped"
FAMILIES: tuple[Family, ...] = (
    F("node_cpu_seconds_total", C, "Seconds the CPUs spent in each mode.", "cpu", _cpu, True, 2),
    F("node_intr_total", C, "Total number of interrupts serviced.", "node", lambda s: s["intr"] * _dt(s), True, 0),
    F(
        "node_context_switches_total",
        C,
        "Total number of context switches.",
        "node",
        lambda s: s["ctxt"] * _dt(s),
        True,
        0,
    ),
    F("node_forks_total", C, "Total number of forks.", "node", lambda s: 0.05 * s["ctxt"] / 60 * _dt(s), True, 0),
    F(
        "node_procs_running",
        G,
        "Number of processes in runnable state.",
        "node",
        lambda s: s["procs_running"],
        decimals=0,
    ),
    F(
        "node_procs_blocked",
        G,
        "Number of processes blocked waiting for I/O to complete.",
        "node",
        lambda s: s["procs_blocked"],
        decimals=0,
    ),
    F("node_load1", G, "1m load average.", "node", lambda s: s["load1"], decimals=2),
    F("node_load5", G, "5m load average.", "node", lambda s: ema(s["load1"], 1 - np.exp(-_dt(s) / 300)), decimals=2),
    F("node_load15", G, "15m load average.", "node", lambda s: ema(s["load1"], 1 - np.exp(-_dt(s) / 900)), decimals=2),
    F(
        "node_pressure_cpu_waiting_seconds_total",
        C,
        "Total time in seconds that processes have waited for CPU time",
        "node",
        lambda s: s["psi_cpu"] * _dt(s),
        True,
        6,
    ),
    F(
        "node_pressure_io_waiting_seconds_total",
        C,
        "Total time in seconds that processes have waited due to IO congestion",
        "node",
        lambda s: s["psi_io"] * _dt(s),
        True,
        6,
    ),
    F(
        "node_pressure_io_stalled_seconds_total",
        C,
        "Total time in seconds no process could make progress due to IO congestion",
        "node",
        lambda s: 0.8 * s["psi_io"] * _dt(s),
        True,
        6,
    ),
    F(
        "node_pressure_memory_waiting_seconds_total",
        C,
        "Total time in seconds that processes have waited for memory",
        "node",
        lambda s: s["psi_mem"] * _dt(s),
        True,
        6,
        "zero",
    ),
    F(
        "node_pressure_memory_stalled_seconds_total",
        C,
        "Total time in seconds no process could make progress due to memory congestion",
        "node",
        lambda s: 0.7 * s["psi_mem"] * _dt(s),
        True,
        6,
        "zero",
    ),
    F(
        "node_memory_MemTotal_bytes",
        G,
        "Memory information field MemTotal_bytes.",
        "node",
        lambda s: np.full((s.layout.n, s.grid.steps), s.layout.spec.hardware.mem_bytes),
    ),
    F(
        "node_memory_MemAvailable_bytes",
        G,
        "Memory information field MemAvailable_bytes.",
        "node",
        lambda s: s["mem_avail"],
        decimals=-3,
    ),
    F(
        "node_memory_MemFree_bytes",
        G,
        "Memory information field MemFree_bytes.",
        "node",
        lambda s: np.clip(s["mem_avail"] - 0.9 * s["mem_cached"], 0.01 * s.layout.spec.hardware.mem_bytes, None),
        decimals=-3,
    ),
    F(
        "node_memory_Cached_bytes",
        G,
        "Memory information field Cached_bytes.",
        "node",
        lambda s: s["mem_cached"],
        decimals=-3,
    ),
    F(
        "node_memory_Dirty_bytes",
        G,
        "Memory information field Dirty_bytes.",
        "node",
        lambda s: s["mem_dirty"],
        decimals=-3,
    ),
    F(
        "node_vmstat_pgpgin",
        U,
        "/proc/vmstat information field pgpgin.",
        "node",
        lambda s: s["pgpgin"] * _dt(s),
        True,
        0,
    ),
    F(
        "node_vmstat_pgpgout",
        U,
        "/proc/vmstat information field pgpgout.",
        "node",
        lambda s: s["pgpgout"] * _dt(s),
        True,
        0,
    ),
    F(
        "node_vmstat_pgmajfault",
        U,
        "/proc/vmstat information field pgmajfault.",
        "node",
        lambda s: s["pgmajfault"] * _dt(s),
        True,
        0,
    ),
    F(
        "node_vmstat_pgfault",
        U,
        "/proc/vmstat information field pgfault.",
        "node",
        lambda s: 2.0 * s["ctxt"] * _dt(s),
        True,
        0,
    ),
    F(
        "node_vmstat_pswpout",
        U,
        "/proc/vmstat information field pswpout.",
        "node",
        lambda s: s["pswpout"] * _dt(s),
        True,
        0,
        "zero",
    ),
    F(
        "node_vmstat_oom_kill",
        U,
        "/proc/vmstat information field oom_kill.",
        "node",
        lambda s: np.zeros((s.layout.n, s.grid.steps)),
        True,
        0,
        "zero",
    ),
    F("node_netstat_Tcp_InSegs", U, "Statistic TcpInSegs.", "node", lambda s: s["tcp_in"] * _dt(s), True, 0),
    F("node_netstat_Tcp_OutSegs", U, "Statistic TcpOutSegs.", "node", lambda s: s["tcp_out"] * _dt(s), True, 0),
    F(
        "node_netstat_Tcp_RetransSegs",
        U,
        "Statistic TcpRetransSegs.",
        "node",
        lambda s: s["tcp_retrans"] * _dt(s),
        True,
        0,
    ),
    F(
        "node_network_receive_bytes_total",
        C,
        "Network device statistic receive_bytes.",
        "netdev",
        _net("net_rx"),
        True,
        0,
        present=_net_present,
    ),
    F(
        "node_network_transmit_bytes_total",
        C,
        "Network device statistic transmit_bytes.",
        "netdev",
        _net("net_tx"),
        True,
        0,
        present=_net_present,
    ),
    F(
        "node_network_receive_packets_total",
        C,
        "Network device statistic receive_packets.",
        "netdev",
        lambda s: _net("net_rx")(s) / 8000.0,
        True,
        0,
        present=_net_present,
    ),
    F(
        "node_network_transmit_packets_total",
        C,
        "Network device statistic transmit_packets.",
        "netdev",
        lambda s: _net("net_tx")(s) / 8000.0,
        True,
        0,
        present=_net_present,
    ),
    F(
        "node_network_receive_errs_total",
        C,
        "Network device statistic receive_errs.",
        "netdev",
        lambda s: _net("net_err")(s) / _dt(s),
        True,
        0,
        "zero",
        present=_net_present,
    ),
    F(
        "node_network_receive_drop_total",
        C,
        "Network device statistic receive_drop.",
        "netdev",
        lambda s: _net("net_drop")(s) / _dt(s),
        True,
        0,
        "zero",
        present=_net_present,
    ),
    F(
        "node_network_up",
        G,
        "Value is 1 if operstate is 'up', 0 otherwise.",
        "netdev",
        lambda s: np.ones((s.layout.n, len(FIXED_NETDEVS) + len(s.veth_names[0]), s.grid.steps)),
        present=_net_present,
    ),
    F(
        "node_infiniband_port_data_received_bytes_total",
        C,
        "Number of data octets received on all links",
        "ib",
        lambda s: s["ib_rx"] * _dt(s),
        True,
        0,
    ),
    F(
        "node_infiniband_port_data_transmitted_bytes_total",
        C,
        "Number of data octets transmitted on all links",
        "ib",
        lambda s: s["ib_tx"] * _dt(s),
        True,
        0,
    ),
    F(
        "node_infiniband_port_packets_received_total",
        C,
        "Number of packets received on all VLs by this port (including errors)",
        "ib",
        lambda s: s["ib_rx"] / 4096.0 * _dt(s),
        True,
        0,
    ),
    F(
        "node_infiniband_port_packets_transmitted_total",
        C,
        "Number of packets transmitted on all VLs from this port (including errors)",
        "ib",
        lambda s: s["ib_tx"] / 4096.0 * _dt(s),
        True,
        0,
    ),
    F(
        "node_infiniband_link_downed_total",
        C,
        "Number of times the link failed to recover from an error state and went down",
        "ib",
        lambda s: s["ib_downed"],
        True,
        0,
        "zero",
    ),
    F(
        "node_infiniband_link_error_recovery_total",
        C,
        "Number of times the link successfully recovered from an error state",
        "ib",
        lambda s: s["ib_recovery"],
        True,
        0,
        lambda s: (
            np.floor(s.layout.uptime_s[:, None] / 86_400.0 / 40.0) * np.ones((1, s.layout.spec.hardware.ib_ports))
        ),
    ),
    F(
        "node_infiniband_symbol_error_total",
        C,
        "Number of minor link errors detected on one or more physical lanes.",
        "ib",
        lambda s: s["ib_symbol"],
        True,
        0,
        "zero",
    ),
    F(
        "node_infiniband_port_errors_received_total",
        C,
        "Number of packets containing an error that were received on this port",
        "ib",
        lambda s: s["ib_rcv_err"],
        True,
        0,
        "zero",
    ),
    F(
        "node_infiniband_port_transmit_wait_total",
        C,
        "Number of ticks during which the port had data to transmit but no data was sent during the entire tick",
        "ib",
        lambda s: s["ib_wait"],
        True,
        0,
    ),
    F(
        "node_infiniband_state_id",
        G,
        "State of the InfiniBand port (0: no change, 1: down, 2: init, 3: armed, 4: active, 5: act defer)",
        "ib",
        lambda s: s["ib_state"],
    ),
    F("node_infiniband_physical_state_id", G, "Physical state of the InfiniBand port", "ib", lambda s: s["ib_phys"]),
    F(
        "node_infiniband_rate_bytes_per_second",
        G,
        "Maximum signal transfer rate",
        "ib",
        lambda s: np.full(s["ib_state"].shape, s.layout.spec.hardware.ib_rate_bytes),
    ),
    F(
        "node_infiniband_info",
        G,
        "Non-numeric data from /sys/class/infiniband/<device>, value is always 1.",
        "ib_info",
        lambda s: np.ones(s["ib_state"].shape),
    ),
    *(
        F(f"node_mountstats_nfs_operations_{name}", C, help_, "mount_op", fn, True, dec, start, reset=_mount_reset)
        for name, help_, fn, dec, start in (
            ("requests_total", "Number of requests performed for a given operation.", _ops, 0, "uptime"),
            (
                "transmissions_total",
                "Number of times an actual RPC request has been transmitted for a given operation.",
                lambda s: (
                    _ops(s) * 1.0
                    + np.repeat(s["nfs_retrans"][:, None, :], len(NFS_OPS) * len(NFS_MOUNTS), 1) * _dt(s) / len(NFS_OPS)
                ),
                0,
                "uptime",
            ),
            (
                "major_timeouts_total",
                "Number of times a request has had a major timeout for a given operation.",
                lambda s: s["nfs_timeouts"].reshape(s.layout.n, -1, s.grid.steps),
                0,
                "zero",
            ),
            (
                "sent_bytes_total",
                "Number of bytes sent for a given operation, including RPC headers and payload.",
                _op_bytes(1, READ_BYTES),
                0,
                "uptime",
            ),
            (
                "received_bytes_total",
                "Number of bytes received for a given operation, including RPC headers and payload.",
                _op_bytes(0, READ_BYTES),
                0,
                "uptime",
            ),
            (
                "queue_time_seconds_total",
                "Duration all requests spent queued for transmission for a given operation "
                "before they were sent, in seconds.",
                _op_time("queue"),
                3,
                "uptime",
            ),
            (
                "response_time_seconds_total",
                "Duration all requests took to get a reply back after a request for a "
                "given operation was transmitted, in seconds.",
                _op_time("rtt"),
                3,
                "uptime",
            ),
            (
                "request_time_seconds_total",
                "Duration all requests took from when a request was enqueued to when it "
                "was completely handled for a given operation, in seconds.",
                _op_time("exec"),
                3,
                "uptime",
            ),
        )
    ),
    F(
        "node_mountstats_nfs_age_seconds_total",
        C,
        "The age of the NFS mount in seconds.",
        "mount",
        lambda s: np.full(s["nfs_read_b"].shape, _dt(s)),
        True,
        0,
        reset=lambda s: s["mount_reset"],
    ),
    F(
        "node_mountstats_nfs_read_bytes_total",
        C,
        "Number of bytes read using the read() syscall.",
        "mount",
        lambda s: s["nfs_read_b"] * _dt(s),
        True,
        0,
        reset=lambda s: s["mount_reset"],
    ),
    F(
        "node_mountstats_nfs_write_bytes_total",
        C,
        "Number of bytes written using the write() syscall.",
        "mount",
        lambda s: s["nfs_write_b"] * _dt(s),
        True,
        0,
        reset=lambda s: s["mount_reset"],
    ),
    F(
        "node_mountstats_nfs_mountpoint_info",
        G,
        "Information about the NFS mountpoint.",
        "mountpoint",
        _const(1.0, len(NFS_MOUNTS)),
    ),
    F(
        "node_nfs_requests_total",
        C,
        "Number of NFS procedures invoked.",
        "nfs_method",
        lambda s: s["nfs_ops"].sum(axis=1) * _dt(s),
        True,
        0,
    ),
    F(
        "node_nfs_rpcs_total",
        C,
        "Total number of RPCs performed.",
        "node",
        lambda s: s["nfs_ops"].sum(axis=(1, 2)) * _dt(s),
        True,
        0,
    ),
    F(
        "node_nfs_rpc_retransmissions_total",
        C,
        "Number of RPC transmissions performed.",
        "node",
        lambda s: s["nfs_retrans"] * _dt(s),
        True,
        0,
        "zero",
    ),
    F(
        "node_disk_reads_completed_total",
        C,
        "The total number of reads completed successfully.",
        "disk",
        lambda s: s["disk_r"] * _dt(s),
        True,
        0,
    ),
    F(
        "node_disk_writes_completed_total",
        C,
        "The total number of writes completed successfully.",
        "disk",
        lambda s: s["disk_w"] * _dt(s),
        True,
        0,
    ),
    F(
        "node_disk_read_bytes_total",
        C,
        "The total number of bytes read successfully.",
        "disk",
        lambda s: s["disk_rb"] * _dt(s),
        True,
        0,
    ),
    F(
        "node_disk_written_bytes_total",
        C,
        "The total number of bytes written successfully.",
        "disk",
        lambda s: s["disk_wb"] * _dt(s),
        True,
        0,
    ),
    F(
        "node_disk_io_time_seconds_total",
        C,
        "Total seconds spent doing I/Os.",
        "disk",
        lambda s: s["disk_busy"] * _dt(s),
        True,
        3,
    ),
    F(
        "node_timex_offset_seconds",
        G,
        "Time offset in between local system and reference clock.",
        "node",
        lambda s: s["timex_offset"],
        decimals=9,
    ),
    F(
        "node_timex_sync_status",
        G,
        "Is clock synchronized to a reliable server (1 = yes, 0 = no).",
        "node",
        _const(1.0),
    ),
    F(
        "node_timex_maxerror_seconds",
        G,
        "Maximum error in seconds.",
        "node",
        lambda s: 0.01 + np.abs(s["timex_offset"]) * 50,
        decimals=6,
    ),
    F(
        "node_timex_estimated_error_seconds",
        G,
        "Estimated error in seconds.",
        "node",
        lambda s: np.abs(s["timex_offset"]) * 2 + 1e-6,
        decimals=9,
    ),
    F(
        "node_boot_time_seconds",
        G,
        "Node boot time, in unixtime.",
        "node",
        lambda s: np.broadcast_to((s.grid.start - np.floor(s.layout.uptime_s))[:, None], (s.layout.n, s.grid.steps)),
    ),
    F(
        "node_time_seconds",
        G,
        "System time in seconds since epoch (1970).",
        "node",
        lambda s: s.sched.times[:, EXPORTER_INDEX["node"], :],
        decimals=3,
    ),
)


def _entities(s: Src, n: int, kind: str) -> list[dict[str, str]]:
    hw = s.layout.spec.hardware
    if kind == "node":
        return [{}]
    if kind == "cpu":
        return [{"cpu": str(c), "mode": m} for c in range(s.layout.spec.cpu_series) for m in CPU_MODES]
    if kind == "ib":
        return [{"device": f"mlx5_{p}", "port": "1"} for p in range(hw.ib_ports)]
    if kind == "ib_info":
        return [
            {"device": f"mlx5_{p}", "board_id": "MT_0000000970", "firmware_version": "28.43.1014", "hca_type": "MT4129"}
            for p in range(hw.ib_ports)
        ]
    if kind == "netdev":
        return [{"device": d} for d in (*FIXED_NETDEVS, *s.veth_names[n])]
    if kind in ("mount", "mountpoint"):
        out = [{"export": e, "mountaddr": a, "protocol": "tcp"} for e, a, _ in NFS_MOUNTS]
        if kind == "mountpoint":
            for lab, (_, _, mp) in zip(out, NFS_MOUNTS, strict=True):
                lab["mountpoint"] = mp
        return out
    if kind == "mount_op":
        return [
            {"export": e, "mountaddr": a, "protocol": "tcp", "operation": op}
            for e, a, _ in NFS_MOUNTS
            for op in NFS_OPS
        ]
    if kind == "nfs_method":
        return [{"method": op.capitalize(), "proto": "4"} for op in NFS_OPS]
    if kind == "disk":
        return [{"device": d} for d in DISKS]
    raise KeyError(kind)


KINDS = ("node", "cpu", "ib", "ib_info", "netdev", "mount", "mountpoint", "mount_op", "nfs_method", "disk")
TABLE = ExporterTable(EXP, FAMILIES, entity_kinds(_entities, KINDS), _node)
