"""Remediation: drain a node, swap in a spare, as configured command templates; dry-run by default.

A template is a list of commands, each an argv list whose arguments may hold ``{node}``,
``{reason}``, ``{alarm_id}`` and (``swap_in`` only) ``{spare}``. Commands run without a shell, and
templates that start one are refused unless allowed; before anything is rendered the node and
spare must be names the scheduler accepts and no value may stand alone as an option (alarms/names.py).
Every remediation, dry or not, is stored as an action with who
asked, why, the commands and what they returned. See docs/service.md, "Remediation".
"""

from __future__ import annotations

import shlex
import string
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from peerwatch.alarms.errors import BadRequest, Conflict, NotFound
from peerwatch.alarms.names import NAME_RULES, InvalidValue, NameRule, check_values, shell_in
from peerwatch.alarms.spares import AVAILABLE, IN_USE, spare_pool
from peerwatch.alarms.store import ActionRecord, Store

if TYPE_CHECKING:  # alarms/config.py imports this module's templates at load
    from peerwatch.alarms.config import RemediationConfig

Command = tuple[str, ...]

PLACEHOLDERS: Mapping[str, frozenset[str]] = {
    "drain": frozenset({"node", "reason", "alarm_id"}),
    "undrain": frozenset({"node", "reason", "alarm_id"}),
    "swap_in": frozenset({"node", "spare", "reason", "alarm_id"}),
}
# What each API action runs, in order; a swap drains the node, then brings the spare in.
ACTIONS: Mapping[str, tuple[str, ...]] = {"drain": ("drain",), "swap": ("drain", "swap_in"), "undrain": ("undrain",)}

PRESETS: Mapping[str, Mapping[str, tuple[Command, ...]]] = {
    "slurm": {
        "drain": (("scontrol", "update", "nodename={node}", "state=drain", "reason={reason}"),),
        "undrain": (("scontrol", "update", "nodename={node}", "state=resume"),),
        "swap_in": (("scontrol", "update", "nodename={spare}", "state=resume"),),
    },
    # "--" ends the options (kubectl's and click's parsers both honour it): a name is never an option.
    "kubernetes": {
        "drain": (("kubectl", "cordon", "--", "{node}"), ("kubectl", "drain", "--ignore-daemonsets", "--", "{node}")),
        "undrain": (("kubectl", "uncordon", "--", "{node}"),),
        "swap_in": (("kubectl", "uncordon", "--", "{spare}"),),
    },
    # Backend.AI takes an agent out of scheduling by its `schedulable` flag (existing sessions stay).
    "backendai": {
        "drain": (("backend.ai", "admin", "agent", "update", "--schedulable", "false", "--", "{node}"),),
        "undrain": (("backend.ai", "admin", "agent", "update", "--schedulable", "true", "--", "{node}"),),
        "swap_in": (("backend.ai", "admin", "agent", "update", "--schedulable", "true", "--", "{spare}"),),
    },
}
OUTPUT_LIMIT = 16_000  # characters kept of each command's stdout and stderr
TIMED_OUT, NOT_FOUND = 124, 127  # exit codes as timeout(1) and a shell report them


def check_shell(commands: Sequence[Sequence[str]], allow_shell: bool) -> None:
    """Raise ValueError when a command starts a shell (unless ``allow_shell``; even then the free-text
    ``{reason}`` never goes through one)."""
    for i, argv in enumerate(commands):
        shell = shell_in(argv)
        if shell is None:
            continue
        where = f"command {i + 1}" if len(commands) > 1 else "the command"
        if not allow_shell:
            raise ValueError(
                f"{where} runs a shell ({shell!r}), which would parse what is put into it as shell code; "
                "write the program's own argv instead, or set remediation.allow_shell: true"
            )
        if any("{reason}" in arg for arg in argv):
            raise ValueError(f"{where} runs a shell ({shell!r}): {{reason}} is free text and never goes through one")


def check_template(commands: Sequence[Sequence[str]], template: str) -> None:
    """Raise ValueError naming the argument when a command uses a placeholder ``template`` lacks."""
    known = PLACEHOLDERS[template]
    for argv in commands:
        for arg in argv:
            try:
                fields = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(arg) if f is not None]
            except ValueError as exc:
                raise ValueError(f"{arg!r}: {exc} (write a literal brace as {{{{ or }}}})") from None
            for name, spec, conv in fields:
                if spec or conv:
                    raise ValueError(f"{arg!r}: placeholders take no format spec or conversion")
                if name not in known:
                    allowed = ", ".join("{" + k + "}" for k in sorted(known))
                    raise ValueError(f"unknown placeholder {{{name}}} in {arg!r} (known here: {allowed})")


