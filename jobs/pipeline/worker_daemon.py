"""The embedded session's Python worker daemon: Spark's own (pyspark.daemon), started after importing
the pipeline and loading the compiled kernels, so that every worker it forks has them already (shared
copy-on-write) instead of paying the imports and the kernel load in its first task. Sessions started
by spark-submit keep Spark's daemon (jobs.pipeline.session sets this one for embedded sessions only)."""
from __future__ import annotations

import pyspark.daemon


def preload() -> None:
    """Import what decode and build tasks run and load every kernel from numba's cache."""
    import jobs.pipeline.build  # noqa: F401
    import jobs.pipeline.scan  # noqa: F401
    from storage_format.kernel_cache import warm

    warm()


if __name__ == "__main__":
    preload()
    pyspark.daemon.manager()
