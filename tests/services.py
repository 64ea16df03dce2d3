"""Real VictoriaMetrics, Prometheus, node_exporter and PostgreSQL for tests, started by hand and stopped by PID.

Debian's packages do not start services here (GUIDE 6), so each fixture starts its binary on a free
loopback port with its data under pytest's temporary folder, polls until it is ready, and stops it
(terminate, then kill) at the end of the session. A missing binary fails the fixture: the tests
must never pass by skipping what they were meant to check.

conftest.py imports the fixtures::

    from services import node_exporter, postgres, postgres_url, prometheus_factory, victoria_metrics  # noqa: F401
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

SETUP_HINT = "run scripts/setup.sh --services to install it"
START_TIMEOUT = 30.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def require_binary(name: str) -> str:
    """Absolute path of a service binary, or fail the test saying how to install it."""
    path = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").is_file() else None)
    if path is None:
        pytest.fail(f"{name} not found on PATH or in /usr/bin: {SETUP_HINT}", pytrace=False)
    return path


@dataclass
class Service:
    """A started binary: its URL, process and log file."""

    name: str
    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    stop_signal: int = signal.SIGTERM

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace: float = 5.0) -> None:
        """Terminate by PID, then kill if it lingers."""
        if self.proc.poll() is not None:
            return
        self.proc.send_signal(self.stop_signal)
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(grace)


class StartError(RuntimeError):
    """A service that exited or never became ready; the message carries its log."""


def start_service(name: str, argv: Sequence[str], ready_path: str, workdir: Path, attempts: int = 3) -> Service:
    """Start ``argv`` ("{port}" in it replaced by a free port), logging to ``workdir/<name>.log``; wait until ready.

    Another process can take the free port before the service binds it: that case is retried.
    """
    for attempt in range(attempts):
        port = free_port()
        try:
            args = [a.replace("{port}", str(port)) for a in argv]
            return _start_once(name, args, f"http://127.0.0.1:{port}", ready_path, workdir)
        except StartError as exc:
            if "address already in use" not in str(exc) or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def _start_once(name: str, argv: Sequence[str], url: str, ready_path: str, workdir: Path) -> Service:
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"{name}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    service = Service(name, url, proc, log_path)
    deadline = time.monotonic() + START_TIMEOUT
    last = "no answer"
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise StartError(f"{name} exited with {proc.returncode} at start-up; its log:\n{service.log_tail()}")
            try:
                resp = client.get(url + ready_path)
                if resp.status_code == 200:
                    return service
                last = f"HTTP {resp.status_code}"
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.1)
    service.stop()
    raise StartError(
        f"{name} not ready at {url}{ready_path} after {START_TIMEOUT:.0f}s ({last}); its log:\n{service.log_tail()}"
    )


@dataclass
class VictoriaMetrics:
    """A running single-node VictoriaMetrics."""

    service: Service

    @property
    def url(self) -> str:
        return self.service.url

    def import_jsonl(self, lines: Iterable[bytes], probe: str | None = None, timeout: float = 15.0) -> None:
        """Import ``/api/v1/export``-style JSON lines, flush, and wait until ``probe`` (a series selector) is seen.

        Without ``probe`` the first imported line's metric name is polled for.
        """
        body = b"".join(line if line.endswith(b"\n") else line + b"\n" for line in lines)
        with httpx.Client(timeout=60.0) as client:
            resp = client.post(f"{self.url}/api/v1/import", content=body)
            assert resp.status_code in (200, 204), f"import into {self.url} failed: {resp.status_code} {resp.text}"
            if probe is None:
                import orjson  # local: only this helper needs it

                probe = str(orjson.loads(body.split(b"\n", 1)[0])["metric"]["__name__"])
            self.wait_visible(client, probe, timeout)

    def wait_visible(self, client: httpx.Client, selector: str, timeout: float) -> None:
        """Force a flush and poll ``/api/v1/series`` until ``selector`` matches something (start=0 means unset)."""
        deadline = time.monotonic() + timeout
        while True:
            client.get(f"{self.url}/internal/force_flush")
            resp = client.get(
                f"{self.url}/api/v1/series",
                params={"match[]": selector, "start": "1", "end": str(int(time.time()) + 86400)},
            )
            if resp.status_code == 200 and resp.json().get("data"):
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{selector} not visible in {self.url} after {timeout}s:\n{self.service.log_tail()}"
                )
            time.sleep(0.2)


def start_victoria_metrics(workdir: Path) -> VictoriaMetrics:
    """VictoriaMetrics keeping everything (100y), no dedup beyond 1 ms, no query cache or latency offset."""
    binary = require_binary("victoria-metrics")
    argv = [
        binary,
        "-httpListenAddr=127.0.0.1:{port}",
        f"-storageDataPath={workdir / 'data'}",
        "-retentionPeriod=100y",  # older samples are dropped silently otherwise
        "-dedup.minScrapeInterval=1ms",
        "-search.latencyOffset=0s",
        "-search.disableCache",
        "-loggerLevel=WARN",
    ]
    return VictoriaMetrics(start_service("victoria-metrics", argv, "/health", workdir))


PROMETHEUS_CONFIG = "global:\n  scrape_interval: 1h\n  evaluation_interval: 1h\nscrape_configs: []\n"


@dataclass
class PrometheusFactory:
    """Starts Prometheus servers over backfilled OpenMetrics data; stops them all at the end."""

    root: Path
    started: list[Service] = field(default_factory=list)

    def __call__(self, openmetrics: str | Path | None = None, name: str = "prometheus") -> Service:
        """A Prometheus whose TSDB holds ``openmetrics`` (text ending with ``# EOF``, or a file), ready to query."""
        binary, promtool = require_binary("prometheus"), require_binary("promtool")
        workdir = self.root / f"{name}-{len(self.started)}"
        data = workdir / "data"
        data.mkdir(parents=True)
        if openmetrics is not None:
            source = Path(openmetrics) if isinstance(openmetrics, Path) else workdir / "backfill.om"
            if not isinstance(openmetrics, Path):
                source.write_text(openmetrics)
            done = subprocess.run(
                [promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(source), str(data)],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, f"promtool backfill of {source} failed:\n{done.stdout}\n{done.stderr}"
        config = workdir / "prometheus.yml"
        config.write_text(PROMETHEUS_CONFIG)
        argv = [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            "--storage.tsdb.retention.time=100y",  # backfilled blocks are old: keep them
            "--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ]
        service = start_service(name, argv, "/-/ready", workdir)
        self.started.append(service)
        return service

    def stop_all(self) -> None:
        for service in self.started:
            service.stop()


def start_node_exporter(workdir: Path) -> Service:
    """node_exporter with a few cheap collectors only."""
    binary = require_binary("prometheus-node-exporter")
    argv = [
        binary,
        "--web.listen-address=127.0.0.1:{port}",
        "--collector.disable-defaults",
        "--collector.cpu",
        "--collector.meminfo",
        "--collector.loadavg",
        "--collector.uname",
        "--collector.stat",
        "--log.level=warn",
    ]
    return start_service("node_exporter", argv, "/metrics", workdir)


def postgres_bindir() -> Path:
    """The folder of Debian's PostgreSQL binaries (``/usr/lib/postgresql/<major>/bin``), the newest if several."""
    versions = Path("/usr/lib/postgresql").glob("*/bin/postgres")
    found = sorted(versions, key=lambda p: tuple(int(x) for x in re.findall(r"\d+", p.parts[-3])))
    if found:
        return found[-1].parent
    on_path = shutil.which("postgres")
    if on_path is None:
        pytest.fail(f"postgres not found in /usr/lib/postgresql/*/bin or on PATH: {SETUP_HINT}", pytrace=False)
    return Path(on_path).parent


@dataclass
class Postgres:
    """A running PostgreSQL that trusts the superuser ``peerwatch`` on 127.0.0.1; one database per test."""

    service: Service
    port: int
    datadir: Path

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://peerwatch@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A new empty database; its URL."""
        import psycopg  # local: only the PostgreSQL tests need it

        name = f"test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as db:
            db.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        import psycopg

        name = url.rpartition("/")[2]
        with psycopg.connect(self.url(), autocommit=True) as db:
            db.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # FORCE: ends a test's leftover sessions


def start_postgres(workdir: Path, attempts: int = 3) -> Postgres:
    """initdb a cluster and start ``postgres`` on a free loopback port, tuned for tests (no fsync).

    postgres refuses to run as root, so as root it runs as the ``postgres`` user that Debian's package
    creates, with its data in a folder of its own under /tmp (pytest's temporary folders are private
    to root); the folder is removed by :func:`stop_postgres`.
    """
    bindir = postgres_bindir()
    as_user: dict[str, object] = {}
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            pytest.fail(f"running as root, and there is no 'postgres' user to run PostgreSQL as: {SETUP_HINT}")
        as_user = {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}
        home = Path(tempfile.mkdtemp(prefix="peerwatch-postgres-"))
        os.chown(home, owner.pw_uid, owner.pw_gid)
    else:
        home = workdir / "home"
        home.mkdir(parents=True)
    data = home / "data"
    done = subprocess.run(
        [bindir / "initdb", "-D", data, "-U", "peerwatch", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=home,
        **as_user,
    )
    if done.returncode != 0:
        raise StartError(f"initdb failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    workdir.mkdir(parents=True, exist_ok=True)
    for attempt in range(attempts):
        port = free_port()
        argv = [str(bindir / "postgres"), "-D", str(data), "-k", str(home), "-p", str(port), "-h", "127.0.0.1"]
        argv += ["-c", "fsync=off", "-c", "full_page_writes=off", "-c", "synchronous_commit=off"]
        log_path = workdir / "postgres.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=home, **as_user
            )
        url = f"postgresql://peerwatch@127.0.0.1:{port}/postgres"
        server = Postgres(Service("postgres", url, proc, log_path, signal.SIGINT), port, home)  # SIGINT: fast shutdown
        try:
            _wait_for_postgres(server)
            return server
        except StartError as exc:
            if "address already in use" not in str(exc).lower() or attempt == attempts - 1:
                stop_postgres(server)
                raise
    raise AssertionError("unreachable")


def _wait_for_postgres(server: Postgres) -> None:
    import psycopg

    proc, deadline, last = server.service.proc, time.monotonic() + START_TIMEOUT, "no answer"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StartError(
                f"postgres exited with {proc.returncode} at start-up; its log:\n{server.service.log_tail()}"
            )
        try:
            with psycopg.connect(server.url(), connect_timeout=2):
                return
        except psycopg.OperationalError as exc:
            last = str(exc).strip()
        time.sleep(0.1)
    server.service.stop()
    log = server.service.log_tail()
    raise StartError(f"postgres not ready at {server.url()} after {START_TIMEOUT:.0f}s ({last}); its log:\n{log}")


def stop_postgres(server: Postgres) -> None:
    """Stop the server by PID and remove its data (which lives outside pytest's folders as root)."""
    server.service.stop(grace=15.0)
    shutil.rmtree(server.datadir, ignore_errors=True)


@contextlib.contextmanager
def _stopping(service: Service) -> Iterator[Service]:
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture(scope="session")
def victoria_metrics(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VictoriaMetrics]:
    """A VictoriaMetrics shared by the session: isolate test data by metric name or a label."""
    vm = start_victoria_metrics(tmp_path_factory.mktemp("victoria-metrics"))
    with _stopping(vm.service):
        yield vm


@pytest.fixture(scope="session")
def prometheus_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Service]]:
    """``prometheus_factory(openmetrics_text_or_path)`` starts a Prometheus over that data and returns it."""
    factory = PrometheusFactory(tmp_path_factory.mktemp("prometheus"))
    try:
        yield factory
    finally:
        factory.stop_all()


@pytest.fixture(scope="session")
def node_exporter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A node_exporter on a free loopback port."""
    with _stopping(start_node_exporter(tmp_path_factory.mktemp("node-exporter"))) as service:
        yield service


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Postgres]:
    """A PostgreSQL shared by the session: ask for ``postgres_url`` to get a database of a test's own."""
    server = start_postgres(tmp_path_factory.mktemp("postgres"))
    try:
        yield server
    finally:
        stop_postgres(server)


@pytest.fixture
def postgres_url(postgres: Postgres) -> Iterator[str]:
    """The URL of a new empty database on the session's PostgreSQL, dropped after the test."""
    url = postgres.create_database()
    try:
        yield url
    finally:
        postgres.drop_database(url)
