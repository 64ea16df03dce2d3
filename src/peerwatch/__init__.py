"""peerwatch: find the failing GPU, link or host by comparing every entity with its peers."""

__version__ = "0.1.0"
