""".ci/run itself (issue 52 item 5), on stub steps: a copy of the script in a scratch checkout whose `make`,
`.ci/floors` and `.venv/bin/python` are stubs. A TERM or INT to the script ends every step, preparation and lane
it started (their children, and processes in sessions of their own, too) within seconds, and the run exits 143 or
130; a preparation that fails is reported as FAILED, with its log, in its place and in the last line."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO

# make TARGET: logs the target; CI_STUB_FAIL's targets exit 3, CI_STUB_STUBBORN's wait on a child that ignores TERM,
# CI_STUB_SLOW's wait on a child and on a process in a session of its own
FAKE_MAKE = """#!/usr/bin/env bash
echo "$1" >> "$CI_STUB_LOG"
case " ${CI_STUB_FAIL:-} " in *" $1 "*) exit 3;; esac
case " ${CI_STUB_STUBBORN:-} " in *" $1 "*) trap '' TERM; sleep 300 & wait;; esac
case " ${CI_STUB_SLOW:-} " in *" $1 "*) setsid sleep 300 & sleep 300 & wait;; esac
exit 0
"""
# the script with SIGINT as the default action: a shell cannot trap a signal it was started ignoring, and a test
# worker's children may inherit that
RUN = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp('bash', ['bash', sys.argv[1]])"


def _executable(path: Path, text: str) -> None:
    """A script at `path`, executable."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


@pytest.fixture
def checkout(tmp_path):
    """A scratch checkout holding .ci/run and stubs, and the environment that puts the stub make first on PATH."""
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy(REPO / ".ci" / "run", repo / ".ci" / "run")
    _executable(repo / ".ci" / "floors", "#!/usr/bin/env bash\necho 'floors: stub venv prepared in 0s'\n")
    _executable(repo / ".venv" / "bin" / "python", "#!/usr/bin/env bash\nexit 0\n")
    _executable(tmp_path / "bin" / "make", FAKE_MAKE)
    mark = uuid.uuid4().hex
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}", CI_STUB_LOG=str(tmp_path / "make.log"),
               CI_STUB_MARK=mark, TMPDIR=str(tmp_path), REPUT_ORACLE=str(tmp_path / "oracle"),
               REPUT_FLOORS_VENV=str(tmp_path / "floors-venv"))
    yield repo, env, mark
    for pid in _marked(mark):  # a failed test's leftovers, by the mark in their environment
        os.kill(pid, signal.SIGKILL)


def _marked(mark: str) -> list[int]:
    """Processes whose environment holds CI_STUB_MARK=mark (this process's own children; zombies left out)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and f"CI_STUB_MARK={mark}".encode() in Path(f"/proc/{entry}/environ").read_bytes():
                stat = Path(f"/proc/{entry}/stat").read_text()
                if stat[stat.rindex(")") + 2] != "Z":
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _start(repo: Path, env: dict, out: Path) -> subprocess.Popen:
    """The checkout's .ci/run with SIGINT at its default (RUN), in a session of its own, output into `out`."""
    return subprocess.Popen([sys.executable, "-c", RUN, str(repo / ".ci" / "run")], env=env, stdout=out.open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for_make(tmp_path: Path, *targets: str) -> None:
    """Until the stub make has started each of `targets`, and half a second more (its children start)."""
    log, deadline = tmp_path / "make.log", time.monotonic() + 30
    while time.monotonic() < deadline and not (log.is_file() and set(targets) <= set(log.read_text().split())):
        time.sleep(0.1)
    time.sleep(0.5)


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["TERM", "INT"])
def test_a_signal_ends_every_step_it_started(checkout, tmp_path, sig, status):
    """make test and the oracle preparation hang, each with a child and a process in a session of its own: the
    signal to the script alone ends them all within seconds, and the run exits 143 (TERM) or 130 (INT)."""
    repo, env, mark = checkout
    out = tmp_path / "out.txt"
    proc = _start(repo, dict(env, CI_STUB_SLOW="test oracle"), out)
    _wait_for_make(tmp_path, "test", "oracle")
    assert "ci: make test: started" in out.read_text() and len(_marked(mark)) >= 7  # the run, 2 makes, 4 sleeps
    t0 = time.monotonic()
    os.kill(proc.pid, sig)
    assert proc.wait(timeout=10) == status and time.monotonic() - t0 < 3
    time.sleep(0.5)
    assert _marked(mark) == [], out.read_text()
    assert f"ci: {sig.name[3:]} after" in out.read_text()


def test_what_ignores_term_is_killed_after_five_seconds(checkout, tmp_path):
    """make test waits on a child that ignores TERM: 5 s after the TERM, KILL ends it, and the run exits 143."""
    repo, env, mark = checkout
    out = tmp_path / "out.txt"
    proc = _start(repo, dict(env, CI_STUB_STUBBORN="test"), out)
    _wait_for_make(tmp_path, "test")
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=15) == 143
    time.sleep(0.5)
    assert _marked(mark) == [] and "killed what was still running 5 s after TERM" in out.read_text()


def test_a_failed_preparation_is_reported_as_failed(checkout, tmp_path):
    """make boundscheck-warm fails: its chain goes on to dist/ and is reported FAILED with its log; the steps pass,
    and the last line names the preparation."""
    repo, env, mark = checkout
    out = tmp_path / "out.txt"
    assert _start(repo, dict(env, CI_STUB_FAIL="boundscheck-warm"), out).wait(timeout=60) == 0
    text = out.read_text()
    assert "ci: preparation kernels: FAILED (exit 3; its step does it again); its log:" in text
    assert "make boundscheck-warm failed (exit 3)" in text and "dist/ and the executors' kernels in" in text
    assert "ci: prepared: oracle: ready in" in text and "ci: prepared: floors: stub venv prepared in" in text
    assert text.rstrip().splitlines()[-1].endswith("preparations that FAILED (their steps did them again): kernels")
    made = (tmp_path / "make.log").read_text().split()
    assert sorted(made) == sorted(["system-deps", "oracle", "venv", "test", "boundscheck-warm", "package",
                                   "test-cluster", "test-boundscheck", "test-floors"])
    assert _marked(mark) == []
