"""The page shell and small HTML builders. Every value from data goes through :func:`esc`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape

from peerwatch import __version__

NAV = (("cluster", "Cluster"), ("alarms", "Alarms"), ("catalog", "Catalogue"), ("spares", "Spares"))


def esc(value: object) -> str:
    return escape(str(value), quote=True)


PLOTS = ("uPlot.min.css", "uPlot.iife.min.js")  # the charting library, vendored (static/VENDORED.md)


def assets(prefix: str, names: Iterable[str]) -> str:
    """``<link>``/``<script>`` tags of static files served by the router."""
    return "".join(
        f'<link rel="stylesheet" href="{prefix}/static/{n}">'
        if n.endswith(".css")
        else f'<script defer src="{prefix}/static/{n}"></script>'
        for n in names
    )


def shell(
    prefix: str,
    title: str,
    body: str,
    *,
    active: str = "",
    status: str = "",
    refresh: str = "",
    every: float = 30.0,
    extra: Sequence[str] = (),
) -> str:
    """A complete page: navigation, the service's status, ``body``; CSS and JS served by the router.

    ``refresh``: ``page`` reloads the page when the service has evaluated a new step (checked every
    ``every`` seconds; without JavaScript a meta refresh does it), ``plots`` redraws only the plots'
    data (a page with a form keeps what is typed); ``extra``: static files the page needs first."""
    again = f'<noscript><meta http-equiv="refresh" content="{every:g}"></noscript>' if refresh == "page" else ""
    data = f' data-refresh="{esc(refresh)}" data-every="{every:g}"' if refresh else ""
    links = " ".join(
        f'<a href="{prefix}/{"" if key == "cluster" else key}"{" class=active" if key == active else ""}>{name}</a>'
        for key, name in NAV
    )
    return (
        "<!doctype html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{esc(title)} · peerwatch</title>'
        '<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">'
        f"{again}{assets(prefix, (*extra, 'dashboard.css', 'dashboard.js'))}</head>\n"
        f'<body{data}><header><a class="brand" href="{prefix}/">peerwatch</a> <nav>{links}</nav>'
        f'<span class="status">{status}</span></header>\n'
        f"<main><h1>{esc(title)}</h1>\n{body}\n</main>"
        f'<footer>peerwatch {esc(__version__)} · <a href="/docs">API</a> · <a href="/metrics">metrics</a></footer>'
        "</body></html>\n"
    )


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "", row_classes: Sequence[str] = ()) -> str:
    """A table whose cells are already HTML (escape data before passing it); ``row_classes``: per row."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    marks = [f' class="{esc(c)}"' if c else "" for c in row_classes]
    body = "\n".join(
        f"<tr{marks[i] if i < len(marks) else ''}>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>"
        for i, row in enumerate(rows)
    )
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>'


def link(href: str, text: object) -> str:
    return f'<a href="{esc(href)}">{esc(text)}</a>'


def badge(text: str, kind: str | None = None) -> str:
    return f'<span class="badge {esc(kind or text)}">{esc(text)}</span>'
