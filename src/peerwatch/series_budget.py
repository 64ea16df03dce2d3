"""The series budget: how many series ``analyze`` keeps per family and in all (issue 18).

Memory grows with the number of series; an exporter bug or a label holding a request id can
create 10^5 series in one family. Series beyond the budget are left out and reported per family,
never silently. Kept apart from the frames so the command line can show the defaults cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SeriesBudget:
    """How many series one family, one INPUT and one run may hold; series beyond are left out and
    reported (the first read are kept).

    Measured with ``analyze`` on a 1-h, 16-node recording (15,283 series: 158 MB peak): ordinary
    series cost about 4.5 KB per hour of data; one family of 100,000 series cost 5.5 GB (55 KB
    each). The defaults keep such a family under 3 GB an hour and let the 1,000-node scenario
    (955,000 series in one file) through whole; long recordings of very large clusters need lower ones."""

    per_family: int = 50_000
    per_input: int = 1_000_000
    total: int = 1_500_000

    def message(self, kept: int, left_out: int, which: str) -> str:
        """What a family or input over its budget (``which``: "per family", ...) kept and left out."""
        limit = {"per family": self.per_family, "per input": self.per_input}.get(which, self.total)
        return (
            f"{kept + left_out:,} series: the first {kept:,} read kept, {left_out:,} left out "
            f"(series budget {which} {limit:,})"
        )


UNLIMITED = SeriesBudget(per_family=2**62, per_input=2**62, total=2**62)
