"""Roles (``roles.toml``): the metric families a detector reads, named by meaning, each role's
families in order of preference, so that another exporter's or exporter version's name for the same
metric is a data change."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
_KEYS = frozenset({"families", "scale"})


class RoleError(ValueError):
    """A roles table that cannot be used; the message names the file and the role."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class Roles:
    """Role -> families in order of preference, and each family's factor to its role's unit."""

    families_of: Mapping[str, tuple[str, ...]]
    scales: Mapping[str, float]

    @classmethod
    def default(cls) -> Roles:
        """The roles shipped with peerwatch (``catalog/roles.toml``), loaded once."""
        return _default_roles()

    @classmethod
    def from_toml(cls, path: str | Path) -> Roles:
        path = Path(path)
        return cls.from_text(path.read_text(encoding="utf-8"), str(path))

    @classmethod
    def from_text(cls, text: str, where: str) -> Roles:
        """Parse roles TOML; errors name ``where`` and the role."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise RoleError(where, str(exc)) from None
        families: dict[str, tuple[str, ...]] = {}
        scales: dict[str, float] = {}
        for role, table in data.items():
            at = f"{where}: [{role}]"
            families[role], own = _role(table, at)
            for name, factor in own.items():
                if scales.setdefault(name, factor) != factor:
                    raise RoleError(at, f"scale of {name!r} differs from another role's")
        return cls(families, scales)

    def families(self, role: str) -> tuple[str, ...]:
        """The families of ``role`` in order of preference (KeyError: no such role)."""
        return self.families_of[role]

    def present(self, role: str, have: Mapping[str, T]) -> Iterator[T]:
        """The items of ``have`` (by family name) of ``role``'s families, in order of preference."""
        return (have[name] for name in self.families_of[role] if name in have)

    def first(self, role: str, have: Mapping[str, T]) -> T | None:
        """The preferred family of ``role`` that ``have`` holds, None if none."""
        return next(self.present(role, have), None)

    def scale(self, name: str) -> float:
        return self.scales.get(name, 1.0)

    def roles_of(self, name: str) -> tuple[str, ...]:
        return tuple(role for role, names in self.families_of.items() if name in names)


def _role(table: Any, at: str) -> tuple[tuple[str, ...], dict[str, float]]:
    if not isinstance(table, dict) or set(table) - _KEYS or "families" not in table:
        raise RoleError(at, "expected a table with families (and optionally scale)")
    names = table["families"]
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise RoleError(at, "families must be a non-empty list of metric names")
    scale = table.get("scale", {})
    if not isinstance(scale, dict) or not all(
        n in names and isinstance(v, int | float) and v > 0 for n, v in scale.items()
    ):
        raise RoleError(at, "scale maps some of the role's families to positive factors")
    return tuple(names), {n: float(v) for n, v in scale.items()}


@cache
def _default_roles() -> Roles:
    text = resources.files("peerwatch.catalog").joinpath("roles.toml").read_text(encoding="utf-8")
    return Roles.from_text(text, "roles.toml")
