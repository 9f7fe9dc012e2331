"""The house's standard: no function over 60 lines and no module over 450 lines in the product's packages, but for
the ones listed here, each with its length and its reason; a listed one may not grow, and its entry is lowered when
it shrinks and removed when it comes within the bound (so the list only shrinks). No test module imports another:
what tests share lives in helper modules (tests/helpers.py and the other tests/*.py not named test_*)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("jobs", "storage_format", "udfs", "storegen", "bench")
FUNCTION_LINES, MODULE_LINES = 60, 450

LONG_FUNCTIONS = {  # qualified name -> (its length in lines, why it is longer)
    "bench/__main__.py:main": (187, "the bench's driver: one stage after another, each printing its figures"),
    "bench/__main__.py:parse_args": (147, "the bench's flags, one add_argument each"),
    "storegen/synth.py:write_bench_store": (65, "writes the bench store and its twin layouts in one pass"),
}
LONG_MODULES = {  # path -> (its length in lines, why it is longer)
    "storage_format/kernels/split_kernel.py": (671, "the compiled decoder: its inlined helpers live beside the loop"),
    "storegen/sample.py": (556, "the sample store's message kinds, one builder each"),
    "storegen/encoder.py": (506, "the encoder of every record kind the golden stores hold (tests and bench only)"),
    "storage_format/recovery/dledger.py": (598, "DLedger's recovery rules (walk, index rewrite, checkpoint, currterm)"),
    "jobs/pipeline/outputs/build.py": (650, "stages 3-4: consume-queue and index build tasks"),
    "jobs/pipeline/recover/write.py": (484, "the files recovery rewrites, creates and deletes"),
    "jobs/pipeline/scan/decode.py": (524, "stages 1-2: the decode task and its two decoders' summaries"),
    "jobs/pipeline/recover/dledger.py": (532, "the DLedger recovery's facts, plan and its JSON form"),
    "bench/recovery.py": (481, "the recovery bench: the broker's run and reput's, side by side"),
}


def _sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py"))


def _long_functions() -> dict[str, int]:
    """`path:name` -> lines of every function over the bound (of two of one name in a module, the longer)."""
    out: dict[str, int] = {}
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                name = f"{path.relative_to(REPO).as_posix()}:{node.name}"
                if lines > FUNCTION_LINES:
                    out[name] = max(lines, out.get(name, 0))
    return out


def _long_modules() -> dict[str, int]:
    found = {p.relative_to(REPO).as_posix(): len(p.read_text().splitlines()) for p in _sources()}
    return {k: n for k, n in found.items() if n > MODULE_LINES}


def over_the_bound(found: dict[str, int], listed: dict[str, tuple[int, str]], bound: int) -> list[str]:
    """What breaks the list: an entry over `bound` not listed, one longer or shorter than its listed length, a
    listed one now within the bound (or gone)."""
    problems = []
    for name, lines in sorted(found.items()):
        if name not in listed:
            problems.append(f"{name}: {lines} lines, over the bound of {bound}: split it")
        elif lines > listed[name][0]:
            problems.append(f"{name}: grew from {listed[name][0]} to {lines} lines: split it (a listed one never "
                            "grows)")
        elif lines < listed[name][0]:
            problems.append(f"{name}: {lines} lines, listed at {listed[name][0]}: lower its entry to {lines}")
    problems += [f"{name}: within {bound} lines now (or gone): remove its entry"
                 for name in sorted(set(listed) - set(found))]
    return problems


def test_no_function_is_longer_than_the_bound_but_the_listed_and_none_grows():
    assert over_the_bound(_long_functions(), LONG_FUNCTIONS, FUNCTION_LINES) == []


def test_no_module_is_longer_than_the_bound_but_the_listed_and_none_grows():
    assert over_the_bound(_long_modules(), LONG_MODULES, MODULE_LINES) == []


def test_the_list_check_names_every_way_a_list_goes_wrong():
    listed = {"a": (70, "why"), "b": (70, "why"), "c": (70, "why"), "d": (70, "why"), "e": (70, "why")}
    found = {"a": 70, "b": 71, "c": 65, "new": 61, "e": 61}
    assert over_the_bound(found, listed, 60) == [
        "b: grew from 70 to 71 lines: split it (a listed one never grows)",
        "c: 65 lines, listed at 70: lower its entry to 65",
        "e: 61 lines, listed at 70: lower its entry to 61",
        "new: 61 lines, over the bound of 60: split it",
        "d: within 60 lines now (or gone): remove its entry"]


# ------------------------------------------------------------------------------ tests do not lean on each other

TESTS = Path(__file__).resolve().parent
NAMED = re.compile(r"\btests\.(test_\w+)")


def imported_test_modules(source: str, own: str = "") -> set[str]:
    """The test modules (`test_*`) a tests/ module imports, in any form: `from tests.test_<name> import`, `import
    tests.test_<name>`, `from .test_<name> import`, `from tests import test_<name>`, or by its dotted name in a string
    (import_module, code run in a child process); a module naming itself is not counted."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 0 and module != "tests" and not module.startswith("tests."):
                continue
            parts = module.split(".")[0 if node.level else 1:] if module else []
            found |= {parts[0]} if parts else {alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name.split(".")[1] for alias in node.names
                      if alias.name.startswith("tests.") and len(alias.name.split(".")) > 1}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found |= set(NAMED.findall(node.value))
    return {m for m in found if m.startswith("test_") and m != own}


def test_no_test_module_imports_another():
    """A harness two test modules use lives in a helper module (tests/helpers.py, conftest.py fixtures, or another
    module not named test_*.py), so that a test module can be read, moved or deleted on its own."""
    leaning = {path.name: sorted(found) for path in sorted(TESTS.glob("*.py"))
               if (found := imported_test_modules(path.read_text(), path.stem))}
    assert leaning == {}, f"test modules imported (move what they share to tests/helpers.py): {leaning}"


def test_every_form_of_import_of_a_test_module_is_seen():
    name = "test_" + "hostile"  # built, so that this module names no test module itself
    for source in (f"from tests.{name} import run_job", f"from .{name} import run_job", f"import tests.{name}",
                   f"from tests import {name}", f"from . import {name}",
                   f"def f():\n    from tests.{name} import run_job", f"importlib.import_module('tests.{name}')",
                   f"code = 'from tests.{name} import run_job; run_job()'"):
        assert imported_test_modules(source) == {name}, source
    for source in ("from tests.helpers import run_job", "from tests import golden_walk", "from .conftest import REPO",
                   "import tests.oracle", f"from tests.{name} import run_job"):
        assert imported_test_modules(source, own=name) == set(), source
