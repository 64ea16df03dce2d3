"""Acting on what peerwatch knows: fault history, lemon risk, fleet report, burn-in port decisions.

- :mod:`peerwatch.act.history`: fault events and their loaders (InfiniteHBD trace, JSONL/CSV history).
- :mod:`peerwatch.act.risk`: the lemon risk model (``peerwatch_node_risk``) and how it is fitted.
- :mod:`peerwatch.act.fleet`: time-ordered ranking evaluation and the fleet report.
- :mod:`peerwatch.act.burnin`: InfiniBand burn-in results and which ports to disable.
"""
