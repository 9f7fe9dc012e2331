"""The worker daemons import the modules whose functions tasks run before they fork: each such module names itself
(runtime.worker_daemon.preload_in_workers), the driver hands the names on in the environment of the warm daemon and,
as spark.executorEnv, of the daemon Spark launches; the runtime itself names no module above it."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import REPO

TASK_MODULES = ["jobs.pipeline.scan.decode", "jobs.pipeline.outputs.build"]


def _run(script: str, **env: str) -> str:
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_a_job_names_its_task_modules_for_the_worker_daemons():
    script = ("import json, jobs.rebuild\nfrom jobs.pipeline.runtime import session, worker_daemon\n"
              "conf = session.spark_conf('rebuild', 'local[1]', 'OFF')\n"
              "print(json.dumps([worker_daemon.preload_env(), conf.get('spark.executorEnv.REPUT_WORKER_PRELOAD')]))")
    named, executor_env = json.loads(_run(script))
    assert set(named) == {"REPUT_WORKER_PRELOAD"} and sorted(named["REPUT_WORKER_PRELOAD"].split(",")) == \
        sorted(TASK_MODULES) and executor_env == named["REPUT_WORKER_PRELOAD"]


def test_the_daemon_imports_what_the_driver_named_and_nothing_without_names():
    script = ("import json, sys\nfrom jobs.pipeline.runtime import worker_daemon\nworker_daemon.preload()\n"
              f"print(json.dumps([m in sys.modules for m in {TASK_MODULES!r}]))")
    assert json.loads(_run(script, REPUT_WORKER_PRELOAD=",".join(TASK_MODULES))) == [True, True]
    assert json.loads(_run(script, REPUT_WORKER_PRELOAD="")) == [False, False]
