"""The documentation holds together: README.md stays a front door (at most 250 lines) whose jobs table names every
job in jobs/, every relative link in README.md, CHANGELOG.md and docs/*.md points at a file that exists (and at a
heading there, for `#anchor` links), every page of docs/ is reachable from README.md's index, the code the manual
names (paths such as `jobs/rebuild.py`, modules such as `jobs.pipeline.session` or `python -m
storage_format.kernels.warm`) exists, and CHANGELOG.md is by release, its newest the package's version.
CHANGELOG.md and docs/performance-history.md keep the names of their time and are not held to the code check."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobs import __version__
from tests.conftest import REPO

README = REPO / "README.md"
PAGES = sorted([README, REPO / "CHANGELOG.md", *(REPO / "docs").glob("*.md")])
README_MAX_LINES = 250
CURRENT = [p for p in PAGES if p.name not in ("CHANGELOG.md", "performance-history.md")]
PACKAGES = ("jobs", "storage_format", "udfs", "bench", "storegen")
CODE_PATH = re.compile(r"(?<![\w/.-])(?:jobs|storage_format|udfs|bench|storegen|conf|tests|notebooks|docs|\.ci)"
                       r"/[\w./<>*-]*\w")
MODULE = re.compile(rf"(?<![\w/.-])(?:{'|'.join(PACKAGES)})(?:\.\w+)+")
OUTPUTS = {"notebooks/audit-run.ipynb"}  # what a documented command writes, not part of the repository

FENCE = re.compile(r"^```.*?^```", flags=re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", flags=re.M)


def prose(text: str) -> str:
    """The text without fenced code blocks (links and headings inside them are not links or headings)."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its rendered text lower-cased, characters other than word characters,
    hyphens and spaces dropped, spaces made hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors a page's headings give, with GitHub's -1, -2 ... suffixes for repeated headings."""
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(prose(path.read_text())):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    """Relative link targets of a page (web, mail and other scheme links left out), outside code."""
    text = INLINE_CODE.sub("", prose(path.read_text()))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def broken_links(path: Path) -> list[str]:
    """The links of a page whose file does not exist or has no heading for the anchor."""
    broken = []
    for target in links(path):
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.is_file():
            broken.append(f"{target}: no file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading for #{anchor} in {dest}")
    return broken


def module_file(parts: list[str], root: Path = REPO) -> Path | None:
    """The source file of a dotted module name (a package's __init__.py), if there is one."""
    base = root.joinpath(*parts)
    return next((f for f in (base.with_suffix(".py"), base / "__init__.py") if f.is_file()), None)


def stale_code_names(text: str, root: Path = REPO) -> list[str]:
    """Paths and dotted module names in a page that name no file, module, or name defined in a module."""
    stale = []
    for path in sorted(set(CODE_PATH.findall(text)) - OUTPUTS):
        if not any(c in path for c in "<>*") and not (root / path).exists() and not (root / f"{path}.py").is_file():
            stale.append(path)
    for name in sorted(set(MODULE.findall(text))):
        parts = name.split(".")
        if parts[-1] in ("md", "py", "ipynb", "json"):  # a file name such as jobs.md, not a module
            continue
        depth = max(i for i in range(1, len(parts) + 1) if module_file(parts[:i], root) or i == 1)
        source = module_file(parts[:depth], root)
        rest = parts[depth:]
        if source is None or (rest and not re.search(rf"\b{re.escape(rest[0])}\b", source.read_text())):
            stale.append(name)
    return stale


def test_readme_is_a_front_door():
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: keep it a front door, move detail to docs/"
    for command in ("make demo", "make test"):
        assert command in README.read_text()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page):
    broken = broken_links(page)
    assert not broken, f"{page.name}: {broken}"


@pytest.mark.parametrize("page", CURRENT, ids=lambda p: str(p.relative_to(REPO)))
def test_code_the_docs_name_exists(page):
    stale = stale_code_names(page.read_text())
    assert not stale, f"{page.name} names code that does not exist (moved or renamed?): {stale}"


def test_every_docs_page_is_in_the_readme_index():
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in links(README)}
    missing = sorted(p.name for p in (REPO / "docs").glob("*.md") if p.resolve() not in linked)
    assert not missing, f"docs pages README.md's index does not link: {missing}"


