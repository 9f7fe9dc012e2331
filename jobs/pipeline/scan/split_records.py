"""A DLedger split's records, listed by its decode task from the bytes it just decoded (`list_buffer`: no second
read of the store): offset, size, transaction type and, for COMMIT/ROLLBACK records, the prepared offset, by hopping
entry headers. With a work directory the sizes stay there (io.workdir.write_record_sizes), and so do its transaction
ends' prepared offsets (write_transaction_ends): the driver gets a split's first offset, count, byte total and the
count and span of its transaction ends only (`SplitRecords`), so its memory does not grow with the records; without
one they travel along. jobs.convert lays the plain log out from them."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from storage_format.dledger import ENTRY_HEADER_SIZE
from storage_format.kernels.layout_kernel import hop_entries
from storage_format.record import TRAN_PREPARED

from ..io.fs import Location
from ..io.workdir import read_record_sizes, read_transaction_ends

MIN_ENTRY = ENTRY_HEADER_SIZE + 20  # no entry is smaller: bounds the arrays a chunk can fill


@dataclass(frozen=True, kw_only=True)
class SplitRecords:
    """A split's records as a decode task sends them to the driver: consecutive entries, so the first record's
    offset, the entry header's size and each record's size give every offset; their count and byte total (what the
    layout needs for a split that no segment boundary cuts); the prepared offsets its COMMIT/ROLLBACK records point
    at (their count and smallest and largest: where the half records can be), and its PREPARED count. `sizes` and
    `end_prepared` are None when they were written to the work directory under `split`."""

    first: int
    header: int
    count: int
    total: int
    ends: int
    ends_lo: int
    ends_hi: int
    prepared: int
    sizes: np.ndarray | None = None
    end_prepared: np.ndarray | None = None
    split: int = -1

    def offsets_from(self, sizes: np.ndarray) -> np.ndarray:
        """Every record's offset, from its sizes (this split's, in memory or read back from the work directory)."""
        if not len(sizes):
            return np.zeros(0, np.int64)
        steps = sizes.astype(np.int64) + self.header
        return self.first + np.concatenate(([0], np.cumsum(steps[:-1])))

    @classmethod
    def listed(cls, first: int, header: int, sizes: np.ndarray, trans: np.ndarray, preps: np.ndarray,
               split: int = -1) -> SplitRecords:
        """A split's records from their listing (sizes, transaction types, prepared offsets: a record each), held
        in memory: the transaction ends are the COMMIT/ROLLBACK records (type >= 8)."""
        targets = preps[trans >= 8].astype(np.int64)
        return cls(first=first, header=header, count=len(sizes), total=int(sizes.sum(dtype=np.int64)),
                   ends=len(targets), ends_lo=int(targets.min()) if len(targets) else 0,
                   ends_hi=int(targets.max()) if len(targets) else -1,
                   prepared=int(np.count_nonzero(trans == TRAN_PREPARED)), sizes=sizes, end_prepared=targets,
                   split=split)

    def sizes_in(self, work: Location | None) -> np.ndarray:
        """The records' sizes: in memory, or read back from the work directory."""
        return self.sizes if self.sizes is not None else read_record_sizes(work, self.split)

    def prepared_in(self, work: Location | None) -> np.ndarray:
        """The transaction ends' prepared offsets, in record order: in memory, or read back from the work directory."""
        if self.end_prepared is not None:
            return self.end_prepared
        return read_transaction_ends(work, self.split) if self.ends else np.zeros(0, np.int64)

    @property
    def offsets(self) -> np.ndarray:
        return self.offsets_from(self.sizes)

    @property
    def old_end(self) -> int:
        """Where the split's last record ends in the source (its sizes not needed)."""
        return self.first + self.total + self.header * max(self.count - 1, 0)


def list_buffer(buf, base: int, first_offset: int, last_end: int, header: int, records: int,
                limit: int | None) -> SplitRecords:
    """The records of a decoded split: hop the entries of `buf` (absolute offset `base`) from the entry at
    `first_offset` to the record ending at `last_end` (the decode counted `records` of them: checked), or to
    the last record ending at or below `limit` (the dispatch limit: the DLedger committed position)."""
    data = np.frombuffer(buf, np.uint8)[:last_end - base]
    start = first_offset - base
    cap = (len(data) - start) // MIN_ENTRY + 1  # a true bound: untouched capacity costs no memory
    offs, sizes = np.empty(cap, np.int64), np.empty(cap, np.int32)
    trans, preps = np.empty(cap, np.int8), np.empty(cap, np.int64)
    n, stop, ended, _ = hop_entries(data, base, start, 2**62 if limit is None else limit, header, offs, sizes, trans,
                                 preps)
    cut = limit is not None and ended and n < records  # the walk met a record ending past the limit
    if not ((n == records and stop == len(data)) or cut):
        raise ValueError(f"listing the entries from commit-log offset {first_offset} found {n} records ending at "
                         f"{base + stop}; the decode found {records} ending at {last_end}")
    return SplitRecords.listed(int(offs[0]) if n else first_offset + header, header, sizes[:n].copy(), trans[:n],
                               preps[:n])
