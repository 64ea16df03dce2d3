"""A node's name in a URL path: escaped whole when written, read back from the raw path.

Node names come from labels and may hold ``/``, ``%``, ``?`` or ``#``. Links escape every
reserved character (``a/b`` is ``a%2Fb``). The server decodes the path before routing, so ``a%2Fb``
arrives as ``a/b`` and no ``{node}`` segment matches it; routes that take a node therefore match
the rest of the path (``{node:node}``, which unlike ``{node:path}`` also matches a newline) and
read the node from the raw path instead, where its own ``/`` is still ``%2F``.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request

from peerwatch.alarms.errors import NotFound


class NodeConvertor(Convertor[str]):
    """Any text, newlines included (a node name is a label value: anything)."""

    regex = r"[\s\S]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("node", NodeConvertor())


def node_url(prefix: str, node: str, tail: str = "") -> str:
    """``{prefix}/{node}{tail}`` with every reserved character of ``node`` escaped."""
    return f"{prefix}/{quote(node, safe='')}{tail}"


def raw_path(request: Request) -> str:
    """The request's path as sent, escapes kept."""
    raw = request.scope.get("raw_path")
    return raw.decode("latin-1") if isinstance(raw, bytes) else quote(request.url.path)


def node_in_path(request: Request, before: str, after: str = "") -> str:
    """The node between ``before`` (e.g. ``/api/v1/nodes/``) and ``after`` (e.g. ``/peers``) in the raw
    request path, unescaped (an unescaped ``/`` is taken as part of the name too)."""
    _, found, rest = raw_path(request).partition(before)
    if after and rest.endswith(after):
        rest = rest.removesuffix(after)
    if not found or not rest:
        raise NotFound(f"no such path {request.url.path!r}")
    return unquote(rest)
