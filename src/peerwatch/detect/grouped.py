"""Rows of a (rows × steps) array folded into the rows of their group: ``ufunc.at`` made fast.

``np.add.at(out, index, rows)`` walks the rows one element at a time. Here whole rows are
folded at once: booleans and integers with one ``reduceat`` over the rows sorted by group (exact
in any order); floats in passes, the j-th row of every group in pass j, so that each group's rows
are added in their order and sums are ``ufunc.at``'s to the bit (``reduceat`` may sum pairwise).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
PASSES_PER_ROW = 0.25  # more passes than this share of the rows (few, large groups): ufunc.at is as quick


def fold_into(ufunc: np.ufunc, out: npt.NDArray[np.generic], index: IntArray, rows: npt.NDArray[np.generic]) -> None:
    """``ufunc.at(out, index, rows)``: ``out[index[r]] = ufunc(out[index[r]], rows[r])`` for every row."""
    if not index.size:
        return
    order = np.argsort(index, kind="stable")  # stable: each group's rows in their order
    idx = index[order]
    starts = np.flatnonzero(np.r_[True, idx[1:] != idx[:-1]])
    if rows.dtype.kind != "f":
        groups = idx[starts]
        out[groups] = ufunc(out[groups], ufunc.reduceat(rows[order], starts, axis=0))
        return
    sizes = np.diff(np.r_[starts, idx.size])
    if sizes.max() > PASSES_PER_ROW * idx.size:
        ufunc.at(out, index, rows)
        return
    rank = np.arange(idx.size) - np.repeat(starts, sizes)  # each row's place in its group
    by_rank = np.argsort(rank, kind="stable")
    bounds = np.r_[0, np.cumsum(np.bincount(rank))]
    row_of, group_of = order[by_rank], idx[by_rank]
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        g = group_of[a:b]  # distinct groups: a plain fancy-index write is safe
        out[g] = ufunc(out[g], rows[row_of[a:b]])
