class ReadError(ValueError):
    """Saved output that a reader cannot read; the message names the line."""
