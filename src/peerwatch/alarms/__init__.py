"""A live alarm's life after the policy decided it: the store and its backends, reconciliation with
each evaluation, monitoring blindness, silences, remediation and the spare pool, the node views, and
the sinks that deliver alarms (Alertmanager, webhook). See docs/service.md."""
