from __future__ import annotations

import numpy as np
import pytest

from peerwatch.detect.grouped import fold_into


@pytest.mark.parametrize("seed", range(12))
def test_fold_into_is_ufunc_at_to_the_bit(seed: int) -> None:
    # Floats of mixed magnitude, where the order of addition shows in the last bits; one column
    # (where a reduction would sum pairwise), sorted and unsorted groups, one large group.
    rng = np.random.default_rng(seed)
    groups, rows, cols = int(rng.integers(1, 70)), int(rng.integers(1, 3000)), [1, 7, 120][seed % 3]
    index = rng.integers(0, groups, rows) if seed % 4 else np.sort(rng.integers(0, groups, rows))
    if seed == 11:
        index[:] = 0
    values = rng.normal(size=(rows, cols)) * 10.0 ** rng.integers(-3, 8, size=(rows, 1))
    flags = rng.random((rows, cols)) > 0.6
    for ufunc, data, out in (
        (np.add, values, np.zeros((groups, cols))),
        (np.add, flags, np.zeros((groups, cols))),
        (np.logical_or, flags, np.zeros((groups, cols), dtype=bool)),
        (np.maximum, flags, np.zeros((groups, cols), dtype=np.int8)),
    ):
        want, got = out.copy(), out.copy()
        ufunc.at(want, index, data)
        fold_into(ufunc, got, index, data)
        assert want.dtype == got.dtype and want.tobytes() == got.tobytes(), ufunc
