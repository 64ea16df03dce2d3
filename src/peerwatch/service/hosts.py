"""The Host-header allow-list: the API answers only requests addressed to a name it is known by.

The read API needs no token, so a web page on another site could read it through DNS rebinding:
its own name re-resolved to this host's address, the browser sends that name in ``Host``. A
request whose ``Host`` is a name outside the list is answered 421 (Misdirected Request) before it
reaches the API. An IP address in ``Host`` is always accepted: no one can rebind an address, so a
page can only be same-origin with it by being served from it. ``api.allowed_hosts`` sets the list;
by default it is ``localhost``, this machine's host names, and the hosts of ``api.listen`` and
``api.url``. ``*`` accepts every name; ``*.example.com`` any name under example.com.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from peerwatch.service.config import ApiConfig

MISDIRECTED = 421


@dataclass(frozen=True, slots=True)
class AllowedHosts:
    """Names a request's ``Host`` may carry (lowercase, no port, no trailing dot)."""

    names: frozenset[str]
    suffixes: tuple[str, ...] = ()  # from "*.example.com": ".example.com"
    anything: bool = False

    @classmethod
    def of(cls, patterns: Iterable[str]) -> AllowedHosts:
        names, suffixes, anything = set(), [], False
        for p in (_name(p) for p in patterns):
            if p == "*":
                anything = True
            elif p.startswith("*."):
                suffixes.append(p[1:])
            elif p:
                names.add(p)
        return cls(frozenset(names), tuple(suffixes), anything)

    def permits(self, host_header: str) -> bool:
        """Whether a request with this ``Host`` header may be answered."""
        host = _name(_without_port(host_header))
        if self.anything or host in self.names or any(host.endswith(s) for s in self.suffixes):
            return True
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return False
        return True


def allowed_hosts(api: ApiConfig) -> AllowedHosts:
    """``api.allowed_hosts``, or the default: localhost, this machine's names, ``listen``'s and ``url``'s hosts."""
    if api.allowed_hosts is not None:
        return AllowedHosts.of(api.allowed_hosts)
    names = ["localhost", api.host, socket.gethostname(), socket.getfqdn()]
    if api.url is not None:
        names.append(urlsplit(api.url).hostname or "")
    return AllowedHosts.of(names)


class HostGuard:
    """ASGI middleware: 421 with a JSON error for a ``Host`` outside ``allowed``; a request without
    ``Host`` (no browser sends one) passes."""

    def __init__(self, app: ASGIApp, allowed: AllowedHosts) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), None)
            if host is not None and not self.allowed.permits(host):
                message = f"this peerwatch does not answer for host {host!r} (setting api.allowed_hosts)"
                response = JSONResponse({"error": message, "status": MISDIRECTED}, status_code=MISDIRECTED)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _without_port(host: str) -> str:
    host = host.strip()
    if host.startswith("["):  # [::1]:8080
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _name(host: str) -> str:
    return host.strip().lower().rstrip(".")
