"""``peerwatch simulate``: write a recording, write the public scenario set, or serve live exporters.

The CLI adds it with ``app.command("simulate")(simulate_command)``; the command only parses
arguments and calls the library.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from peerwatch.simulate.cluster import default_spec
from peerwatch.simulate.faults import KINDS, Fault, FaultRequest
from peerwatch.simulate.recording import simulate, write_recording
from peerwatch.simulate.scenario import Scenario
from peerwatch.simulate.scenarios import write_scenarios


def parse_faults(text: str) -> tuple[tuple[FaultRequest, ...], bool]:
    """``KIND[@NODE][:AT],...`` (AT a fraction of the run) and ``random`` (draw from the MTTF table)."""
    requests: list[FaultRequest] = []
    random = False
    for item in filter(None, (part.strip() for part in text.split(","))):
        if item == "random":
            random = True
            continue
        at: float | None = None
        if ":" in item:
            item, at_text = item.rsplit(":", 1)
            try:
                at = float(at_text)
            except ValueError:
                raise typer.BadParameter(f"fault time {at_text!r} is not a number (fraction of the run)") from None
        kind, _, node = item.partition("@")
        if kind not in KINDS:
            raise typer.BadParameter(f"unknown fault kind {kind!r}; known: {', '.join(KINDS)}, random")
        try:
            requests.append(FaultRequest(kind, node or None, at=at))
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    return tuple(requests), random


def describe_faults(faults: Sequence[Fault], start: float) -> str:
    """What a run injects, one fault per line, times from the start of the run."""
    if not faults:
        return "injecting no faults (a healthy run; --faults KIND,... or --faults random injects some)"
    lines = [f"injecting {len(faults)} fault{'s' if len(faults) > 1 else ''}:"]
    for f in sorted(faults, key=lambda f: f.onset_ts):
        fails = "" if f.failure_ts is None else f", fails at +{(f.failure_ts - start) / 3600:.2f} h"
        lines.append(f"  {f.kind} on {f.node} {f.component} from +{(f.onset_ts - start) / 3600:.2f} h{fails}")
    return "\n".join(lines)


def simulate_command(
    out: Annotated[
        Path | None, typer.Option("--out", help="Write one recording (metrics.jsonl + labels.json) here.")
    ] = None,
    scenarios: Annotated[Path | None, typer.Option("--scenarios", help="Write the public scenario set here.")] = None,
    only: Annotated[str, typer.Option("--only", help="With --scenarios: comma-separated scenario names.")] = "",
    variants: Annotated[
        bool,
        typer.Option("--variants", help="With --scenarios: the variant set (other sizes, scrape intervals, seeds)."),
    ] = False,
    serve: Annotated[bool, typer.Option("--serve", help="Serve every node's exporters live on 127.0.0.1.")] = False,
    nodes: Annotated[int, typer.Option("--nodes", min=2, help="Cluster size (reference mix scaled: ~5% spares).")] = 63,
    hours: Annotated[float, typer.Option("--hours", min=0.01, help="Length of the simulated run.")] = 6.0,
    seed: Annotated[
        int | None, typer.Option("--seed", min=0, help="Same seed, byte-identical output (sets: 7, variants: 100).")
    ] = None,
    faults: Annotated[
        str,
        typer.Option(
            "--faults",
            help="Faults to inject: KIND[@NODE][:AT],... or 'random' (MTTF table). Default: none, a healthy run.",
        ),
    ] = "",
    fmt: Annotated[
        str, typer.Option("--format", help="vm-jsonl (VictoriaMetrics export) or prom (text).")
    ] = "vm-jsonl",
    compress: Annotated[bool, typer.Option("--gzip", help="Gzip the metrics file.")] = False,
    speed: Annotated[
        float, typer.Option("--speed", min=0.01, help="--serve: simulated seconds per real second.")
    ] = 10.0,
    base_port: Annotated[int, typer.Option("--base-port", help="--serve: first port (see docs/simulator.md).")] = 20000,
    push: Annotated[str, typer.Option("--push", help="--serve: also push each step to this VictoriaMetrics URL.")] = "",
) -> None:
    """Simulate a GPU training cluster with injected faults (recording, scenario set, or live exporters)."""
    modes = sum((out is not None, scenarios is not None, serve))
    if modes != 1:
        raise typer.BadParameter("give exactly one of --out DIR, --scenarios DIR, --serve")
    if scenarios is not None:
        names = [n for n in only.split(",") if n] or None
        try:
            write_scenarios(
                scenarios,
                names,
                seed=(100 if variants else 7) if seed is None else seed,
                variants=variants,
                compress=compress,
                progress=lambda sc, w: typer.echo(f"{sc.name}: {w.series} series, {w.samples} samples"),
            )
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        return
    requests, random = parse_faults(faults)
    seed = seed or 0
    try:
        scenario = Scenario(
            "cli",
            default_spec(nodes),
            hours,
            seed,
            requests,
            random_faults=random,
            description=f"peerwatch simulate --nodes {nodes} --hours {hours} --seed {seed}",
        )
        sim = simulate(scenario)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    typer.echo(describe_faults(sim.faults, sim.grid.start))
    if out is not None:
        written = write_recording(sim, out, fmt=fmt, compress=compress)
        typer.echo(f"{written.metrics}: {written.series} series, {written.samples} samples; {written.labels}")
        return
    from peerwatch.simulate.serve import serve_forever

    serve_forever(sim, speed=speed, base_port=base_port, push_url=push or None, echo=typer.echo)
