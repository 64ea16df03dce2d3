"""``python -m peerwatch``: the same CLI as the ``peerwatch`` command."""

from peerwatch.cli import app

app()
