"""jobs.pipeline.store.markers: the one reader of abort, abort.bak and checkpoint, and its one damage policy
(missing: None, or zeros where the broker's rules need a checkpoint; damaged: an error naming the file and
offset wherever its values are used, no evidence for the generation guess)."""
from __future__ import annotations

import pytest

from jobs.pipeline.io.fs import location
from jobs.pipeline.store.markers import StoreMarkers, store_generation
from storage_format.checkpoint import Checkpoint, checkpoint_bytes
from storage_format.errors import StoreFormatError


def test_missing_markers(tmp_path):
    m = StoreMarkers.read(location(str(tmp_path)))
    assert (m.abort, m.abort_bak, m.checkpoint_raw, m.found_checkpoint) == (None, None, None, None)
    assert m.checkpoint == Checkpoint()
    assert m.generation(None).generation == 4


def test_a_damaged_checkpoint_is_an_error_where_used_and_no_evidence_for_the_generation(tmp_path):
    (tmp_path / "checkpoint").write_bytes(b"\1\2\3")
    (tmp_path / "abort").write_bytes(b"12345")  # 5.x writes its PID into abort
    m = StoreMarkers.read(location(str(tmp_path)))
    for use in (lambda: m.found_checkpoint, lambda: m.checkpoint):
        with pytest.raises(StoreFormatError, match=r"checkpoint.*3 bytes"):
            use()
    assert m.generation(None).generation == 5
    assert store_generation(location(str(tmp_path)), None).generation == 5


def test_the_command_line_overrides_detection(tmp_path):
    (tmp_path / "abort").write_bytes(b"12345")
    cp = Checkpoint(1, 2, 3, 4, 5)
    (tmp_path / "checkpoint").write_bytes(checkpoint_bytes(cp, 5))
    m = StoreMarkers.read(location(str(tmp_path)))
    assert m.found_checkpoint == cp and m.checkpoint == cp
    assert m.generation(4).generation == 4 and "command line" in m.generation(4).evidence[0]
    assert store_generation(location(str(tmp_path)), 4).generation == 4
