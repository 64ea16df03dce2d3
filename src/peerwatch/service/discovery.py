"""Scrape targets from Prometheus-style file service discovery (``file_sd_configs`` files).

Each file is JSON or YAML: a list of ``{"targets": ["host:port", ...], "labels": {...}}``. As in
Prometheus, ``__scheme__`` and ``__metrics_path__`` shape the URL, other ``__`` labels are dropped,
and ``job`` names the job. A file is re-read when it changes; a file that cannot be read or parsed
keeps its last good targets and is reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from peerwatch.sources.scrape import Target


class DiscoveryError(ValueError):
    """A file_sd file that cannot be used; the message names the file and the entry."""


def parse_file_sd(text: str, where: str) -> list[Target]:
    """Targets of one file_sd document (JSON is YAML, so one parser reads both)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise DiscoveryError(f"{where}: not valid JSON or YAML: {exc}") from None
    if doc is None:
        return []
    if not isinstance(doc, list):
        raise DiscoveryError(f"{where}: expected a list of target groups, got {type(doc).__name__}")
    out: list[Target] = []
    for i, group in enumerate(doc):
        out.extend(_group(group, f"{where}: group {i}"))
    return out


def _group(group: Any, where: str) -> list[Target]:
    if not isinstance(group, dict) or not isinstance(group.get("targets"), list):
        raise DiscoveryError(f"{where}: expected {{targets: [host:port, ...], labels: {{...}}}}")
    labels = group.get("labels") or {}
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise DiscoveryError(f"{where}: labels must map names to strings")
    scheme = labels.get("__scheme__", "http")
    path = "/" + labels.get("__metrics_path__", "/metrics").lstrip("/")
    own = {k: v for k, v in labels.items() if not k.startswith("__") and k != "job"}
    targets = []
    for address in group["targets"]:
        if not isinstance(address, str) or not address or "/" in address:
            raise DiscoveryError(f"{where}: target {address!r} is not host:port")
        targets.append(Target(f"{scheme}://{address}{path}", job=labels.get("job", ""), labels=own))
    return targets


@dataclass
class FileDiscovery:
    """The targets of some file_sd files, re-read when a file's modification time changes."""

    paths: Sequence[Path]
    _seen: dict[Path, tuple[float, list[Target]]] = field(default_factory=dict)
    errors: dict[Path, str] = field(default_factory=dict)

    def targets(self) -> list[Target]:
        """Current targets of every file, in file order."""
        out: list[Target] = []
        for path in self.paths:
            try:
                mtime = path.stat().st_mtime
            except OSError as exc:
                self.errors[path] = f"{path}: cannot read: {exc.strerror}"
                out.extend(self._seen.get(path, (0.0, []))[1])
                continue
            seen = self._seen.get(path)
            if seen is None or seen[0] != mtime:
                try:
                    self._seen[path] = (mtime, parse_file_sd(path.read_text(), str(path)))
                    self.errors.pop(path, None)
                except (OSError, DiscoveryError) as exc:
                    self.errors[path] = str(exc)
            out.extend(self._seen.get(path, (0.0, []))[1])
        return out
