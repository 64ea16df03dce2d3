"""The metric catalogue: what each family means, how to compare it, and whether it is worth reading.

- :class:`Catalog` — known families (``families.csv``) and rules for the rest (``rules.toml``).
- :class:`Roles` — the families detectors read, by meaning (``roles.toml``).
- :func:`observed_kind` / :func:`looks_like_state` — behaviour seen in the values (types lie).
- :class:`ActivityFilter` / :func:`summarize` — which families carry signal over a window.
"""

from peerwatch.catalog.activity import Activity, ActivityFilter, ActivitySummary, Reason, Tally, judge, summarize
from peerwatch.catalog.classify import Kind, Rule, RuleError, RuleSet, looks_like_state, observed_kind
from peerwatch.catalog.load import COLUMNS, Catalog, CatalogError, parse_families
from peerwatch.catalog.roles import RoleError, Roles
from peerwatch.catalog.schema import Category, Direction, Family, Unit

__all__ = [
    "COLUMNS",
    "Activity",
    "ActivityFilter",
    "ActivitySummary",
    "Catalog",
    "CatalogError",
    "Category",
    "Direction",
    "Family",
    "Kind",
    "Reason",
    "RoleError",
    "Roles",
    "Rule",
    "RuleError",
    "RuleSet",
    "Tally",
    "Unit",
    "judge",
    "looks_like_state",
    "observed_kind",
    "parse_families",
    "summarize",
]
