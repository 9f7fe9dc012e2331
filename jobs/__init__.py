"""Entry points: `python -m jobs.<name>`, `python jobs/<name>.py`, `reput <name>` or `spark-submit jobs/<name>.py`."""
import os as _os
import sys as _sys

__version__ = "0.1.0"


def _started_as_job() -> bool:
    """This process starts a job (`python -m jobs.<name>`, `python jobs/<name>.py`), not a test, a Spark
    worker daemon (`python -m jobs.pipeline.runtime.worker_daemon`) or another module importing jobs."""
    argv = list(getattr(_sys, "orig_argv", _sys.argv))
    here = _os.path.dirname(_os.path.realpath(__file__))
    for i, arg in enumerate(argv[1:], 1):
        if arg == "-m":
            return i + 1 < len(argv) and argv[i + 1].startswith("jobs.") and argv[i + 1].count(".") == 1
        if not arg.startswith("-"):
            return _os.path.dirname(_os.path.realpath(arg)) == here
    return False


if _started_as_job():  # Ctrl-C from here on (imports of pyspark, ...) is one line, not a traceback
    from .pipeline.runtime.interrupt import guard_startup

    guard_startup()
