"""The live service: collect every step, evaluate, reconcile with the store, notify.

Up to four threads: the collector polls the source once per step into the sample buffer; the
evaluator takes the newest collection, runs the engine over the window, reconciles its alarms
with the store and commits the step in one transaction; the notifier keeps Alertmanager in step
with the store; the publisher writes each step back to VictoriaMetrics and posts alarm changes to a
webhook. When the evaluator is slower than the step it skips to the newest collection: each
evaluation judges every step since the last one (the engine streams, detect/stream.py), so a
skipped collection delays alarms but loses none.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from peerwatch.alarms import spares
from peerwatch.alarms.alertmanager import AlertmanagerSink
from peerwatch.alarms.blind import Blindness, blind_changes, blindness
from peerwatch.alarms.errors import Conflict, StoreError
from peerwatch.alarms.reconcile import SERVICE_NODE, Judged, reconcile
from peerwatch.alarms.store import StepChanges, Store, StoredAlarm, lease_owner, node_risk
from peerwatch.alarms.stores import open_store
from peerwatch.alarms.webhook import WebhookSink
from peerwatch.detect.workload import WorkloadGroup
from peerwatch.frames.buffer import SampleBuffer
from peerwatch.frames.history import FrameHistory
from peerwatch.model import ScoreKey
from peerwatch.service.clock import Clock
from peerwatch.service.config import ClockConfig, ServiceConfig
from peerwatch.service.evaluation import Evaluation, Evaluator
from peerwatch.service.live_sources import Fetch, LiveSource, ScrapeSource, TsdbSource
from peerwatch.service.metrics import Health
from peerwatch.service.writeback import WriteBack
from peerwatch.sources.scrape import Target

log = logging.getLogger("peerwatch.service")
GRACE_STEPS = 4  # after a restart, openings this close to the last judged step are news
LEASE = "serve_lease"  # meta key: which serve process evaluates and notifies from this store
LEASE_STEPS, LEASE_MIN = 4, 120.0  # it holds for this many steps of wall time, at least this many seconds
MAX_CATCHUP = 10  # steps a late collector catches up on before it skips to now


def make_clock(config: ClockConfig | None, store: Store) -> Clock:
    """The real clock, or a replay clock whose origin survives restarts (kept in the store)."""
    if config is None:
        return Clock()
    origin = config.origin
    if origin is None:
        kept = store.meta("clock")
        if kept is not None and kept.split()[:2] == [repr(config.start), repr(config.speed)]:
            origin = float(kept.split()[2])
        else:
            origin = time.time()
            store.commit(StepChanges(meta={"clock": f"{config.start!r} {config.speed!r} {origin!r}"}))
    return Clock(config.start, origin, config.speed)


def make_source(config: ServiceConfig, clock: Clock, extra_targets: Sequence[Target] = ()) -> LiveSource:
    if config.source.tsdb is not None:
        return TsdbSource(config.source.tsdb, config.step, config.window)
    assert config.source.scrape is not None
    return ScrapeSource(config.source.scrape, config.step, clock, extra_targets)


class Service:
    """peerwatch live: the engine against a source, step after step, with its state in a store."""

    def __init__(
        self,
        config: ServiceConfig,
        *,
        store: Store | None = None,
        clock: Clock | None = None,
        source: LiveSource | None = None,
        extra_targets: Sequence[Target] = (),
    ) -> None:
        self.config = config
        self.token = config.api.token_value()
        self.store: Store = store or open_store(config.store)
        self.clock = clock or make_clock(config.clock, self.store)
        self.source = source or make_source(config, self.clock, extra_targets)
        self.buffer = SampleBuffer(config.window + 2 * config.step)
        self.evaluator = Evaluator(config.step, config.window, tuple(config.node_labels), settings=config.detection)
        api_url = config.api.url or f"http://{config.api.listen}"
        self.sink = AlertmanagerSink(config.alertmanager, self.clock, api_url) if config.alertmanager else None
        self.writeback = WriteBack(config.writeback) if config.writeback else None
        self.webhook = WebhookSink(config.webhook) if config.webhook else None
        kept = self.store.meta("evaluated_until")
        self.evaluated_until: float | None = None if kept is None else float(kept)
        sinks = tuple(s for s in (self.sink, self.writeback, self.webhook) if s is not None)
        self.health = Health(evaluated_until=self.evaluated_until, sinks=sinks)
        self.started = self.clock.now()
        self.last_fetch: Fetch | None = None
        self.blind: Blindness | None = None
        self.failure: str | None = None  # a thread died
        self.owner, self.leader = lease_owner(), True  # leader: holds the store's lease (one serve per store)
        self.error: str | None = None  # the last evaluation failed
        self.store.set_spares(config.spares, time.time())
        self._stop = threading.Event()
        self._new_fetch = threading.Condition()
        self._pending: Fetch | None = None
        self._posted = self._evaluated = 0  # fetches handed to the evaluation, and evaluated
        self._changed = threading.Event()
        self._publish_due = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- one step, callable on its own (tests, replays) ----------------------------------------

    def collect(self, at: float | None = None) -> Fetch:
        """Poll the source once for data time ``at`` (default: now); a crash of the source is a failed
        fetch, not a dead service."""
        now = self.clock.now() if at is None else at
        try:
            return self.source.collect(now, self.buffer)
        except Exception as exc:  # a bug or an odd answer must not silence monitoring
            log.exception("collecting from %s failed", self.source.name)
            return Fetch(now, now, 0, error=f"{type(exc).__name__}: {exc}")

    def lease(self) -> str | None:
        """Take or renew this process's lease on the store; the other ``serve`` holding it, if any.
        Without the lease the service neither commits steps nor notifies: one serve per store."""
        ttl = max(LEASE_MIN, LEASE_STEPS * self.config.step / self.clock.speed)
        holder = self.store.claim(LEASE, self.owner, time.time(), ttl)
        self.leader = holder is None
        return holder

    def evaluate(self, fetch: Fetch) -> list[StoredAlarm]:
        """Judge the steps after ``fetch`` and commit them; returns the rows written."""
        holder = self.lease()
        if holder is not None:
            raise Conflict(f"another peerwatch serve ({holder}) holds this store; one serve per store")
        wall = time.time()
        step = self.config.step
        scrape = self.config.source.scrape
        blind = blindness(
            fetch,
            self.buffer.newest,
            since=self.started,
            source=self.source.name,
            step=step,
            stale_steps=self.config.stale_steps,
            down_share=scrape.down_share if scrape else 1.0,
        )
        rows: list[StoredAlarm] = []
        ev: Evaluation | None = None
        if blind is None or not blind.total:
            ev = self.evaluator.evaluate(self.buffer, fetch.complete_until, fetch.at)
        open_blind = self.store.alarms(open_only=True, node=SERVICE_NODE)
        before = {s.id: _visible(s) for s in open_blind}
        if ev is not None:
            stored = [s for s in self.store.alarms(touching=ev.start, limit=100_000) if s.alarm.node != SERVICE_NODE]
            before.update((s.id, _visible(s)) for s in stored)
            judged = Judged(ev.start, ev.end, self.evaluated_until, GRACE_STEPS * step, self.evaluator.quiet, wall)
            rows = reconcile(stored, ev.alarms, judged)
        rows += blind_changes(open_blind, blind, fetch.at, wall)
        until = self.evaluated_until
        if ev is not None:  # a backlog read after a restart judges steps before those judged already
            until = ev.end if until is None else max(until, ev.end)
        self.store.commit(
            StepChanges(rows, nodes=ev.nodes if ev else (), seen_ts=ev.end if ev else 0.0, evaluated_until=until)
        )
        self.evaluator.committed()
        changed = [r for r in rows if before.get(r.id) != _visible(r)]
        for r in changed:
            a = r.alarm
            what = "resolved" if not r.open else "opened" if r.id not in before else "changed"
            log.info("alarm %s %s: %s %s %s %s", a.id, what, a.node, a.component, a.diagnosis, a.severity)
        self._quarantine([r for r in changed if r.open and r.id not in before], wall)
        self.evaluated_until, self.last_fetch, self.blind = until, fetch, blind
        self.health = replace(
            self.health,
            evaluations=self.health.evaluations + (ev is not None),
            evaluated_until=until,
            evaluation_seconds=ev.seconds if ev else self.health.evaluation_seconds,
            blind=blind is not None,
            targets=fetch.targets,
            targets_down=len(fetch.down),
            buffer_series=self.buffer.series,
            buffer_samples=self.buffer.samples,
            scores=ev.scores if ev else self.health.scores,
            groups=ev.groups if ev else self.health.groups,
        )
        if changed:
            self._changed.set()
        self._publish_due.set()
        return rows

    def _quarantine(self, opened: Sequence[StoredAlarm], wall: float) -> None:
        """An alarm that opens on an available spare takes it out of the offer (alarms/spares.py)."""
        if not opened:
            return
        available = {n.node for n in self.store.nodes() if n.spare == spares.AVAILABLE}
        for r in opened:
            if r.alarm.node in available:
                note = f"alarm {r.id} ({r.alarm.diagnosis}) opened on the spare"
                spares.quarantine(self.store, r.alarm.node, "peerwatch", note, wall, r.id)
                available.discard(r.alarm.node)
                log.warning("spare %s quarantined: %s", r.alarm.node, note)

    def notify(self) -> None:
        """Bring Alertmanager in step with the store (a no-op without one, or without the lease)."""
        if self.sink is None or not self.leader:
            return
        result = self.sink.sync(self.store)
        if result.error:
            log.warning("alertmanager: %s", result.error)
        self.health = replace(self.health, am_sent=self.sink.sent, am_errors=self.sink.errors)

    def publish(self) -> None:
        """Write the last evaluated step back to VictoriaMetrics and post alarm changes to the webhook
        (each a no-op when not configured, and both without the lease); failures are logged and
        counted, never raised."""
        health = self.health
        if not self.leader:
            return
        if self.writeback is not None and self.writeback.due(health):
            assert health.evaluated_until is not None
            everything = self.store.alarms(limit=100_000)
            risk = node_risk(everything, (n.node for n in self.store.nodes()), health.evaluated_until)
            result = self.writeback.push(health, [s for s in everything if s.open], risk)
            if result.error:
                log.warning("writeback: %s", result.error)
        if self.webhook is not None:
            result = self.webhook.sync(self.store)
            if result.error:
                log.warning("webhook: %s", result.error)

    # -- threads ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Start collecting, evaluating and notifying in background threads."""
        log.info(
            "peerwatch serve: source %s, step %gs, window %gs", self.source.name, self.config.step, self.config.window
        )
        for name, target in (("collect", self._collect_loop), ("evaluate", self._evaluate_loop)):
            self._spawn(name, target)
        if self.sink is not None:
            self._spawn("notify", self._notify_loop)
        if self.writeback is not None or self.webhook is not None:
            self._spawn("publish", self._publish_loop)

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        def guarded() -> None:
            try:
                target()
            except Exception as exc:
                self.failure = f"{name} thread died: {type(exc).__name__}: {exc}"
                log.exception("peerwatch %s thread died", name)

        thread = threading.Thread(target=guarded, name=f"peerwatch-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        with self._new_fetch:
            self._new_fetch.notify_all()
        self._changed.set()
        self._publish_due.set()
        for thread in self._threads:
            thread.join(timeout)
        self.source.close()
        for sink in (self.sink, self.writeback, self.webhook):
            if sink is not None:
                sink.close()
        if self.leader:
            self._release_lease()

    def _release_lease(self) -> None:
        """End the lease now, so a successor on another host (a pod after a Kubernetes Recreate) need
        not wait it out. Claiming it with an expiry in the past writes nothing if another serve holds it."""
        try:
            self.store.claim(LEASE, self.owner, time.time(), -1.0)
        except Exception as exc:  # a store unreachable at shutdown: the lease then expires by itself
            log.warning("could not release the store's lease: %s", exc)

    def alive(self) -> bool:
        return self.failure is None and all(t.is_alive() for t in self._threads)

    def changed(self) -> None:
        """Something Alertmanager must hear about changed outside an evaluation (a manual resolve)."""
        self._changed.set()
        self._publish_due.set()

    # What the node views and the dashboard read (alarms.state.LiveState and web's Dashboarded).
    @property
    def scores(self) -> Mapping[ScoreKey, float]:
        return self.health.scores

    @property
    def groups(self) -> Mapping[str, WorkloadGroup]:
        return self.health.groups

    def now(self) -> float:
        return self.clock.now()

    @property
    def history(self) -> FrameHistory:
        return self.evaluator.history

    def status(self) -> dict[str, object]:
        """For ``/healthz``: failed (a thread died), blind, starting (nothing evaluated yet) or ok."""
        if (not self.alive() and self._threads) or self.error is not None:
            status = "failed"
        elif self.blind is not None:
            status = "blind"
        else:
            status = "ok" if self.last_fetch is not None else "starting"
        am = None
        if self.sink is not None:
            am = {"url": self.sink.config.url, "sent": self.sink.sent, "last_error": self.sink.last_error}
        return {
            "status": status,
            "source": self.source.name,
            "failure": self.failure or self.error,
            "blind": None if self.blind is None else self.blind.reason,
            "evaluated_until": self.evaluated_until,
            "evaluations": self.health.evaluations,
            "data_now": self.clock.now(),
            "alertmanager": am,
            "sinks": {
                name: {"url": sink.config.url, "errors": sink.errors, "last_error": sink.last_error}
                for name, sink in (("writeback", self.writeback), ("webhook", self.webhook))
                if sink is not None
            },
        }

    def _collect_loop(self) -> None:
        last = self.clock.now()
        while True:
            due = self.source.next_due(last)
            if not self.clock.wait_until(due, self._stop):
                return
            fetch = self.collect(due)
            while fetch.backlog:  # the window (or a gap) a read at a time, each judged before the next
                if not self._judged(self._post(fetch)):
                    return
                fetch = self.collect(due)
            # A late round still covers its own step (a step with no round would look, to the
            # engine, like every node going silent at once); only far behind does it skip ahead.
            now = self.clock.now()
            behind = now - due >= MAX_CATCHUP * self.config.step
            last = due if self.source.catch_up and not behind else now
            self._post(fetch)

    def _post(self, fetch: Fetch) -> int:
        """Hand ``fetch`` to the evaluation (replacing one not yet taken); its number."""
        with self._new_fetch:
            self._pending = fetch
            self._posted += 1
            self._new_fetch.notify_all()
            return self._posted

    def _judged(self, number: int) -> bool:
        """Wait until the fetch ``number`` is evaluated; False when the service stops first."""
        with self._new_fetch:
            while self._evaluated < number and not self._stop.is_set():
                self._new_fetch.wait(1.0)
        return not self._stop.is_set()

    def _evaluate_loop(self) -> None:
        while not self._stop.is_set():
            with self._new_fetch:
                while self._pending is None and not self._stop.is_set():
                    self._new_fetch.wait(1.0)
                fetch, self._pending, number = self._pending, None, self._posted
            if fetch is not None and not self._stop.is_set():
                try:
                    self.evaluate(fetch)
                    self.error = None
                except StoreError as exc:  # names the store and the cause: no traceback to read
                    self.error = f"evaluation failed: {exc}"
                    log.error("evaluation at %s failed: %s", fetch.at, exc)
                except Exception as exc:  # one bad step must not end monitoring; /healthz shows it
                    self.error = f"evaluation failed: {type(exc).__name__}: {exc}"
                    log.exception("evaluation at %s failed", fetch.at)
                with self._new_fetch:
                    self._evaluated = number
                    self._new_fetch.notify_all()

    def _notify_loop(self) -> None:
        assert self.sink is not None
        next_send = 0.0
        while not self._stop.is_set():
            changed = self._changed.wait(1.0)
            self._changed.clear()
            if self._stop.is_set():
                return
            if changed or time.time() >= next_send:
                self.notify()
                retry = 5.0 if self.sink.last_error else self.sink.config.resend_interval
                next_send = time.time() + min(retry, self.sink.config.resend_interval)

    def _publish_loop(self) -> None:
        # Woken by each step and each change; every 5 s otherwise, which retries a failed post.
        while not self._stop.is_set():
            self._publish_due.wait(5.0)
            self._publish_due.clear()
            if self._stop.is_set():
                return
            try:
                self.publish()
            except Exception:  # a sink's bug must not end monitoring
                log.exception("publishing failed")


def _visible(s: StoredAlarm) -> tuple[bool, str, str, str]:
    """What Alertmanager sees of an alarm: a change of it is sent at once."""
    return (s.open, s.alarm.component, s.alarm.diagnosis, s.alarm.severity)