def test_the_checks_see_broken_links(tmp_path):
    """The link check itself: a missing file, a missing anchor and a repeated heading's suffix."""
    (tmp_path / "a.md").write_text("# Top\n\n## Flags: every `job` (has)\n\n## Top\n\n```\n## not a heading\n"
                                   "[x](inside-code.md)\n```\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md) [ok](a.md#flags-every-job-has) [ok](a.md#top-1) [web](https://example.com/x) "
                    "`[code](not-a-link.md)` [gone](missing.md) [bad](a.md#not-a-heading) [self](#nowhere)\n")
    assert anchors(tmp_path / "a.md") == {"top", "flags-every-job-has", "top-1"}
    assert links(tmp_path / "a.md") == []
    assert [b.split(":")[0] for b in broken_links(page)] == ["missing.md", "a.md#not-a-heading", "#nowhere"]


def test_the_checks_see_stale_code_names(tmp_path):
    """The code-name check itself, on a tree of its own: existing paths, modules and names pass; a moved
    module, a missing file and an undefined name are reported."""
    (tmp_path / "jobs" / "pipeline").mkdir(parents=True)
    (tmp_path / "jobs" / "__init__.py").write_text("")
    (tmp_path / "jobs" / "pipeline" / "__init__.py").write_text("")
    (tmp_path / "jobs" / "pipeline" / "session.py").write_text("def get_spark():\n    pass\n")
    text = ("`jobs/pipeline/session.py`, `jobs/pipeline/session`, `jobs.pipeline.session`, "
            "`jobs.pipeline.session.get_spark`, `jobs/<name>.py`, /tmp/reput-bench/bench-result.json; stale: "
            "`jobs/pipeline/fs.py`, `jobs.pipeline.commitlog_source`, `jobs.pipeline.session.get_context`")
    assert stale_code_names(text, tmp_path) == ["jobs/pipeline/fs.py", "jobs.pipeline.commitlog_source",
                                                "jobs.pipeline.session.get_context"]


# ------------------------------------------------------------------ the README's jobs table, the CHANGELOG's releases


def job_modules(root: Path = REPO) -> set[str]:
    """The jobs: the modules jobs/*.py, but the package's own (`__init__`, `__main__`) and private helpers (`_*`)."""
    return {p.stem for p in (root / "jobs").glob("*.py") if not p.stem.startswith("_")}


def jobs_table(readme: str) -> list[str]:
    """The job names in the first column of the table in README.md's "## Jobs" section, in order."""
    parts = prose(readme).split("\n## Jobs\n", 1)
    section = parts[1].split("\n## ", 1)[0] if len(parts) == 2 else ""
    return re.findall(r"^\| `([\w-]+)` \|", section, flags=re.M)


def jobs_table_problems(readme: str, root: Path = REPO) -> list[str]:
    """What the jobs table gets wrong against jobs/: a job without a row, a row that is no job, a row twice."""
    rows, jobs = jobs_table(readme), job_modules(root)
    return ([f"no row for jobs/{j}.py" for j in sorted(jobs - set(rows))]
            + [f"{r}: no jobs/{r}.py" for r in sorted(set(rows) - jobs)]
            + [f"{r}: {rows.count(r)} rows" for r in sorted({r for r in rows if rows.count(r) > 1})])


def test_the_readme_jobs_table_names_every_job():
    problems = jobs_table_problems(README.read_text())
    assert not problems, f"README.md's jobs table against jobs/*.py: {problems}"


def test_the_jobs_table_check_sees_a_missing_or_stale_row(tmp_path):
    """The jobs-table check itself, on a tree of its own: a job without a row, a row without a job, a row twice;
    the package's own modules and private helpers are no jobs, and a table outside "## Jobs" does not count."""
    (tmp_path / "jobs").mkdir()
    for name in ("__init__", "__main__", "_script_path", "rebuild", "verify", "convert"):
        (tmp_path / "jobs" / f"{name}.py").write_text("")
    readme = ("# x\n\n| job | what |\n| --- | --- |\n| `convert` | elsewhere |\n\n## Jobs\n\n| job | what |\n"
              "| --- | --- |\n| `rebuild` | a |\n| `verify` | b |\n| `verify` | c |\n| `catalog` | d |\n\n"
              "### rebuild\n\n## Performance\n\n| `convert` | not the jobs table |\n")
    assert jobs_table(readme) == ["rebuild", "verify", "verify", "catalog"]
    assert jobs_table_problems(readme, tmp_path) == ["no row for jobs/convert.py", "catalog: no jobs/catalog.py",
                                                     "verify: 2 rows"]


