"""The step's block tables as one int32 matrix, carried over from the step before.

Building the matrix from the KV manager's lists costs a pass over every block id of
every row (8k ids at batch 256, context 512: most of the input preparation's time on
the host). Between decode steps almost nothing changes: the same requests in the same
order, each table growing by one block every block_size tokens. So the last matrix is
kept and only the rows whose list grew are written again.

A row is unchanged when it is the very same list object with the same length: the KV
manager only appends to a request's list, and a freed request's list is dropped (a new
one is made when it is allocated again). The lists of the last step are held here, so
no other list can take their identity.
"""
from __future__ import annotations

import itertools
import operator

import numpy as np

# above this share of changed rows a fresh build is as cheap as the row writes
REBUILD_FRACTION = 0.25
_LAST = operator.itemgetter(-1)
SPARE_COLUMNS = 8        # blocks a table may grow by before the matrix is built again


class BlockTableArray:
    def __init__(self):
        self._source: list | None = None   # the list of tables the matrix was built from
        self._width = 0
        self._lists: list[list[int]] = []
        self._lengths = np.zeros(0, np.int64)
        self._array = np.zeros((0, 0), np.int32)
        self.rebuilds = 0           # full builds, for the tests
        self.rows_written = 0       # rows written again since the last full build

    def build(self, block_tables: list[list[int]], rows: np.ndarray | None = None,
              unchanged: bool = False) -> np.ndarray:
        """[len(block_tables), width] int32 (width: the longest table), row i holding
        block_tables[i], zeros after. A view of this object's matrix: valid until the
        next call. ``rows``: the last call's row that each table continues, when the
        caller knows (requests left or moved since): those rows are carried over.

        ``unchanged``: the caller knows these are the last call's tables, row for row, none
        grown (the scheduler's SchedulerOutput.same_tables). With the very list of the
        last call (the engine hands it on then) the matrix is returned as it is, without
        a pass over the rows."""
        if unchanged and rows is None and block_tables is self._source:
            return self._array[:, :self._width]
        self._source = block_tables
        n = len(block_tables)
        if rows is not None and len(self._lists):
            self._lists = list(map(self._lists.__getitem__, rows.tolist()))
            self._lengths = self._lengths[rows]
            self._array = self._array[rows]
        lengths = np.fromiter(map(len, block_tables), np.int64, n)
        width = self._width = int(lengths.max()) if n else 0
        array = self._array
        if len(self._lists) == n and width <= array.shape[1] and \
                all(map(operator.is_, self._lists, block_tables)):
            changed = np.flatnonzero(lengths != self._lengths)
            if changed.size and np.all(lengths[changed] == self._lengths[changed] + 1):
                # decode: each grew by one block (append-only), all written at once;
                # requests of equal length cross a block boundary in the same step
                array[changed, lengths[changed] - 1] = list(map(
                    _LAST, map(block_tables.__getitem__, changed.tolist())))
            elif len(changed) <= REBUILD_FRACTION * n:
                for i in changed.tolist():   # the row's old ids stay as they are
                    row = block_tables[i]
                    array[i, :len(row)] = row
            else:
                changed = None
            if changed is not None:
                self.rows_written += len(changed)
                self._lengths = lengths
                return array[:, :width]
        # spare columns, so that tables growing by a block do not force a new build
        array = np.zeros((n, width + SPARE_COLUMNS), np.int32)
        # one vectorised fill instead of a numpy assignment per row (~2 us each)
        array[np.arange(width + SPARE_COLUMNS) < lengths[:, None]] = np.fromiter(
            itertools.chain.from_iterable(block_tables), np.int32, int(lengths.sum()))
        self._lists, self._lengths, self._array = list(block_tables), lengths, array
        self.rebuilds += 1
        self.rows_written = 0
        return array[:, :width]
