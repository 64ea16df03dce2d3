"""The unit a metric's values are in, for axes: from the help text, the name's suffix or the category
(``units.toml``); counters, drawn as per-second rates, get ``/s``."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from peerwatch.catalog.load import Catalog

_HELP_UNIT = re.compile(r"\(in ([^)]{1,12})\)")  # dcgm-exporter: "Power draw (in W)."


@dataclass(frozen=True, slots=True)
class UnitRules:
    suffixes: tuple[tuple[str, str], ...]
    categories: dict[str, str]
    aliases: dict[str, str]

    def unit(self, metric: str, rate: bool, catalog: Catalog | None = None) -> str:
        """``metric``'s unit (``""`` when nothing says), with ``/s`` when drawn as a rate."""
        family = (catalog or Catalog.default()).lookup(metric)
        base = ""
        match = _HELP_UNIT.search(family.help) if family is not None else None
        if match:
            base = self.aliases.get(match.group(1).strip(), match.group(1).strip())
        else:
            stem = (family.name if family is not None else metric).lower().removesuffix("_total")
            base = next((u for s, u in self.suffixes if stem.endswith(s)), "")
            if not base and family is not None:
                base = self.categories.get(family.category.value, "")
        return f"{base}/s" if rate else base


@cache
def unit_rules() -> UnitRules:
    """The rules shipped in ``catalog/units.toml``, loaded once."""
    data = tomllib.loads(resources.files("peerwatch.catalog").joinpath("units.toml").read_text(encoding="utf-8"))
    return UnitRules(
        tuple((r["suffix"], r["unit"]) for r in data["suffix"]),
        dict(data.get("category", {})),
        dict(data.get("alias", {})),
    )
