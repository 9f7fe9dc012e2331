"""The driver's side of convert: from the listed records (numeric arrays) to the new layout, the segment
tasks and the plan a dry run prints. Per record the driver holds 20 bytes (old offset, size, new offset):
4 M records take ~80 MB, 50 M ~1 GB; the layout itself is a vectorised pass (commitlog_layout.layout)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from storage_format.commitlog_layout import Layout, layout
from storage_format.scan_plan import Segment

from .records import FileRecords
from .segments import SegmentTask


@dataclass(frozen=True, kw_only=True)
class ConvertPlan:
    """What convert will do: the DLedger records and their new layout, the transaction ends whose prepared
    offset moves (`prepared_keys` -> `prepared_values`, sorted), and those pointing outside the converted log."""

    data_files: tuple[Segment, ...]
    plain_segments: tuple[Segment, ...]
    old: np.ndarray
    sizes: np.ndarray
    layout: Layout
    end_offsets: np.ndarray
    end_prepared: np.ndarray
    prepared_keys: np.ndarray
    prepared_values: np.ndarray
    unmapped_prepared: int
    prepared_records: int

    @property
    def records(self) -> int:
        return len(self.old)

    @property
    def ids_changed(self) -> int:
        return int(np.count_nonzero(self.layout.offsets != self.old))

    def new_offset(self, old: int) -> int:
        """The new offset of the DLedger record at old offset `old` (a plain segment's record keeps its own)."""
        at = int(np.searchsorted(self.old, old))
        return int(self.layout.offsets[at]) if at < len(self.old) and int(self.old[at]) == old else old

    def records_after(self, old: int) -> int:
        """DLedger records after the one at old offset `old`."""
        return len(self.old) - int(np.searchsorted(self.old, old, side="right"))

    def segment_tasks(self, out_dir: str, map_dir: str) -> list[SegmentTask]:
        """One task per new segment holding records (in offset order)."""
        lay, size = self.layout, self.layout.segment_size
        blank_seg = {int((b - lay.start) // size): int(b) for b in lay.blanks.tolist()}
        tasks = []
        segments = int((lay.offsets[-1] - lay.start) // size) + 1 if len(lay.offsets) else 0
        bounds = np.searchsorted(lay.offsets, lay.start + np.arange(segments + 1, dtype=np.int64) * size)
        for k in range(len(bounds) - 1):
            i0, i1 = int(bounds[k]), int(bounds[k + 1])
            if i0 == i1:
                continue
            lo, hi = int(self.old[i0]), int(self.old[i1 - 1])
            sel = (self.end_offsets >= lo) & (self.end_offsets <= hi)
            wanted = np.unique(self.end_prepared[sel])
            j = np.flatnonzero(np.isin(self.prepared_keys, wanted))
            tasks.append(SegmentTask(start=lay.start + k * size, segment_size=size, first_old=lo, count=i1 - i0,
                                     blank_at=blank_seg.get(k), sources=self.data_files,
                                     prepared_keys=tuple(self.prepared_keys[j].tolist()),
                                     prepared_values=tuple(self.prepared_values[j].tolist()),
                                     out_dir=out_dir, map_dir=map_dir))
        return tasks

    def to_dict(self) -> dict:
        lay = self.layout
        return {"dledger_records": self.records, "new_segments": len(lay.segment_starts),
                "new_log_start": lay.start, "new_log_end": lay.end,
                "new_log_bytes": lay.end - lay.start, "blanks": len(lay.blanks),
                "plain_segments_kept": len(self.plain_segments),
                "offset_msg_ids_changed": self.ids_changed,
                "transaction_ends_rewritten": int(len(self.end_offsets)) - self.unmapped_prepared,
                "transaction_ends_pointing_outside": self.unmapped_prepared,
                "prepared_records_moved": self.prepared_records}


def make_plan(segments: list[Segment], listed: list[FileRecords], segment_size: int) -> ConvertPlan:
    """The layout of the DLedger part from the data files' listed records (offset order)."""
    data = tuple(s for s in segments if s.header)
    plain = tuple(s for s in segments if not s.header)
    # one part (what jobs.convert gives): no copies; sizes stay int32 (fresh memory is what costs on the driver)
    old = listed[0].offsets if len(listed) == 1 else \
        np.concatenate([f.offsets for f in listed]) if listed else np.zeros(0, np.int64)
    sizes = listed[0].sizes if len(listed) == 1 else \
        np.concatenate([f.sizes for f in listed]) if listed else np.zeros(0, np.int32)
    start = data[0].start if data else 0
    lay = layout(sizes, segment_size, start)
    end_offsets = np.concatenate([f.end_offsets for f in listed]) if listed else np.zeros(0, np.int64)
    end_prepared = np.concatenate([f.end_prepared for f in listed]) if listed else np.zeros(0, np.int64)
    targets = np.unique(end_prepared)
    at = np.searchsorted(old, targets)
    found = (at < len(old)) & (old[np.minimum(at, max(len(old) - 1, 0))] == targets) if len(old) else \
        np.zeros(len(targets), bool)
    keys = targets[found]
    values = lay.offsets[at[found]]
    moved = keys != values
    below = targets[~found] < start  # half records in the plain part keep their offsets
    unmapped = int(np.isin(end_prepared, targets[~found][~below]).sum())
    return ConvertPlan(data_files=data, plain_segments=plain, old=old, sizes=sizes, layout=lay,
                       end_offsets=end_offsets, end_prepared=end_prepared, prepared_keys=keys[moved],
                       prepared_values=values[moved], unmapped_prepared=unmapped,
                       prepared_records=sum(f.prepared for f in listed))