def render(
    commands: Sequence[Sequence[str]], values: Mapping[str, str], rule: NameRule = NAME_RULES["hostname"]
) -> tuple[Command, ...]:
    """The commands with their placeholders filled (templates were checked at load); raises
    :class:`~peerwatch.alarms.names.InvalidValue` for a node name ``rule`` rejects or a value that
    would be an option."""
    check_values(values, commands, rule)
    return tuple(tuple(arg.format_map(values) for arg in argv) for argv in commands)


@dataclass(frozen=True, slots=True)
class Ran:
    """One command and what it returned; ``exit_code`` None: not run (dry-run, or an earlier one failed)."""

    argv: Command
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""

    def as_json(self) -> dict[str, object]:
        return {"argv": list(self.argv), "exit_code": self.exit_code, "stdout": self.stdout, "stderr": self.stderr}


def run(argv: Command, timeout: float) -> Ran:
    """Run one command without a shell, with a timeout; never raises for the command's own failure."""
    try:
        done = subprocess.run(list(argv), capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired as exc:
        return Ran(argv, TIMED_OUT, _text(exc.stdout), _text(exc.stderr) + f"\ntimed out after {timeout:g}s")
    except OSError as exc:
        return Ran(argv, NOT_FOUND, "", f"cannot run {argv[0]}: {exc.strerror or exc}")
    return Ran(argv, done.returncode, _text(done.stdout), _text(done.stderr))


class Remediator:
    """Plans, runs (in execute mode) and records remediations; one at a time, so no spare is taken twice."""

    def __init__(self, config: RemediationConfig | None, store: Store) -> None:
        self.config = config
        self.store = store
        self._lock = threading.Lock()

    def remediate(
        self, alarm_id: str, action: str, by: str, reason: str | None, views: Sequence[Mapping[str, Any]], wall: float
    ) -> dict[str, object]:
        """Render the action's commands for the alarm's node (and the lowest-risk available spare for a
        swap), run them in execute mode, store the action; the JSON of what was done."""
        config = self.config
        if config is None:
            raise Conflict("remediation is not configured (setting remediation)")
        stored = self.store.alarm(alarm_id)
        if stored is None:
            raise NotFound(f"no alarm with id {alarm_id!r}")
        if action != "undrain" and not stored.open:
            raise Conflict(f"alarm {alarm_id} is resolved; there is nothing to {action}")
        templates = []
        for name in ACTIONS[action]:
            commands = config.commands(name)
            if not commands:
                raise Conflict(f"remediation.templates.{name} is not configured (nor by a preset)")
            templates.append(commands)
        a = stored.alarm
        reason = reason or f"peerwatch alarm {a.id}: {a.diagnosis} on {a.component}"
        with self._lock:
            spare, risk = None, None
            if action == "swap":
                free = {n.node for n in self.store.nodes() if n.spare == AVAILABLE}  # the store's state, not the views'
                pool = [p for p in spare_pool(views) if p[1] in free and p[1] != a.node]
                if not pool:
                    raise Conflict(f"no spare available to swap in for {a.node} (setting spares)")
                risk, spare = pool[0]
            values = {"node": a.node, "spare": spare or "", "reason": reason, "alarm_id": a.id}
            try:
                argv = tuple(c for commands in templates for c in render(commands, values, config.name_rule))
            except InvalidValue as exc:
                raise BadRequest(f"nothing was run for alarm {a.id}: {exc}") from None
            ran = self._execute(argv, config.timeout) if config.mode == "execute" else [Ran(c) for c in argv]
            codes = [r.exit_code for r in ran if r.exit_code is not None]
            exit_code = next((c for c in codes if c != 0), codes[-1] if codes else None)
            record = ActionRecord(
                wall, action, a.id, a.node, by, reason, spare, argv, config.mode, exit_code, _output(ran)
            )
            swapped = action == "swap" and config.mode == "execute" and exit_code == 0
            self.store.record_action(record, IN_USE if swapped else None)
        return {
            **record.as_json(),
            "spare_risk": risk,
            "commands": [r.as_json() for r in ran],
            "ok": exit_code in (None, 0),
        }

    @staticmethod
    def _execute(argv: Sequence[Command], timeout: float) -> list[Ran]:
        out: list[Ran] = []
        for command in argv:
            if out and out[-1].exit_code != 0:  # stop at the first failure: never swap in after a failed drain
                out.append(Ran(command))
            else:
                out.append(run(command, timeout))
        return out


def _text(data: bytes | str | None) -> str:
    text = data.decode(errors="replace") if isinstance(data, bytes) else data or ""
    return text if len(text) <= OUTPUT_LIMIT else text[:OUTPUT_LIMIT] + f"\n[... {len(text) - OUTPUT_LIMIT} more]"


def _output(ran: Sequence[Ran]) -> str:
    parts = []
    for r in ran:
        status = "not run" if r.exit_code is None else f"exit {r.exit_code}"
        parts.append(f"$ {shlex.join(r.argv)}  # {status}\n{r.stdout}{r.stderr}".rstrip())
    return "\n".join(parts)
