"""The block-table matrix carried between steps: always equal to a fresh build from the
KV manager's lists, whatever changed (rows grown, a request freed and allocated again
with a table of the same length, the batch reordered, grown or shrunk)."""
from __future__ import annotations

import random

import numpy as np

from kubellm.runtime.worker.block_table_array import BlockTableArray


def fresh(tables: list[list[int]]) -> np.ndarray:
    width = max(map(len, tables))
    return np.array([t + [0] * (width - len(t)) for t in tables], np.int32)


def check(builder: BlockTableArray, tables: list[list[int]]) -> None:
    got = builder.build(tables)
    assert got.dtype == np.int32 and np.array_equal(got, fresh(tables))


def test_decode_steps_rewrite_only_the_rows_that_grew():
    tables = [[i * 100 + j for j in range(4)] for i in range(8)]
    builder = BlockTableArray()
    check(builder, tables)
    tables[3].append(999)
    check(builder, tables)
    assert builder.rebuilds == 1 and builder.rows_written == 1
    check(builder, tables)     # nothing changed: nothing written
    assert builder.rebuilds == 1 and builder.rows_written == 1


def test_the_same_list_said_unchanged_returns_the_matrix_as_it_is():
    """``unchanged`` with the very list of the last call skips the pass over the rows
    (what it returns for a list changed meanwhile shows that no pass was made); with
    another list, or ``rows``, the rows are checked as always."""
    tables = [[i * 100 + j for j in range(4)] for i in range(8)]
    builder = BlockTableArray()
    check(builder, tables)
    tables[3].append(999)     # a caller breaking the promise: the old matrix comes back
    assert np.array_equal(builder.build(tables, unchanged=True), fresh(tables)[:, :4])
    copy = [list(t) for t in tables]
    assert np.array_equal(builder.build(copy, unchanged=True), fresh(tables))
    assert np.array_equal(builder.build(copy, np.arange(8), unchanged=True), fresh(tables))


def test_a_request_allocated_again_is_seen_even_at_the_same_length():
    tables = [[1, 2, 3], [4, 5, 6]]
    builder = BlockTableArray()
    check(builder, tables)
    tables[1] = [7, 8, 9]      # freed and allocated again: a new list, same length
    check(builder, tables)
    assert builder.rebuilds == 2


def test_random_steps_always_equal_a_fresh_build():
    rng = random.Random(0)
    tables = [[rng.randrange(1000) for _ in range(rng.randint(1, 6))] for _ in range(16)]
    builder = BlockTableArray()
    for _ in range(300):
        action = rng.random()
        if action < 0.6:       # decode: some tables grow
            for t in rng.sample(tables, min(len(tables), rng.randint(0, 3))):
                t.append(rng.randrange(1000))
        elif action < 0.7:     # a finished request leaves, a new one joins
            tables.pop(rng.randrange(len(tables)))
            tables.insert(rng.randrange(len(tables) + 1),
                          [rng.randrange(1000) for _ in range(rng.randint(1, 9))])
        elif action < 0.8:     # preempted and back with a new table
            i = rng.randrange(len(tables))
            tables[i] = [rng.randrange(1000) for _ in range(len(tables[i]))]
        elif action < 0.9:     # the step's order changes
            rng.shuffle(tables)
        elif len(tables) > 1:  # a smaller step (some requests not scheduled)
            tables = tables[:rng.randint(1, len(tables))]
        check(builder, tables)
    assert builder.rebuilds < 200   # the carried matrix was used


def test_rows_carried_over_when_requests_left_or_grew():
    rng = random.Random(1)
    tables = [[rng.randrange(1000) for _ in range(rng.randint(1, 6))] for _ in range(16)]
    builder = BlockTableArray()
    check(builder, tables)
    for _ in range(100):
        keep = sorted(rng.sample(range(len(tables)), rng.randint(1, len(tables))))
        tables = [tables[i] for i in keep]
        for t in rng.sample(tables, rng.randint(0, len(tables))):
            t.append(rng.randrange(1000))          # a block boundary crossed
        got = builder.build(tables, np.array(keep))
        assert np.array_equal(got, fresh(tables))
        if len(tables) < 4:
            tables += [[rng.randrange(1000)] for _ in range(8)]
            check(builder, tables)
