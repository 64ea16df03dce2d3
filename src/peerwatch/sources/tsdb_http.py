"""How peerwatch reaches a Prometheus-API server: headers, bearer token, basic auth, TLS and tenant.

The names follow Prometheus' ``http_config`` (``bearer_token_file``, ``basic_auth.password_file``,
``tls_config.ca_file``, ``insecure_skip_verify``) and VictoriaMetrics cluster's URL layout
(``/select/<accountID>[:<projectID>]/prometheus`` on vmselect). Secret files are read again
whenever they change, so a rotated token or password is used without a restart, as Prometheus
does; their contents never appear in a message.
"""

from __future__ import annotations

import base64
import os
import ssl
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx


class SecretError(Exception):
    """A secret file that cannot be read or is empty: names the setting and the file, never the secret."""


@dataclass(frozen=True)
class BasicAuth:
    username: str
    password: str | None = None
    password_file: Path | None = None


@dataclass(frozen=True)
class TlsOptions:
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    server_name: str | None = None
    insecure_skip_verify: bool = False


@dataclass(frozen=True)
class HttpOptions:
    """Everything beyond the URL that a request to the server needs."""

    headers: Mapping[str, str] = field(default_factory=dict)
    bearer_token: str | None = None
    bearer_token_file: Path | None = None
    basic_auth: BasicAuth | None = None
    tls: TlsOptions | None = None
    tenant: str | None = None


def tenant_url(url: str, tenant: str | None) -> str:
    """The Prometheus API root of ``tenant`` on a vmselect at ``url`` (``url`` itself without a tenant)."""
    url = url.rstrip("/")
    return url if tenant is None else f"{url}/select/{tenant}/prometheus"


class SecretFile:
    """A file holding one secret, read again when its size or modification time changes."""

    def __init__(self, path: Path, setting: str) -> None:
        self.path, self.setting = path, setting
        self._stamp: tuple[int, int] | None = None
        self._value = ""

    def read(self) -> str:
        try:
            st = os.stat(self.path)
            if (st.st_mtime_ns, st.st_size) != self._stamp:
                value = self.path.read_text().strip()
                if not value:
                    raise SecretError(f"{self.setting}: {self.path} is empty")
                self._stamp, self._value = (st.st_mtime_ns, st.st_size), value
        except OSError as exc:
            raise SecretError(f"{self.setting}: cannot read {self.path}: {exc.strerror}") from None
        return self._value


class CredentialsAuth(httpx.Auth):
    """Sets ``Authorization`` on every request: a bearer token or basic auth, from the options or their files."""

    def __init__(self, options: HttpOptions) -> None:
        self.token = options.bearer_token
        token_file = options.bearer_token_file
        self.token_file = SecretFile(token_file, "bearer_token_file") if token_file else None
        basic = options.basic_auth
        self.username = basic.username if basic else None
        self.password = basic.password if basic else None
        self.password_file = (
            SecretFile(basic.password_file, "basic_auth.password_file") if basic and basic.password_file else None
        )

    def header(self) -> str | None:
        if self.token_file is not None:
            return f"Bearer {self.token_file.read()}"
        if self.token is not None:
            return f"Bearer {self.token}"
        if self.username is not None:
            password = self.password_file.read() if self.password_file else (self.password or "")
            return "Basic " + base64.b64encode(f"{self.username}:{password}".encode()).decode("ascii")
        return None

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        value = self.header()
        if value is not None:
            request.headers["Authorization"] = value
        yield request


def ssl_context(tls: TlsOptions | None) -> ssl.SSLContext | bool:
    """What httpx's ``verify`` takes; raises ``ValueError`` naming the file that cannot be used."""
    if tls is None:
        return True
    try:
        ctx = ssl.create_default_context(cafile=str(tls.ca_file) if tls.ca_file else None)
    except OSError as exc:  # ssl.SSLError is one
        raise ValueError(f"tls_config.ca_file: cannot use {tls.ca_file}: {_why(exc)}") from None
    if tls.cert_file is not None:
        try:
            ctx.load_cert_chain(str(tls.cert_file), str(tls.key_file) if tls.key_file else None)
        except OSError as exc:  # ssl.SSLError is one
            raise ValueError(
                f"tls_config.cert_file/key_file: cannot use {tls.cert_file} and {tls.key_file}: {_why(exc)}"
            ) from None
    if tls.insecure_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _why(exc: OSError) -> str:
    return str(getattr(exc, "reason", None) or exc.strerror or exc)  # SSLError has a reason, OSError a strerror


def http_client(options: HttpOptions | None, timeout: float) -> httpx.Client:
    """An httpx client that sends the options' headers and credentials and checks TLS as they say."""
    options = options or HttpOptions()
    tls = options.tls
    hooks = {}
    if tls is not None and tls.server_name:
        server_name = tls.server_name

        def sni(request: httpx.Request) -> None:
            # httpcore sends this name in the TLS handshake and checks the certificate against it.
            request.extensions["sni_hostname"] = server_name

        hooks["request"] = [sni]
    return httpx.Client(
        timeout=timeout,
        headers=dict(options.headers),
        auth=CredentialsAuth(options),
        verify=ssl_context(tls),
        event_hooks=hooks,
    )
