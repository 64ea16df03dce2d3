"""``python -m peerwatch.service serve|demo``: the same commands as ``peerwatch serve|demo``."""

import typer

from peerwatch.service.commands import demo_command, serve_command

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None)
app.command("serve")(serve_command)
app.command("demo")(demo_command)

if __name__ == "__main__":
    app()
