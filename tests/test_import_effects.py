"""Importing reput changes nothing: no module installs a signal handler, writes os.environ or starts a
process at import. A job run as a program guards its own start-up (`if __name__ == "__main__"`); sessions
prepare a local launch explicitly (`session.prepare_local_launch`). Importing `jobs` installs no start-up signal
handler, whatever the command line looks like."""
from __future__ import annotations

import ast
import subprocess
import sys

from tests.conftest import REPO

PACKAGES = ("jobs", "storage_format", "udfs", "storegen")
SIDE_EFFECTS = {"signal", "guard_startup", "install", "start_warm", "setdefault", "putenv", "prepare_local_launch"}


def _is_main_guard(node: ast.stmt) -> bool:
    test = getattr(node, "test", None)
    return (isinstance(node, ast.If) and isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
            and test.left.id == "__name__")


def import_time_calls(source: str) -> list[tuple[int, str]]:
    """Calls with a side-effect name that run when the module is imported: statements at module level,
    inside module-level if/try/with blocks, except under `if __name__ == "__main__"`."""
    found = []

    def visit(stmts: list[ast.stmt]) -> None:
        for st in stmts:
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or _is_main_guard(st):
                continue
            for block in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(st, block, None)
                if isinstance(st, (ast.If, ast.Try, ast.With, ast.For, ast.While)) and inner:
                    visit([h for h in inner if isinstance(h, ast.stmt)] if block != "handlers" else
                          [s for h in inner for s in h.body])
            parts = [st.test] if isinstance(st, ast.If) else [] if isinstance(st, (ast.Try, ast.With)) else [st]
            for part in parts:
                for node in ast.walk(part):
                    if isinstance(node, ast.Call):
                        name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
                        if name in SIDE_EFFECTS:
                            found.append((node.lineno, name))
                    if isinstance(node, (ast.Assign, ast.AugAssign)) and "environ" in ast.dump(node):
                        found.append((node.lineno, "os.environ write"))

    visit(ast.parse(source).body)
    return found


def test_no_module_has_import_time_side_effects():
    offenders = [f"{p.relative_to(REPO)}:{line}: {name}" for package in PACKAGES
                 for p in sorted((REPO / package).rglob("*.py")) for line, name in import_time_calls(p.read_text())]
    assert not offenders, offenders


def test_the_check_sees_an_import_time_handler():
    """The check itself: a handler installed at import behind a condition is seen; one behind `__main__` is not."""
    old = "def _started_as_job():\n    return True\n\n\nif _started_as_job():\n    from .x import guard_startup\n\n" \
          "    guard_startup()\n"
    assert import_time_calls(old) == [(8, "guard_startup")]
    assert import_time_calls('if __name__ == "__main__":\n    guard_startup()\n') == []


def test_importing_every_job_leaves_the_signal_handlers_alone():
    """The same, run: SIGINT's and SIGTERM's handlers are unchanged after importing every job module."""
    script = ("import signal, sys; before = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]; "
              "import jobs, jobs.rebuild, jobs.verify, jobs.recover, jobs.query, jobs.inspect, jobs.catalog, "
              "jobs.dump, jobs.__main__; "
              "print([signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)] == before)")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.strip() == "True", done.stderr
