"""Secrets kept out of what peerwatch prints and logs: URLs are shown with their passwords masked."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

# Query parameters that carry a secret: libpq's password, VictoriaMetrics' authKey, common token names.
_SECRET_PARAM = re.compile(r"(^|&)(password|authKey|token|access_token)=[^&]*", re.I)


def redact_url(url: str) -> str:
    """``url`` with any password (in the authority or a secret query parameter) replaced by ``***``."""
    if "://" not in url:  # not a URL at all, maybe a libpq keyword string
        return re.sub(r"password\s*=\s*\S*", "password=***", url)
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}:***@{host}"
    query = _SECRET_PARAM.sub(r"\1\2=***", parts.query)
    # Assembled by hand: urlunsplit would turn postgresql:///db (a local socket) into postgresql:/db.
    return (
        f"{parts.scheme}://{netloc}{parts.path}"
        + (f"?{query}" if query else "")
        + (f"#{parts.fragment}" if parts.fragment else "")
    )
