"""The page shell and small HTML builders. Every value from data goes through :func:`esc`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape

from peerwatch import __version__

NAV = (("cluster", "Cluster"), ("alarms", "Alarms"), ("catalog", "Catalogue"), ("spares", "Spares"))


def esc(value: object) -> str:
    return escape(str(value), quote=True)


def shell(prefix: str, title: str, body: str, *, active: str = "", status: str = "") -> str:
    """A complete page: navigation, the service's status, ``body``; CSS and JS served by the router."""
    links = " ".join(
        f'<a href="{prefix}/{"" if key == "cluster" else key}"{" class=active" if key == active else ""}>{name}</a>'
        for key, name in NAV
    )
    return (
        "<!doctype html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{esc(title)} · peerwatch</title>'
        '<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">'
        f'<link rel="stylesheet" href="{prefix}/static/dashboard.css">'
        f'<script defer src="{prefix}/static/dashboard.js"></script></head>\n'
        f'<body><header><a class="brand" href="{prefix}/">peerwatch</a> <nav>{links}</nav>'
        f'<span class="status">{status}</span></header>\n'
        f"<main><h1>{esc(title)}</h1>\n{body}\n</main>"
        f'<footer>peerwatch {esc(__version__)} · <a href="/docs">API</a> · <a href="/metrics">metrics</a></footer>'
        "</body></html>\n"
    )


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    """A table whose cells are already HTML (escape data before passing it)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "\n".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>'


def link(href: str, text: object) -> str:
    return f'<a href="{esc(href)}">{esc(text)}</a>'


def badge(text: str, kind: str | None = None) -> str:
    return f'<span class="badge {esc(kind or text)}">{esc(text)}</span>'
