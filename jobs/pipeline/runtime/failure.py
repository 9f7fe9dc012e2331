"""Any failure as one line for the operator: our own errors as they are, a Spark (Py4J / PySpark) error
as the Python error raised inside the failed task, else the Java one, never with its stack trace.
`REPUT_DEBUG=1` adds the traceback and Spark's log."""
from __future__ import annotations

import builtins
import re

from storage_format.errors import ScanError, SettingsError, StoreFormatError

from . import env

DEBUG_ENV = "REPUT_DEBUG"
_OWN_NAMES = {"StoreFormatError", "SettingsError", "ScanError", "JobError"}
# `pkg.mod.SomeError: message`: an exception line of a Python traceback or a Java stack trace.
_EXC_LINE = re.compile(r"^\s*(?::\s*)?(?:Caused by: )?"
                       r"((?:[A-Za-z_]\w*\.)*)([A-Za-z_]\w*(?:Error|Exception|Interrupt)): (.+)$")
_JAVA_PACKAGES = ("java.", "javax.", "org.", "scala.", "py4j.", "io.netty.")


class JobError(Exception):
    """An error an operator can act on; printed as one line, exit status 2."""


class Interrupted(KeyboardInterrupt):
    """An interrupt that knows a better closing note than the job's default."""

    def __init__(self, note: str) -> None:
        super().__init__(note)
        self.note = note


OWN_ERRORS = (StoreFormatError, SettingsError, ScanError, JobError, OSError)


def debug() -> bool:
    """REPUT_DEBUG=1 (any value but 0): tracebacks and Spark's log are shown."""
    return (env.value(DEBUG_ENV) or "") not in ("", "0")


def one_line(exc: BaseException) -> str:
    """What went wrong, in one line (see the module doc)."""
    if isinstance(exc, OWN_ERRORS):
        return str(exc)
    text = str(exc).strip()
    found = [m for m in map(_EXC_LINE.match, text.splitlines()) if m]
    python = [m for m in found if not m.group(1).startswith(_JAVA_PACKAGES)]
    if python:
        m = python[-1]  # the last exception of a Python traceback is the one raised
        own = m.group(2) in _OWN_NAMES or _is_os_error(m.group(2))
        return m.group(3) if own else f"{m.group(2)}: {m.group(3)}{_hint()}"
    if found:
        return f"{found[0].group(2)}: {found[0].group(3)}{_hint()}"
    first = text.splitlines()[0] if text else ""
    return (f"{type(exc).__name__}: {first}" if first else type(exc).__name__) + _hint()


def _is_os_error(name: str) -> bool:
    """OSError and its subclasses (FileNotFoundError, IsADirectoryError, ...) name the path themselves."""
    cls = getattr(builtins, name, None)
    return isinstance(cls, type) and issubclass(cls, OSError)


def _hint() -> str:
    return "" if debug() else f" ({DEBUG_ENV}=1 shows the traceback)"
