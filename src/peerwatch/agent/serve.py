"""Publishing the agent's metrics: its own HTTP ``/metrics``, or node_exporter's textfile collector."""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from peerwatch.agent.collect import Agent
from peerwatch.agent.exposition import CONTENT_TYPE

log = logging.getLogger("peerwatch.agent")

TEXTFILE_NAME = "peerwatch_agent.prom"


def write_textfile(directory: Path, text: str, name: str = TEXTFILE_NAME) -> Path:
    """Write ``text`` to ``directory/name`` atomically (temp file + rename), as the textfile collector needs.

    The temp file does not end in ``.prom`` so node_exporter never reads it half written.
    Raises ``OSError`` when the directory is missing or not writable.
    """
    target = directory / name
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # node_exporter often runs as another user
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def run_textfile_loop(agent: Agent, directory: Path, interval: float, stop: threading.Event) -> None:
    """Run the checks and rewrite the textfile every ``interval`` seconds until ``stop`` is set.

    A failed write is logged and retried next round; the file keeps the last good content.
    """
    while True:
        try:
            write_textfile(directory, agent.run_once().exposition())
        except OSError as exc:
            log.error("cannot write %s: %s", directory / TEXTFILE_NAME, exc)
        if stop.wait(interval):
            return


class MetricsServer:
    """Serves the last run's exposition on ``/metrics`` and reruns the checks every ``interval`` seconds.

    Scrapes never wait for checks (nvidia-smi can take seconds); the first run completes in
    :meth:`start` so the first scrape has data. ``port=0`` picks a free port (see :attr:`port`).
    """

    def __init__(self, agent: Agent, interval: float, host: str = "127.0.0.1", port: int = 0) -> None:
        self.agent, self.interval = agent, interval
        self._text = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._httpd = ThreadingHTTPServer((host, port), self._handler())
        self._httpd.daemon_threads = True

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def text(self) -> str:
        with self._lock:
            return self._text

    def refresh(self) -> None:
        """Run the checks now and publish the result (keeping the previous text if rendering fails)."""
        try:
            text = self.agent.run_once().exposition()
        except Exception:  # a bug in one run must not take the endpoint down
            log.exception("agent run failed; serving the previous result")
            return
        with self._lock:
            self._text = text

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.refresh()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._reply(200, CONTENT_TYPE, server.text.encode())
                elif path == "/":
                    body = b'<html><body><h1>peerwatch agent</h1><a href="/metrics">metrics</a></body></html>\n'
                    self._reply(200, "text/html; charset=utf-8", body)
                else:
                    self._reply(404, "text/plain; charset=utf-8", b"not found\n")

            def _reply(self, code: int, content_type: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                log.debug("%s " + format, self.address_string(), *args)

        return Handler

    def start(self) -> None:
        """Run the checks once, then serve and rerun them in background threads."""
        self.refresh()
        for target in (self._httpd.serve_forever, self._loop):
            thread = threading.Thread(target=target, name=f"peerwatch-agent-{target.__name__}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Stop serving and rerunning; waits for the threads to end."""
        self._stop.set()
        if self._threads:  # shutdown() waits for serve_forever, which only runs after start()
            self._httpd.shutdown()
        self._httpd.server_close()
        for thread in self._threads:
            thread.join(timeout=self.interval + 5)

    def wait(self) -> None:
        """Block until :meth:`stop` is called from elsewhere (or Ctrl-C, which stops)."""
        try:
            while not self._stop.wait(3600):
                pass
        except KeyboardInterrupt:
            self.stop()
