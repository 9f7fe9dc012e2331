"""Path fix for a job run as a file (`python jobs/<name>.py`, `spark-submit jobs/<name>.py`).

Python then puts jobs/ itself first on sys.path, where jobs/inspect.py shadows the standard library's
`inspect` (imported by dataclasses, pyspark, ...). Each job script imports this module first (found as
the top-level `_script_path` through that very entry): it replaces jobs/ on sys.path by the repository
root, so that `jobs.*` resolves as a package and `inspect` is the standard library's again.
"""
import os
import sys

_JOBS_DIR = os.path.dirname(os.path.realpath(__file__))
_ROOT = os.path.dirname(_JOBS_DIR)

sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != _JOBS_DIR]
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import jobs  # noqa: E402,F401
