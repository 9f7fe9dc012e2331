"""The documentation holds together: README.md stays a front door (at most 250 lines), every relative link in
README.md, CHANGELOG.md and docs/*.md points at a file that exists (and at a heading there, for `#anchor`
links), and every page of docs/ is reachable from README.md's index."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

README = REPO / "README.md"
PAGES = sorted([README, REPO / "CHANGELOG.md", *(REPO / "docs").glob("*.md")])
README_MAX_LINES = 250

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


def test_readme_is_a_front_door():
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: keep it a front door, move detail to docs/"
    for command in ("make demo", "make test"):
        assert command in README.read_text()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page):
    assert not broken_links(page)


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
