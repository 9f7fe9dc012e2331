"""The documentation holds together: README.md stays a front door (at most 250 lines), every relative link in
README.md, CHANGELOG.md and docs/*.md points at a file that exists (and at a heading there, for `#anchor`
links), every page of docs/ is reachable from README.md's index, and the code the manual names (paths such
as `jobs/rebuild.py`, modules such as `jobs.pipeline.session` or `python -m storage_format.kernels.warm`)
exists. CHANGELOG.md and docs/performance-history.md keep the names of their time and are not held to that."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

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