RELEASE = re.compile(r"^## (\S+)(?: - (\d{4}-\d\d-\d\d))?[ \t]*$", flags=re.M)
GROUPS = ("Added", "Changed", "Fixed")


def releases(changelog: str) -> list[tuple[str, str | None, list[str]]]:
    """CHANGELOG.md's "## " sections in order: (name, date or None, its "### " group headings)."""
    text = prose(changelog)
    found = list(RELEASE.finditer(text))
    out = []
    for n, m in enumerate(found):
        body = text[m.end():found[n + 1].start() if n + 1 < len(found) else len(text)]
        out.append((m.group(1), m.group(2), re.findall(r"^### (.+?)\s*$", body, flags=re.M)))
    return out


def changelog_problems(changelog: str, version: str) -> list[str]:
    """A CHANGELOG by release: `## Unreleased` first, then `## X.Y.Z - YYYY-MM-DD` newest first (versions and dates
    falling), the newest the package version, each release grouped under Added / Changed / Fixed in that order."""
    found = releases(changelog)
    if not found or found[0][0] != "Unreleased":
        return ["the first section is not ## Unreleased"]
    problems = []
    dated = found[1:]
    for name, date, groups in dated:
        if not re.fullmatch(r"\d+\.\d+\.\d+", name) or date is None:
            problems.append(f"## {name}: not '## X.Y.Z - YYYY-MM-DD'")
        if not groups or any(g not in GROUPS for g in groups) or groups != sorted(groups, key=GROUPS.index):
            problems.append(f"## {name}: groups {groups}, not Added / Changed / Fixed")
    if problems:
        return problems
    versions = [tuple(int(x) for x in name.split(".")) for name, _, _ in dated]
    if versions != sorted(set(versions), reverse=True) or [d for _, d, _ in dated] != sorted(
            (d for _, d, _ in dated), reverse=True):
        problems.append("releases are not newest first")
    if not dated or dated[0][0] != version:
        problems.append(f"the newest release is {dated[0][0] if dated else None}, the package says {version}")
    return problems


def test_the_changelog_is_by_release_and_names_this_version():
    problems = changelog_problems((REPO / "CHANGELOG.md").read_text(), __version__)
    assert not problems, f"CHANGELOG.md: {problems}"


def test_the_changelog_check_sees_what_is_out_of_order():
    good = ("# Changelog\n\n## Unreleased\n\n### Added\n- x\n\n## 0.2.0 - 2026-11-23\n\n### Added\n- a\n\n"
            "### Fixed\n- b\n\n## 0.1.0 - 2026-11-22\n\n### Changed\n- c\n")
    assert changelog_problems(good, "0.2.0") == []
    assert changelog_problems(good, "0.3.0") == ["the newest release is 0.2.0, the package says 0.3.0"]
    assert changelog_problems(good.replace("## Unreleased\n\n### Added\n- x\n\n", ""), "0.2.0") == [
        "the first section is not ## Unreleased"]
    assert changelog_problems(good.replace("0.1.0 - 2026-11-22", "0.3.0 - 2026-11-22"), "0.2.0") == [
        "releases are not newest first"]
    assert changelog_problems(good.replace("## 0.1.0 - 2026-11-22", "## 2026-11-22"), "0.2.0") == [
        "## 2026-11-22: not '## X.Y.Z - YYYY-MM-DD'"]
    assert changelog_problems(good.replace("### Fixed\n- b", "### Session 4: fixes\n- b"), "0.2.0") == [
        "## 0.2.0: groups ['Added', 'Session 4: fixes'], not Added / Changed / Fixed"]
