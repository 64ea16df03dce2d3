"""Configuration of a live alarm's life (the store, the Alertmanager and webhook sinks, remediation)
and the types every configuration section shares: typed sections (pydantic), unknown keys rejected,
durations as seconds or Prometheus-style strings. ``peerwatch serve``'s whole configuration
(service/config.py) is composed of these and the sections of its own.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from peerwatch.alarms.errors import ConfigError
from peerwatch.alarms.names import NAME_RULES, NameRule
from peerwatch.alarms.remediation import PRESETS, Command, check_shell, check_template
from peerwatch.redact import redact_url

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration(value: Any) -> float:
    """Seconds from a number or a string such as ``90``, ``30s``, ``5m``, ``1h30m``."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like 30s, 5m, 2h")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            parts = _PART.findall(text)
            if not parts or "".join(n + u for n, u in parts) != text:
                raise ValueError(f"{value!r} is not a duration (use seconds or e.g. 30s, 5m, 2h, 1h30m)") from None
            seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    else:
        raise ValueError("a duration is a number of seconds or a string like 30s, 5m, 2h")
    if not seconds > 0:
        raise ValueError(f"a duration must be positive, got {value!r}")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]


def _http_url(value: str) -> str:
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise ValueError(f"must be an http:// or https:// URL, got {value!r}")
    return value.rstrip("/")


HttpUrl = Annotated[str, BeforeValidator(_http_url)]


def local_path(value: Any, info: ValidationInfo) -> Path:
    path = Path(value).expanduser()
    base = (info.context or {}).get("base")
    return path if path.is_absolute() or base is None else Path(base) / path


class Settings(BaseModel):
    """Base of every section: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class StoreConfig(Settings):
    sqlite: Path = Path("peerwatch.sqlite")
    postgres: str | None = None  # a postgresql:// URL; chosen over sqlite when given
    postgres_password_file: Path | None = None

    @field_validator("sqlite", "postgres_password_file", mode="after")
    @classmethod
    def _path(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return None if value is None else local_path(value, info)

    @field_validator("postgres")
    @classmethod
    def _postgres_url(cls, value: str) -> str:
        if not value.startswith(("postgresql://", "postgres://")):
            raise ValueError(f"must be a postgresql:// URL, got {redact_url(value)!r}")
        return value

    @model_validator(mode="after")
    def _one_store(self) -> StoreConfig:
        if self.postgres is not None and "sqlite" in self.model_fields_set:
            raise ValueError("give sqlite or postgres, not both")
        if self.postgres_password_file is not None:
            if self.postgres is None:
                raise ValueError("postgres_password_file needs postgres")
            if urlsplit(self.postgres).password is not None or "password=" in urlsplit(self.postgres).query:
                raise ValueError("give the password in the postgres URL or in postgres_password_file, not both")
        return self

    def postgres_password(self) -> str | None:
        """The password from ``postgres_password_file`` (None: the URL's own, or libpq's PGPASSWORD / ~/.pgpass)."""
        if self.postgres_password_file is None:
            return None
        try:
            password = self.postgres_password_file.read_text().strip()
        except OSError as exc:
            raise ConfigError(
                f"store.postgres_password_file: cannot read {self.postgres_password_file}: {exc.strerror}"
            ) from None
        if not password:
            raise ConfigError(f"store.postgres_password_file: {self.postgres_password_file} is empty")
        return password


class AlertmanagerConfig(Settings):
    url: HttpUrl
    resend_interval: Duration = 60.0
    resolved_for: Duration = 900.0
    timeout: Duration = 10.0
    labels: dict[str, str] = Field(default_factory=dict)
    runbook_base: HttpUrl | None = None  # where docs/runbooks is published: runbook_url is <base>/<diagnosis>.md

    def runbook_url(self, diagnosis: str) -> str | None:
        """The runbook of ``diagnosis`` where docs/runbooks is published (None: not configured)."""
        return None if self.runbook_base is None else f"{self.runbook_base}/{diagnosis}.md"


class WebhookConfig(Settings):
    url: HttpUrl
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: Duration = 10.0


def _commands(value: Any) -> Any:
    # One command may be written as a bare argv list; several as a list of argv lists.
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return [value]
    if isinstance(value, str):
        raise ValueError(
            "a command is an argv list such as [scontrol, update, 'nodename={node}'], never a shell string"
        )
    return value


Commands = Annotated[list[Annotated[list[str], Field(min_length=1)]], BeforeValidator(_commands), Field(min_length=1)]


class TemplatesConfig(Settings):
    drain: Commands | None = None
    undrain: Commands | None = None
    swap_in: Commands | None = None

    @field_validator("drain", "undrain", "swap_in", mode="after")
    @classmethod
    def _placeholders(cls, value: list[list[str]] | None, info: ValidationInfo) -> list[list[str]] | None:
        if value is not None:
            assert info.field_name is not None
            check_template(value, info.field_name)
        return value


class RemediationConfig(Settings):
    mode: Literal["dry-run", "execute"] = "dry-run"
    preset: Literal["slurm", "kubernetes", "backendai"] | None = None
    templates: TemplatesConfig = Field(default_factory=TemplatesConfig)
    timeout: Duration = 60.0
    node_names: Literal["kubernetes", "slurm", "backendai", "hostname"] | None = None
    allow_shell: bool = False

    @model_validator(mode="after")
    def _something(self) -> RemediationConfig:
        if self.preset is None and self.templates.drain is None:
            raise ValueError("give a preset, templates.drain, or both")
        for name in ("drain", "undrain", "swap_in"):
            own = getattr(self.templates, name)
            if own is not None:
                try:
                    check_shell(own, self.allow_shell)
                except ValueError as exc:
                    raise ValueError(f"templates.{name}: {exc}") from None
        return self

    @property
    def name_rule(self) -> NameRule:
        """The node names commands accept: ``node_names``, else the preset's scheduler's, else host names."""
        return NAME_RULES[self.node_names or self.preset or "hostname"]

    def commands(self, template: str) -> tuple[Command, ...]:
        """The commands of ``drain``, ``undrain`` or ``swap_in``: the templates' own, else the preset's."""
        own = getattr(self.templates, template)
        if own is not None:
            return tuple(tuple(argv) for argv in own)
        return PRESETS[self.preset].get(template, ()) if self.preset else ()
