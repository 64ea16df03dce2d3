"""``peerwatch serve`` configuration: a typed table (pydantic), unknown keys rejected.

Durations are seconds or Prometheus-style strings (``30s``, ``5m``, ``2h``, ``1h30m``). Relative
paths are taken from the configuration file's folder. Every error names the file and the key
path (``peerwatch.yaml: source.tsdb.url: ...``). docs/service.md documents every setting; a test
fails when one is missing there.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from peerwatch.alarms.config import (
    AlertmanagerConfig,
    Duration,
    HttpUrl,
    RemediationConfig,
    Settings,
    StoreConfig,
    WebhookConfig,
    local_path,
)
from peerwatch.alarms.errors import ConfigError
from peerwatch.alarms.names import InvalidValue
from peerwatch.redact import redact_url
from peerwatch.settings import DetectionSettings
from peerwatch.sources.tsdb_http import BasicAuth, HttpOptions, TlsOptions, tenant_url


class TargetConfig(Settings):
    url: HttpUrl
    job: str = ""
    labels: dict[str, str] = Field(default_factory=dict)


def _target(value: Any) -> Any:
    return {"url": value} if isinstance(value, str) else value


class ScrapeConfig(Settings):
    targets: list[Annotated[TargetConfig, BeforeValidator(_target)]] = Field(default_factory=list)
    file_sd: list[Path] = Field(default_factory=list)
    timeout: Duration = 10.0
    down_share: float = Field(default=0.5, gt=0.0, le=1.0)

    @field_validator("file_sd", mode="after")
    @classmethod
    def _paths(cls, value: list[Path], info: ValidationInfo) -> list[Path]:
        return [local_path(p, info) for p in value]

    @model_validator(mode="after")
    def _some_target(self) -> ScrapeConfig:
        if not self.targets and not self.file_sd:
            raise ValueError("give targets, file_sd, or both")
        return self


class BasicAuthConfig(Settings):
    username: str = Field(min_length=1)
    password: str | None = None
    password_file: Path | None = None

    @field_validator("password_file", mode="after")
    @classmethod
    def _path(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return None if value is None else local_path(value, info)

    @model_validator(mode="after")
    def _one_password(self) -> BasicAuthConfig:
        if (self.password is None) == (self.password_file is None):
            raise ValueError("give password or password_file (exactly one)")
        return self


class TlsConfig(Settings):
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    server_name: str | None = None
    insecure_skip_verify: bool = False

    @field_validator("ca_file", "cert_file", "key_file", mode="after")
    @classmethod
    def _path(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return None if value is None else local_path(value, info)

    @model_validator(mode="after")
    def _pair(self) -> TlsConfig:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (a client certificate and its key)")
        return self


_TENANT = re.compile(r"\d+(:\d+)?")


class TsdbAccessConfig(Settings):
    """How to reach a Prometheus-API server: the keys of Prometheus' ``http_config``, and a tenant.

    Also the whole of the file that ``analyze --http-config-file`` and ``catalog`` read.
    """

    headers: dict[str, str] = Field(default_factory=dict)
    bearer_token: str | None = None
    bearer_token_file: Path | None = None
    basic_auth: BasicAuthConfig | None = None
    tls_config: TlsConfig | None = None
    tenant: str | None = None

    @field_validator("bearer_token_file", mode="after")
    @classmethod
    def _token_path(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return None if value is None else local_path(value, info)

    @field_validator("tenant", mode="before")
    @classmethod
    def _tenant(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # tenant: 0 in YAML is a number
        if not isinstance(value, str) or not _TENANT.fullmatch(value):
            raise ValueError(f"tenant is accountID or accountID:projectID (numbers), got {value!r}")
        return value

    @model_validator(mode="after")
    def _one_credential(self) -> TsdbAccessConfig:
        given = [k for k in ("bearer_token", "bearer_token_file", "basic_auth") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give one of bearer_token, bearer_token_file or basic_auth, not {' and '.join(given)}")
        if given and any(h.lower() == "authorization" for h in self.headers):
            raise ValueError(f"an Authorization header and {given[0]} both set the same header: give one")
        if self.bearer_token is not None and not self.bearer_token.strip():
            raise ValueError("bearer_token is empty")
        return self

    def http_options(self) -> HttpOptions:
        basic, tls = self.basic_auth, self.tls_config
        return HttpOptions(
            headers=dict(self.headers),
            bearer_token=self.bearer_token,
            bearer_token_file=self.bearer_token_file,
            basic_auth=BasicAuth(basic.username, basic.password, basic.password_file) if basic else None,
            tls=TlsOptions(tls.ca_file, tls.cert_file, tls.key_file, tls.server_name, tls.insecure_skip_verify)
            if tls
            else None,
            tenant=self.tenant,
        )


class TsdbConfig(TsdbAccessConfig):
    url: HttpUrl
    kind: Literal["prometheus", "victoriametrics"] | None = None
    format: Literal["json", "csv"] = "json"
    matchers: list[str] = Field(default_factory=lambda: ['{__name__=~".+"}'], min_length=1)
    timeout: Duration = 30.0
    delay: Duration = 30.0

    @model_validator(mode="after")
    def _url_and_access(self) -> TsdbConfig:
        parts = urlsplit(self.url)
        if self.tenant is not None and "/select/" in parts.path:
            raise ValueError("the URL already names a tenant (/select/...): drop tenant, or give vmselect's root URL")
        if parts.password is not None and self.basic_auth is not None:
            raise ValueError("give the password in the URL or in basic_auth, not both")
        return self

    @property
    def shown_url(self) -> str:
        """The URL read, tenant path included, password masked: for logs and pages."""
        return redact_url(tenant_url(self.url, self.tenant))


def load_http_config(path: Path) -> HttpOptions:
    """``--http-config-file``: the access keys of ``source.tsdb`` (headers, credentials, TLS, tenant) in YAML."""
    data = _read_yaml(path)
    try:
        access = TsdbAccessConfig.model_validate(data or {}, context={"base": path.resolve().parent})
    except ValidationError as exc:
        raise ConfigError("\n".join(f"{path}: {_path(e['loc'])}: {_message(e)}" for e in exc.errors())) from None
    return access.http_options()


class SourceConfig(Settings):
    tsdb: TsdbConfig | None = None
    scrape: ScrapeConfig | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> SourceConfig:
        if (self.tsdb is None) == (self.scrape is None):
            raise ValueError("give exactly one of tsdb or scrape")
        return self

    def describe(self) -> str:
        if self.tsdb is not None:
            return self.tsdb.shown_url
        assert self.scrape is not None
        return f"{len(self.scrape.targets)} targets, {len(self.scrape.file_sd)} file_sd files"


class WritebackConfig(Settings):
    url: HttpUrl
    timeout: Duration = 10.0


class ApiConfig(Settings):
    listen: str = "127.0.0.1:8080"
    token: str | None = None
    token_file: Path | None = None
    url: HttpUrl | None = None
    allowed_hosts: list[str] | None = None  # Host-header names answered (service/hosts.py); None: the default

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
            raise ValueError(f"listen is host:port, got {value!r}")
        return value

    @field_validator("token_file", mode="after")
    @classmethod
    def _token_path(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return None if value is None else local_path(value, info)

    @model_validator(mode="after")
    def _one_token(self) -> ApiConfig:
        if self.token is not None and self.token_file is not None:
            raise ValueError("give token or token_file, not both")
        if self.token is not None and not self.token.strip():
            raise ValueError("token is empty")
        return self

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])

    def token_value(self) -> str | None:
        """The token that state changes need (None: state changes are refused)."""
        if self.token_file is None:
            return self.token
        try:
            token = self.token_file.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"api.token_file: cannot read {self.token_file}: {exc.strerror}") from None
        if not token:
            raise ConfigError(f"api.token_file: {self.token_file} is empty")
        return token


class ClockConfig(Settings):
    start: float = Field(gt=946_684_800.0)
    speed: float = Field(default=1.0, gt=0.0)
    origin: float | None = None


def _strict_parts(cls: type[Any]) -> None:
    """The detection settings are the detectors' own frozen dataclasses: validated as sections like
    the rest (unknown keys rejected) without the detectors depending on pydantic."""
    cls.__pydantic_config__ = ConfigDict(extra="forbid", frozen=True)
    for kind in typing.get_type_hints(cls).values():
        if dataclasses.is_dataclass(kind) and isinstance(kind, type):
            _strict_parts(kind)


_strict_parts(DetectionSettings)


class ServiceConfig(Settings):
    source: SourceConfig
    step: Duration = 30.0
    window: Duration = 7200.0
    stale_steps: int = Field(default=3, ge=1)
    store: StoreConfig = Field(default_factory=StoreConfig)
    alertmanager: AlertmanagerConfig | None = None
    writeback: WritebackConfig | None = None
    webhook: WebhookConfig | None = None
    api: ApiConfig = Field(default_factory=ApiConfig)
    node_labels: list[str] = Field(default_factory=lambda: ["node", "hostname", "Hostname"], min_length=1)
    spares: list[str] = Field(default_factory=list)
    remediation: RemediationConfig | None = None
    clock: ClockConfig | None = None
    detection: DetectionSettings = Field(default_factory=DetectionSettings)  # docs/settings.md

    @model_validator(mode="after")
    def _spare_names(self) -> ServiceConfig:
        # Spares are put into swap_in commands: refused here rather than at the first swap.
        if self.remediation is not None:
            for spare in self.spares:
                try:
                    self.remediation.name_rule.check("spare", spare)
                except InvalidValue as exc:
                    raise ValueError(f"spares: {exc}") from None
        return self

    @model_validator(mode="after")
    def _window(self) -> ServiceConfig:
        if self.window < 10 * self.step:
            raise ValueError(f"window ({self.window:g}s) must hold at least 10 steps of {self.step:g}s")
        delay = self.source.tsdb.delay if self.source.tsdb is not None else 0.0
        if self.stale_steps * self.step <= delay + self.step:
            raise ValueError(
                f"stale_steps ({self.stale_steps}) x step ({self.step:g}s) must exceed source.tsdb.delay "
                f"({delay:g}s) plus one step, or every read would look stale"
            )
        return self


def config_from_dict(data: Any, where: str = "configuration", base: Path | None = None) -> ServiceConfig:
    """Validate a parsed configuration; errors name ``where`` and each bad key path."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of settings, got {type(data).__name__}")
    try:
        return ServiceConfig.model_validate(data, context={"base": base})
    except ValidationError as exc:
        raise ConfigError("\n".join(f"{where}: {_path(e['loc'])}: {_message(e)}" for e in exc.errors())) from None


