"""`python -m jobs.pipeline.package dist/reput.zip`: the reput code as one zip for `spark-submit --py-files`.

Executors on a cluster import storage_format, udfs and jobs from this zip (the driver script itself,
e.g. jobs/rebuild.py, is passed to spark-submit separately). Only Python sources go in, with fixed
timestamps, so the same tree gives the same zip bytes.
"""
from __future__ import annotations

import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("storage_format", "jobs", "udfs")
FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def package_files(repo: Path = REPO) -> list[Path]:
    """The .py files of the packages, relative to the repo, in a stable order."""
    files = []
    for package in PACKAGES:
        root = repo / package
        if root.is_dir():
            files += [p.relative_to(repo) for p in root.rglob("*.py") if "__pycache__" not in p.parts]
    return sorted(files, key=lambda p: p.as_posix())


def build_zip(dest: Path, repo: Path = REPO) -> list[str]:
    """Write the zip to `dest` (via a temporary name, then rename); returns the archived names."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    names = []
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for rel in package_files(repo):
            info = zipfile.ZipInfo(rel.as_posix(), date_time=FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, (repo / rel).read_bytes())
            names.append(info.filename)
    tmp.replace(dest)
    return names


def main(argv: list[str] | None = None) -> int:
    """Command line: build the zip named by the one argument."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m jobs.pipeline.package DEST.zip", file=sys.stderr)
        return 2
    names = build_zip(Path(args[0]))
    print(f"wrote {args[0]}: {len(names)} files from {', '.join(PACKAGES)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
