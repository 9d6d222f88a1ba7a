"""``--decide``'s evaluation order: a seeded permutation that depends on nothing but the seed and the row indices."""

import numpy as np

from beameval.compare.wave_order import evaluation_order, wave_ends


def test_the_order_is_a_permutation_fixed_by_the_seed() -> None:
    rows = np.arange(1000)
    order = evaluation_order(rows, 0)
    assert sorted(order.tolist()) == list(range(1000))
    assert np.array_equal(order, evaluation_order(rows, 0))
    assert not np.array_equal(order, evaluation_order(rows, 1))
    assert not np.array_equal(order, rows)  # shuffled, not the file order


def test_the_order_does_not_depend_on_how_the_rows_are_listed() -> None:
    rows = np.arange(500)
    order = dict(zip(rows.tolist(), evaluation_order(rows, 3).tolist(), strict=True))
    shuffled = np.random.default_rng(9).permutation(rows)
    again = dict(zip(shuffled.tolist(), evaluation_order(shuffled, 3).tolist(), strict=True))
    assert order == again


def test_the_first_rows_are_spread_over_the_dataset() -> None:
    rows = np.arange(10_000)
    first = rows[evaluation_order(rows, 0) < 1000]
    counts = np.histogram(first, bins=10, range=(0, 10_000))[0]
    assert counts.min() > 60 and counts.max() < 140  # about 100 per tenth of the file


def test_wave_ends() -> None:
    assert wave_ends(450, 200) == [200, 400, 450]
    assert wave_ends(400, 200) == [200, 400]
    assert wave_ends(50, 200) == [50]
