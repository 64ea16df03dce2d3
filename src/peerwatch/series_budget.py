"""The series budget: how many series ``analyze`` keeps per family and in all (issue 18).

Memory grows with the number of series; an exporter bug or a label holding a request id can
create 10^5 series in one family. Series beyond the budget are left out and reported per family,
never silently. Kept apart from the frames so the command line can show the defaults cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SeriesBudget:
    """How many series one family and one run may hold; series beyond are left out and reported.

    Measured with ``analyze`` on a 1-h, 16-node recording (15,283 series: 158 MB peak): ordinary
    series cost about 4.5 KB per hour of data; one family of 100,000 series cost 5.5 GB (55 KB
    each). The defaults keep such a family under 3 GB an hour and let the 1,000-node scenario
    (955,000 series) through whole; long recordings of very large clusters need a lower total."""

    per_family: int = 50_000
    total: int = 1_500_000

    def message(self, kept: int, left_out: int, total: int) -> str:
        which = f"per family {self.per_family:,}" if kept >= self.per_family else f"of the run {self.total:,}"
        return (
            f"{kept + left_out:,} series: the first {kept:,} read kept, {left_out:,} left out "
            f"(series budget {which}; {total:,} series kept in all)"
        )


UNLIMITED = SeriesBudget(per_family=2**62, total=2**62)
