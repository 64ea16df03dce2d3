"""The `peerwatch` command: parses arguments and calls the library; no logic of its own."""

from __future__ import annotations

import typer

from peerwatch import __version__

app = typer.Typer(
    name="peerwatch",
    help="Detect failing GPUs, links and hosts in GPU training clusters by comparing peers.",
    no_args_is_help=True,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"peerwatch {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """peerwatch command line."""
