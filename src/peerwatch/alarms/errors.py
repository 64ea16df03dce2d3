"""Errors of the live service, each carrying the HTTP status it maps to (one handler, service/app.py,
renders them all); the API's own refusals are in service/errors.py."""

from __future__ import annotations


class ServiceError(Exception):
    """Base class: ``status`` is the HTTP status the API answers with; the message is shown as is."""

    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(ServiceError):
    """A configuration that cannot be used; the message names the file and the key path."""

    status = 400


class StoreError(ServiceError):
    """The store cannot be used (corrupt, truncated, read-only, full, unreachable, another schema); the
    message is one line naming the store and the cause."""

    status = 503


class BadRequest(ServiceError):
    status = 400


class NotFound(ServiceError):
    status = 404


class Conflict(ServiceError):
    """The change does not apply to the alarm's current state (e.g. resolving a resolved alarm)."""

    status = 409
