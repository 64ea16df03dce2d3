"""Cluster simulator with fault injection: the bench peerwatch is measured on.

``simulate(Scenario(...))`` builds a run in memory; ``write_recording`` writes it as
VictoriaMetrics JSON lines (or Prometheus text) with its ``labels.json`` ground truth;
``SCENARIOS`` is the public scenario set; ``serve`` exposes live exporters on 127.0.0.1.
"""

from peerwatch.simulate.cluster import ClusterSpec, Hardware, default_spec
from peerwatch.simulate.events import Benign, Event
from peerwatch.simulate.faults import KINDS, Fault, FaultKind, FaultRequest
from peerwatch.simulate.rates import mttf_hours
from peerwatch.simulate.recording import Simulation, Written, simulate, write_recording
from peerwatch.simulate.scenario import Scenario

__all__ = [
    "KINDS",
    "Benign",
    "ClusterSpec",
    "Event",
    "Fault",
    "FaultKind",
    "FaultRequest",
    "Hardware",
    "Scenario",
    "Simulation",
    "Written",
    "default_spec",
    "mttf_hours",
    "simulate",
    "write_recording",
]
