"""``peerwatch serve`` and ``peerwatch demo``: parse arguments, build the service, run the HTTP server.

The CLI adds them with ``app.command("serve")(serve_command)`` and ``app.command("demo")(demo_command)``.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Annotated

import typer

from peerwatch.alarms.errors import ConfigError, StoreError
from peerwatch.alarms.sqlite_store import SQLiteStore
from peerwatch.alarms.stores import check_store
from peerwatch.service.config import ServiceConfig, load_config
from peerwatch.service.memory import return_freed_memory
from peerwatch.service.runner import Service


def require_http() -> None:
    """Exit with a clear message when the `serve` extra (FastAPI, uvicorn) is not installed."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        missing = f"the HTTP API needs the 'serve' extra ({exc.name} is missing)"
        raise _fail(f"{missing}: pip install 'peerwatch[serve]'") from None


def run_http(service: Service, host: str, port: int) -> None:
    """Serve the API (and run the service) until Ctrl-C or SIGTERM."""
    require_http()
    import uvicorn

    from peerwatch.service.app import create_app
    from peerwatch.service.hosts import HostGuard, allowed_hosts

    app = HostGuard(create_app(service), allowed_hosts(service.config.api))
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises the Ctrl-C it handled, after shutting down
        server.run()


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def _logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request drowns everything else


def check_source(service: Service) -> str | None:
    """Poll the source once; the reason it is unusable, or None."""
    fetch = service.collect()
    if fetch.error is not None:
        return f"source {service.source.name}: {fetch.error}"
    if fetch.down:
        url, why = fetch.down[0]
        return f"source {service.source.name}: {len(fetch.down)} of {fetch.targets} targets down (first: {url}: {why})"
    return None


def serve_command(
    config: Annotated[Path, typer.Option("--config", "-c", help="The YAML configuration (docs/service.md).")],
    check: Annotated[
        bool, typer.Option("--check", help="Validate the configuration, poll the source once, and exit.")
    ] = False,
    log_level: Annotated[str, typer.Option("--log-level", help="debug, info, warning or error.")] = "info",
) -> None:
    """Run peerwatch live: evaluate every step, keep alarms in the store, serve the API, notify Alertmanager."""
    _logging(log_level)
    return_freed_memory()
    if check:
        _check(config)
        return
    require_http()
    try:
        settings = load_config(config)
        service = Service(settings)
        holder = service.lease()
    except (ConfigError, StoreError) as exc:  # one line naming the file or store and the cause; no traceback
        raise _fail(str(exc)) from None
    if holder is not None:
        service.store.close()
        raise _fail(f"another peerwatch serve ({holder}) holds this store; one serve per store", 1)
    problem = check_source(service)
    if problem is not None:
        typer.echo(f"warning: {problem}; serving anyway, with a 'monitoring blind' alarm until it answers", err=True)
    typer.echo(f"peerwatch serve: API on http://{settings.api.listen}, source {service.source.name}", err=True)
    run_http(service, settings.api.host, settings.api.port)


def _check(config: Path) -> None:
    """``serve --check``: the configuration, the store and the source, changing nothing: the store is
    only read (never created, its clock origin never fixed); the one poll runs against a scratch store."""
    try:
        settings = load_config(config)
        found = check_store(settings.store)
        with tempfile.TemporaryDirectory(prefix="peerwatch-check-") as tmp:
            service = Service(settings, store=SQLiteStore(Path(tmp) / "scratch.sqlite"))
            problem = check_source(service)
            service.source.close()
            service.store.close()
    except (ConfigError, StoreError) as exc:
        raise _fail(str(exc)) from None
    if problem is not None:
        raise _fail(problem, 1)
    typer.echo(f"ok: {config} is valid, store {found}, and the source answers ({service.source.name})")


def demo_command(
    port: Annotated[int, typer.Option("--port", help="Port of the API on 127.0.0.1.")] = 8080,
    speed: Annotated[float, typer.Option("--speed", min=1.0, help="Simulated seconds per wall second.")] = 20.0,
    nodes: Annotated[int, typer.Option("--nodes", min=4, help="Simulated nodes.")] = 16,
    base_port: Annotated[
        int, typer.Option("--base-port", help="First exporter port (0: the first free range from 20000).")
    ] = 0,
    state: Annotated[
        Path | None, typer.Option("--state", help="Keep the SQLite store here (default: temporary).")
    ] = None,
    alertmanager: Annotated[str, typer.Option("--alertmanager", help="Also send alerts to this Alertmanager.")] = "",
) -> None:
    """A simulated cluster, peerwatch watching it live, and the API, in one command (Ctrl-C stops)."""
    from peerwatch.service.demo import DemoSettings, narrate, start_demo

    require_http()
    _logging("warning")
    return_freed_memory()
    logging.getLogger("peerwatch").setLevel(logging.ERROR)  # the simulator's deliberate failed scrapes
    logging.getLogger("peerwatch.service").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message="All-NaN slice encountered")  # numpy on a vanished GPU
    with tempfile.TemporaryDirectory(prefix="peerwatch-demo-") as tmp:
        folder = state or Path(tmp)
        settings = DemoSettings(port, nodes, speed, base_port=base_port, alertmanager=alertmanager or None)
        demo = start_demo(settings, folder)
        try:
            service = Service(demo.config, clock=demo.clock)
        except StoreError as exc:  # --state pointing at a broken store
            demo.stop_exporters()
            raise _fail(str(exc)) from None
        _announce(demo.config, demo.story())
        stop = threading.Event()
        narrator = threading.Thread(target=narrate, args=(service, typer.echo, stop), daemon=True)
        narrator.start()
        try:
            run_http(service, "127.0.0.1", port)
        finally:
            stop.set()
            narrator.join(5.0)  # its last pass tells what happened since its previous one
            demo.stop_exporters()
            service.store.close()
        typer.echo("peerwatch demo stopped")


def _announce(config: ServiceConfig, story: str) -> None:
    url = f"http://{config.api.listen}"
    typer.echo(f"peerwatch demo: {story}")
    typer.echo(f"  dashboard {url}/dashboard/")
    typer.echo(f"  alarms   {url}/api/v1/alarms      nodes {url}/api/v1/nodes")
    typer.echo(f"  metrics  {url}/metrics             API docs {url}/docs")
    typer.echo(f"  token    {config.api.token}  (POST .../alarms/ID/acknowledge with 'Authorization: Bearer TOKEN')")
    typer.echo("  Ctrl-C to stop")
