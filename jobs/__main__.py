"""`reput JOB [options]` and `python -m jobs JOB [options]`: the console command (pyproject [project.scripts]), one
name for every job, each run through the common front door (runtime.cli.run_process)."""
from __future__ import annotations

if __package__ in (None, ""):  # run as a file: jobs/ must not shadow the standard library (see jobs/_script_path)
    import _script_path  # noqa: F401

import importlib  # noqa: E402
import sys  # noqa: E402
from typing import NoReturn  # noqa: E402

from jobs import __version__  # noqa: E402
from jobs.pipeline.runtime import interrupt  # noqa: E402
from jobs.pipeline.runtime.cli import EXIT_ERROR, EXIT_STATUS_TEXT, run_process  # noqa: E402

JOBS = ("inspect", "rebuild", "recover", "verify", "query", "catalog", "dump", "convert")
USAGE = f"""usage: reput JOB [options]   (reput JOB --help: the job's options)

jobs:
  inspect   summarise a store's commit log
  rebuild   rebuild consume queues and index files from the commit log, byte-exact
  recover   the broker's recovery after an unclean shutdown, offline
  verify    check consume queues and index files against the commit log
  query     find messages by key, unique key or message id
  catalog   append record metadata to a Delta table
  dump      print one consume queue, commit-log records or one index file
  convert   a DLedger store as a plain store (to leave DLedger for controller mode)

{EXIT_STATUS_TEXT}
reput {__version__}"""


def reput(argv: list[str] | None = None) -> NoReturn:
    """Run jobs.JOB's main through the common front door (`run_main`, as a process: `run_process`)."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stdout if args else sys.stderr)
        sys.exit(0 if args else EXIT_ERROR)
    if args[0] == "--version":
        print(f"reput {__version__}")
        sys.exit(0)
    job = args[0]
    if job not in JOBS:
        print(f"reput: error: unknown job {job!r} (choose from {', '.join(JOBS)})", file=sys.stderr)
        sys.exit(EXIT_ERROR)
    if args[1:] == ["--version"]:  # what the job's parser would print, without importing the job
        print(f"reput {__version__}")
        sys.exit(0)
    interrupt.guard_startup(job)
    run_process(job, importlib.import_module(f"jobs.{job}").main, args[1:])


if __name__ == "__main__":
    reput()
