"""``peerwatch agent read FILE...``: judge saved tool outputs as the agent judges live ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from peerwatch.agent.checks import CheckResult, Status
from peerwatch.agent.readers import ReadError, SavedRead, read_saved

STATUS_WORDS = {Status.OK: "ok", Status.UNHEALTHY: "warning", Status.CRITICAL: "critical", Status.UNKNOWN: "unknown"}
MAX_BYTES = 256 * 1024 * 1024  # a saved output larger than this is not one command's output


def _check_json(result: CheckResult) -> dict[str, str]:
    return {
        "check": result.check,
        "component": result.component,
        "status": STATUS_WORDS[result.status],
        "detail": result.hint,
    }


def read_file(path: Path) -> SavedRead:
    """Read and judge one saved output; :class:`ReadError` names the file and what is wrong."""
    try:
        if path.stat().st_size > MAX_BYTES:
            raise ReadError(f"{path}: larger than {MAX_BYTES // 2**20} MiB, not a saved tool output")
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise ReadError(f"{path}: {exc.strerror or exc}") from exc
    try:
        return read_saved(text)
    except ReadError as exc:
        raise ReadError(f"{path}: {exc}") from exc


def read_command(
    files: Annotated[list[Path], typer.Argument(help="Saved outputs: nvidia-smi -q / -q -x / --query-gpu CSV, dmesg.")],
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object per file and line.")] = False,
) -> None:
    """Judge saved host-check outputs (format detected from content) as the live agent would.

    Exits 1 when a file could not be read (the others are still judged), 0 otherwise, whatever was found.
    """
    failed = False
    for path in files:
        try:
            saved = read_file(path)
        except ReadError as exc:
            failed = True
            if json_out:
                typer.echo(json.dumps({"file": str(path), "error": str(exc)}))
            typer.echo(f"peerwatch agent read: {exc}", err=True)
            continue
        if json_out:
            checks = [_check_json(r) for r in saved.results]
            typer.echo(json.dumps({"file": str(path), "format": saved.format, "checks": checks}))
            continue
        typer.echo(f"{path} ({saved.format})")
        for r in saved.results:
            typer.echo(f"  {STATUS_WORDS[r.status]:<8}  {r.check:<10}  {r.component:<22}  {r.hint}")
    if failed:
        raise typer.Exit(1)


__all__ = ["STATUS_WORDS", "read_command", "read_file"]
