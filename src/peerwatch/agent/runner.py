"""Running external tools (dmesg, nvidia-smi, dcgmi, nvme) behind one small, injectable role.

Checks never call :mod:`subprocess` themselves: they get a :class:`CommandRunner`, so tests
replay recorded outputs with :class:`RecordedRunner` and the agent can run with a timeout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What a finished command printed and returned."""

    returncode: int
    stdout: str
    stderr: str = ""


class CommandError(Exception):
    """The command could not be run to completion (not found, timed out, not executable)."""


class CommandRunner(Protocol):
    """Finds and runs programs."""

    def which(self, program: str) -> str | None:
        """The path of ``program`` if it can be run, else ``None``."""
        ...

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        """Run ``argv``; raise :class:`CommandError` if it cannot start or exceeds ``timeout`` seconds."""
        ...


@dataclass(frozen=True)
class SubprocessRunner:
    """Runs real programs, looking them up on ``path`` (``None``: the process's PATH).

    The agent usually runs as a service with a short PATH, so ``/usr/sbin`` and ``/sbin``
    (where nvme-cli and dmesg live on some distributions) are searched as well.
    """

    path: str | None = None
    extra_dirs: tuple[str, ...] = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")

    def which(self, program: str) -> str | None:
        found = shutil.which(program, path=self.path)
        if found is None and self.path is None:
            found = shutil.which(program, path=":".join(self.extra_dirs))
        return found

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        exe = self.which(argv[0])
        if exe is None:
            raise CommandError(f"{argv[0]} not found")
        try:
            done = subprocess.run(
                [exe, *argv[1:]],
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout,
                check=False,
                env={**os.environ, "LC_ALL": "C"},  # tool messages are parsed in English
            )
        except subprocess.TimeoutExpired as exc:
            raise CommandError(f"{argv[0]} timed out after {timeout:g} s") from exc
        except OSError as exc:
            raise CommandError(f"{argv[0]} could not be run: {exc.strerror or exc}") from exc
        return CommandResult(done.returncode, done.stdout, done.stderr)


@dataclass(frozen=True)
class RecordedRunner:
    """Replays recorded outputs: ``outputs`` maps a command line (argv joined by spaces) to its result.

    A program is "installed" when some recorded command starts with it. A command line not in
    ``outputs`` raises :class:`CommandError`, and so does one mapped to a :class:`CommandError`
    (a recorded timeout). ``calls`` lists the command lines asked for, for tests to inspect.
    """

    outputs: Mapping[str, CommandResult | CommandError]
    calls: list[str] = field(default_factory=list)

    def which(self, program: str) -> str | None:
        return f"/recorded/{program}" if any(k.split(" ", 1)[0] == program for k in self.outputs) else None

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        line = " ".join(argv)
        self.calls.append(line)
        result = self.outputs.get(line)
        if result is None:
            raise CommandError(f"{argv[0]} not found" if self.which(argv[0]) is None else f"no recording of {line!r}")
        if isinstance(result, CommandError):
            raise result
        return result
