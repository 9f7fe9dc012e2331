"""What the pipeline needs of an engine, at the bottom of the runtime (it imports nothing of it): `TaskRunner`, the
contract both engines satisfy, and whether this process runs under spark-submit. Here so that the engines, the
session and the task runner can name them without importing each other (engine -> session -> engine was a
circle)."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable, Protocol, Sequence, TypeVar

if TYPE_CHECKING:
    from .driver_memory import DriverMemory

T = TypeVar("T")
R = TypeVar("R")


class TaskRunner(Protocol):
    """What the pipeline needs of an engine: how many tasks run at once, and fn over items as tasks (results in
    item order, progress lines on stderr unless quiet, a task's exception raised in the driver)."""

    @property
    def default_parallelism(self) -> int: ...

    @property
    def driver_memory(self) -> DriverMemory | None:
        """The memory setting that bounds the driver (None: none does, the local engine)."""

    def run_tasks(self, items: Sequence[T], fn: Callable[[T], R], label: str, total_bytes: int = 0,
                  quiet: bool = False) -> list[R]: ...


def under_spark_submit() -> bool:
    """spark-submit starts Python with a gateway to its own JVM already running."""
    return "PYSPARK_GATEWAY_PORT" in os.environ
