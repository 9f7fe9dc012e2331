"""interrupt.removed_unless_kept, the one rule for output a block makes (work directories, an in-place run's staging
area, catalog's data files): removed at once after an error, after a signal only by `finish` once the engine has
stopped writing, also when the signal's KeyboardInterrupt was replaced on its way up (a Py4J error)."""
from __future__ import annotations

import os
import signal

import pytest

from jobs.pipeline.runtime import interrupt


class Output:
    """Stands for a directory the block makes: counts its removals."""

    def __init__(self) -> None:
        self.removed = 0

    def remove(self) -> None:
        self.removed += 1


@pytest.fixture
def under_run_main():
    previous = interrupt.install()
    try:
        yield
    finally:
        interrupt.uninstall(previous)


@pytest.mark.parametrize("keep, removed", [(True, 0), (False, 1)])
def test_a_block_that_ends_well_keeps_its_output_only_when_asked(keep, removed):
    out = Output()
    with interrupt.removed_unless_kept(out, out.remove, keep=keep):
        pass
    assert out.removed == removed


@pytest.mark.parametrize("keep", [True, False])
def test_an_error_removes_the_output_at_once(keep, under_run_main):
    out = Output()
    with pytest.raises(ValueError):
        with interrupt.removed_unless_kept(out, out.remove, keep=keep):
            raise ValueError("bad bytes")
    assert out.removed == 1
    assert interrupt.finish("test", None) == interrupt.EXIT_INTERRUPTED  # nothing left for finish to remove
    assert out.removed == 1


def test_an_interrupt_of_a_job_leaves_the_removal_to_finish(under_run_main, capsys):
    out = Output()
    with pytest.raises(KeyboardInterrupt):
        with interrupt.removed_unless_kept(out, out.remove, keep=True):
            os.kill(os.getpid(), signal.SIGINT)
    assert out.removed == 0  # tasks may still be writing into it
    interrupt.finish("test", None)
    assert out.removed == 1
    assert "interrupted" in capsys.readouterr().err


def test_an_interrupt_replaced_on_its_way_up_is_still_left_to_finish(under_run_main, capsys):
    out = Output()
    with pytest.raises(ConnectionError):
        with interrupt.removed_unless_kept(out, out.remove, keep=True):
            try:
                os.kill(os.getpid(), signal.SIGINT)
            except KeyboardInterrupt:
                raise ConnectionError("Answer from Java side is empty") from None  # as PySpark's clean-up call
    assert out.removed == 0
    interrupt.finish("test", None)
    assert out.removed == 1


def test_outside_a_job_an_interrupt_removes_at_once():
    out = Output()
    with pytest.raises(KeyboardInterrupt):
        with interrupt.removed_unless_kept(out, out.remove, keep=True):
            raise KeyboardInterrupt
    assert out.removed == 1


def test_a_clean_up_that_fails_is_one_line_and_the_others_still_run(under_run_main, capsys):
    first, last = Output(), Output()

    def broken() -> None:
        raise AttributeError("'DeltaTable' object has no attribute 'files'")

    interrupt.remove_on_interrupt(first, first.remove)
    interrupt.remove_on_interrupt(broken, broken)
    interrupt.remove_on_interrupt(last, last.remove)
    assert interrupt.finish("test", None) == interrupt.EXIT_INTERRUPTED
    err = capsys.readouterr().err.splitlines()
    assert first.removed == last.removed == 1
    assert err == ["reput test: note: a clean-up after the interrupt failed (AttributeError: 'DeltaTable' object has "
                   "no attribute 'files'); what it was removing may be left", "reput test: interrupted"]


def test_a_run_lock_is_let_go_by_the_same_rule(under_run_main, tmp_path, capsys):
    """io.run_lock.held: after an interrupt replaced on its way up, the lock stays until finish (a second run must
    not take over what this one's tasks still write into); after an error it goes at once."""
    from jobs.pipeline.io.run_lock import RunLock, held

    lock_file = tmp_path / ".out.reput-lock"
    with pytest.raises(ConnectionError):
        with held(RunLock(lock_file, "rebuild", "OUT")):
            try:
                os.kill(os.getpid(), signal.SIGINT)
            except KeyboardInterrupt:
                raise ConnectionError("Answer from Java side is empty") from None
    assert lock_file.exists()
    interrupt.finish("rebuild", None)
    assert not lock_file.exists()
