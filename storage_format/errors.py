"""The one exception family of the byte layer: every error names the file and byte offset."""
from __future__ import annotations


class StoreFormatError(Exception):
    """Bad bytes in a store file: `path` and `offset` say where, `reason` says what."""

    def __init__(self, path: str, offset: int | None, reason: str) -> None:
        self.path = str(path)
        self.offset = offset
        self.reason = reason
        where = f"{self.path}" if offset is None else f"{self.path} at byte offset {offset}"
        super().__init__(f"{where}: {reason}")

    def __reduce__(self):
        """Rebuild from (path, offset, reason): the error crosses from Spark tasks to the driver by pickle."""
        return type(self), (self.path, self.offset, self.reason)


class SettingsError(ValueError):
    """A broker .properties file or setting that cannot be used."""


class RecoveryError(Exception):
    """The store is in a state the broker's recovery rules do not cover (reported, never guessed)."""


class ScanError(Exception):
    """A store that cannot be scanned as a whole (no commit log, a missing or overlapping segment)."""
