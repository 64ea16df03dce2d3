"""``peerwatch agent``: parse options, build the agent, print / write / serve its metrics.

``peerwatch agent read FILE...`` (:mod:`peerwatch.agent.read_command`) judges saved outputs instead.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer

from peerwatch.agent.collect import Agent
from peerwatch.agent.config import CHECK_NAMES, AgentConfig, build_checks
from peerwatch.agent.read_command import read_command
from peerwatch.agent.serve import TEXTFILE_NAME, MetricsServer, run_textfile_loop, write_textfile


def agent_command(
    ctx: typer.Context,
    once: Annotated[
        bool, typer.Option("--once", help="Run the checks once, print (or write) the metrics, exit.")
    ] = False,
    port: Annotated[
        int | None, typer.Option("--port", help="Serve /metrics on this port, rerun every --interval.")
    ] = None,
    host: Annotated[str, typer.Option("--host", help="Address to serve on (0.0.0.0: every interface).")] = "127.0.0.1",
    textfile: Annotated[
        Path | None,
        typer.Option(
            "--textfile", metavar="DIR", help=f"Write DIR/{TEXTFILE_NAME} for node_exporter's textfile collector."
        ),
    ] = None,
    interval: Annotated[float, typer.Option("--interval", min=0.1, help="Seconds between runs.")] = 60.0,
    check: Annotated[
        list[str] | None, typer.Option("--check", help=f"Run only these: {', '.join(CHECK_NAMES)}.")
    ] = None,
    sys_root: Annotated[Path, typer.Option("--sys-root", help="sysfs root.")] = Path("/sys"),
    proc_root: Annotated[Path, typer.Option("--proc-root", help="procfs root.")] = Path("/proc"),
    dev_root: Annotated[Path, typer.Option("--dev-root", help="Device nodes root (nvme smart-log).")] = Path("/dev"),
    kernel_log: Annotated[
        Path | None,
        typer.Option("--kernel-log", help="Read Xids from this file, not dmesg / journalctl -k / kern.log."),
    ] = None,
    xid_max_age: Annotated[
        float | None,
        typer.Option("--xid-max-age", min=1, help="Seconds after which a logged Xid stops setting status."),
    ] = None,
    ib_rate: Annotated[
        float | None, typer.Option("--ib-expected-rate", help="Expected IB port rate, Gb/sec (default: fastest peer).")
    ] = None,
    ib_ignore: Annotated[
        list[str] | None, typer.Option("--ib-ignore", help="DEVICE or DEVICE:PORT not to check (repeatable).")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log each run's problems to stderr.")] = False,
) -> None:
    """Run host health checks (Xids, PCIe, CPU clocks, InfiniBand, NVMe, nvidia-smi, DCGM) as Prometheus metrics.

    Exits non-zero only when the agent itself fails (bad option, unwritable file, busy port), not for findings.
    `peerwatch agent read FILE...` judges saved outputs (nvidia-smi, dmesg) instead.
    """
    if ctx.invoked_subcommand is not None:
        return  # `agent read ...`: the options here are the live agent's
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr)
    if port is not None and textfile is not None:
        raise typer.BadParameter("give either --port or --textfile, not both")
    if once and port is not None:
        raise typer.BadParameter("--once prints or writes the metrics once; --port serves them: pick one")
    if not once and port is None and textfile is None:
        raise typer.BadParameter("give --once, --port P or --textfile DIR")
    try:
        config = AgentConfig(
            sys_root=sys_root,
            proc_root=proc_root,
            dev_root=dev_root,
            kernel_log=kernel_log,
            xid_max_age=xid_max_age,
            ib_expected_rate_gbps=ib_rate,
            ib_ignore=frozenset(ib_ignore or ()),
            checks=frozenset(check) if check else None,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    agent = Agent(build_checks(config))

    if once:
        text = agent.run_once().exposition()
        if textfile is None:
            sys.stdout.write(text)
            return
        try:
            write_textfile(textfile, text)
        except OSError as exc:
            typer.echo(f"peerwatch agent: cannot write {textfile / TEXTFILE_NAME}: {exc}", err=True)
            raise typer.Exit(1) from exc
        return
    if textfile is not None:
        if not textfile.is_dir():
            typer.echo(f"peerwatch agent: {textfile} is not a directory", err=True)
            raise typer.Exit(1)
        with contextlib.suppress(KeyboardInterrupt):
            run_textfile_loop(agent, textfile, interval, threading.Event())
        return
    assert port is not None
    try:
        server = MetricsServer(agent, interval, host, port)
    except OSError as exc:
        typer.echo(f"peerwatch agent: cannot listen on {host}:{port}: {exc}", err=True)
        raise typer.Exit(1) from exc
    server.start()
    typer.echo(f"peerwatch agent: serving http://{host}:{server.port}/metrics every {interval:g} s", err=True)
    server.wait()


agent_app = typer.Typer(no_args_is_help=False)
agent_app.callback(invoke_without_command=True)(agent_command)
agent_app.command("read")(read_command)
