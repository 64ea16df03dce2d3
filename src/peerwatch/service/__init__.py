"""The live service: the engine against a live source, alarms kept in a store, an HTTP API, sinks.

``Service(load_config(path))`` runs it (``start``/``stop``, or one step with ``collect`` and
``evaluate``); ``create_app(service)`` is its FastAPI app. See docs/service.md.
"""

from peerwatch.service.config import ServiceConfig, config_from_dict, load_config
from peerwatch.service.runner import Service

__all__ = ["Service", "ServiceConfig", "config_from_dict", "load_config"]
