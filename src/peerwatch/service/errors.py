"""The API's refusals of a state change: no token configured, or the wrong one (alarms/errors.py has the
rest of the family)."""

from __future__ import annotations

from peerwatch.alarms.errors import ServiceError


class Unauthorized(ServiceError):
    """No token, or the wrong one, on a request that changes state."""

    status = 401


class Forbidden(ServiceError):
    """State changes are refused because no token is configured."""

    status = 403