def load_config(path: Path) -> ServiceConfig:
    """Read and validate a YAML configuration file."""
    data = _read_yaml(path)
    return config_from_dict(data if data is not None else {}, str(path), path.resolve().parent)


class AnalyzeConfig(BaseModel):
    """``analyze --config``: the ``detection:`` section; peerwatch.yaml's other sections are allowed
    (one file serves both commands) and not read."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    detection: DetectionSettings = Field(default_factory=DetectionSettings)


_SERVICE_ONLY = frozenset(ServiceConfig.model_fields) - {"detection"}


def load_detection(path: Path) -> DetectionSettings:
    """The detection settings of a YAML file's ``detection:`` section (defaults for what it omits)."""
    data = _read_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings, got {type(data).__name__}")
    try:
        own = AnalyzeConfig.model_validate({k: v for k, v in data.items() if k not in _SERVICE_ONLY})
    except ValidationError as exc:
        raise ConfigError("\n".join(f"{path}: {_path(e['loc'])}: {_message(e)}" for e in exc.errors())) from None
    return own.detection


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{at}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None


def _path(loc: tuple[int | str, ...]) -> str:
    # pydantic puts the chosen union member's name in loc (e.g. "function-before[...]"); keep keys only.
    out = ""
    for p in loc:
        if isinstance(p, int):
            out += f"[{p}]"
        elif "[" not in p and p not in ("str", "float", "int"):
            out += f".{p}" if out else p
    return out or "(top level)"


def _message(error: Any) -> str:
    if error["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
        return "unknown setting"
    if error["type"] == "missing":
        return "required setting missing"
    return str(error["msg"]).removeprefix("Value error, ")
