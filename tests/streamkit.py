"""Checking the streaming contract (detect/stream.py): a run scanned in chunks gives the findings of one scan."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from peerwatch.detect.context import Context
from peerwatch.detect.stream import columns
from peerwatch.model import Finding


def _key(f: Finding) -> tuple[Any, ...]:
    return (f.ts, f.node, f.component, f.detector, f.signal, f.hint, f.evidence.metric, f.evidence.labels)


def scan_in_chunks(scanner: Any, ctx: Context, cuts: Sequence[int]) -> list[Finding]:
    """Findings of ``scanner`` over ``ctx`` cut before each step of ``cuts``, state carried along."""
    bounds = [0, *cuts, ctx.steps]
    out: list[Finding] = []
    state = None
    for a, b in itertools.pairwise(bounds):
        found, state = scanner.scan(columns(ctx, a, b), state)
        inside = all(ctx.start + a * ctx.step <= f.ts < ctx.start + b * ctx.step for f in found)
        assert inside, "a finding outside its chunk"
        out.extend(found)
    return out


def assert_chunk_invariant(scanner: Any, ctx: Context, cuts: Sequence[int], *, rel: float = 1e-6) -> int:
    """Chunked findings equal whole-run findings (scores and evidence values to ``rel``); returns how many."""
    whole, _ = scanner.scan(ctx, None)
    chunked = scan_in_chunks(scanner, ctx, cuts)
    a = sorted(whole, key=_key)
    b = sorted(chunked, key=_key)
    missing = {_key(f) for f in a} ^ {_key(f) for f in b}
    assert not missing, f"findings differ between one scan and chunks {list(cuts)}: {sorted(missing)[:5]}"
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x.score, y.score, rtol=rel, err_msg=str(_key(x)))
        for u, v in ((x.evidence.value, y.evidence.value), (x.evidence.peer_median, y.evidence.peer_median)):
            if u is not None and v is not None:
                np.testing.assert_allclose(u, v, rtol=rel, atol=1e-9, err_msg=str(_key(x)))
    return len(a)


def findings_after_rows_join(
    scanner: Any, partial: Context, whole: Context, cut: int
) -> tuple[list[Finding], list[Finding]]:
    """Scan ``partial`` (the run without rows that join at ``cut``) up to ``cut``, then ``whole`` one step
    at a time: the findings from ``cut`` on, and a single scan's of ``whole`` from then (both sorted)."""
    found, state = scanner.scan(columns(partial, 0, cut), None)
    assert found == scanner.scan(columns(partial, 0, cut), None)[0]
    later: list[Finding] = []
    for a in range(cut, whole.steps):
        found, state = scanner.scan(columns(whole, a, a + 1), state)
        later += found
    want = [f for f in scanner.scan(whole, None)[0] if f.ts >= whole.start + cut * whole.step]
    return sorted(later, key=repr), sorted(want, key=repr)
