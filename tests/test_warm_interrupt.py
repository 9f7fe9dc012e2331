"""A signal while the local engine loads the compiled kernels: numba loads through ctypes callbacks, which swallow
an exception raised in them, so a KeyboardInterrupt raised there was lost and the job ran on and published. The
load holds the signal and raises it once done."""
from __future__ import annotations

import ctypes
import os
import signal

import pytest

from jobs.pipeline.runtime import interrupt, local


def test_a_signal_during_the_kernels_load_is_raised_after_it(monkeypatch):
    def load_through_a_callback() -> None:  # as llvmlite's object cache notifies numba: a ctypes callback
        callback = ctypes.CFUNCTYPE(None)(lambda: os.kill(os.getpid(), signal.SIGINT))
        callback()

    monkeypatch.setattr("storage_format.kernels.warm.warm", load_through_a_callback)
    monkeypatch.setattr(local, "_warmed", False)
    previous = interrupt.install()
    try:
        with pytest.raises(KeyboardInterrupt):
            local._warm_once()
        assert interrupt.signalled()
    finally:
        interrupt.uninstall(previous)
