"""`python -m jobs.pipeline.runtime.package dist/reput.zip [--env dist/reput-env.tar.gz]`: what `spark-submit`
ships to a cluster (the env is built again only when stale).

* The reput code as one zip for `--py-files`: executors import storage_format, udfs and jobs from it (the
  driver script itself, e.g. jobs/rebuild.py, is passed to spark-submit separately). Only Python sources
  go in, with fixed timestamps, so the same tree gives the same zip bytes.
* With `--env`: a Python environment for `--archives ENV.tar.gz#env` (`spark.pyspark.python=./env/bin/python`):
  a fresh venv with pyproject's dependencies except pyspark (executors use their Spark's own pyspark, which
  must match the driver's), packed with venv-pack. Like every venv it uses the interpreter it was made
  with: executors need the same Python at the same path (venv-pack does not ship the interpreter).
  `./env` in the repository links to the packed venv for the driver's own Python workers.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
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
    """Write the zip to `dest` (via a temporary name of this process, then rename: two processes building it at once,
    like make test-cluster's two xdist workers, each rename the same bytes in); returns the archived names."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.tmp-{os.getpid()}")
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


NOT_SHIPPED = ("pyspark",)  # executors run their Spark's own pyspark (python/lib/pyspark.zip)
SHIPPED_EXTRAS = ("rocksdb",)  # a RocksDB store's tasks open its database on the executors


def env_requirements(repo: Path = REPO) -> list[str]:
    """pyproject's dependencies that executors need (all but pyspark, with SHIPPED_EXTRAS), as pip requirements."""
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    deps = project["dependencies"] + [d for e in SHIPPED_EXTRAS for d in project["optional-dependencies"][e]]
    return [d for d in deps if not any(d.startswith(n) and not d[len(n):][:1].isalnum() for n in NOT_SHIPPED)]


def build_env(dest: Path, work: Path, repo: Path = REPO, python: str = sys.executable) -> list[str]:
    """A venv at `work` with env_requirements() installed, packed by venv-pack into `dest` (tar.gz,
    written under a temporary name, then renamed); returns the requirements."""
    import venv_pack

    reqs = env_requirements(repo)
    shutil.rmtree(work, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(work)], check=True)
    subprocess.run([str(work / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    *reqs], check=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp.tar.gz")
    venv_pack.pack(prefix=str(work), output=str(tmp), format="tar.gz", force=True, compress_level=1)
    tmp.replace(dest)
    link_driver_env(work, repo)
    return reqs


def link_driver_env(work: Path, repo: Path = REPO) -> Path:
    """`./env` in the repository -> the venv that was packed. spark.pyspark.python (`./env/bin/python`)
    also starts the driver's own Python workers (e.g. Spark's planner for Python data sources), from
    the directory spark-submit runs in: there it must find the same environment."""
    link = repo / "env"
    if link.is_symlink():
        link.unlink()
    link.symlink_to(os.path.relpath(work, repo), target_is_directory=True)
    return link


def env_is_stale(dest: Path, repo: Path = REPO) -> bool:
    """True when the packed env is missing or older than pyproject.toml, or ./env is missing."""
    return (not dest.exists() or dest.stat().st_mtime < (repo / "pyproject.toml").stat().st_mtime
            or not (repo / "env" / "bin" / "python").exists())


def main(argv: list[str] | None = None) -> int:
    """Command line: build the zip named by the first argument (and the packed env after --env)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 3) or len(args) == 3 and args[1] != "--env":
        print("usage: python -m jobs.pipeline.runtime.package DEST.zip [--env ENV.tar.gz]", file=sys.stderr)
        return 2
    names = build_zip(Path(args[0]))
    print(f"wrote {args[0]}: {len(names)} files from {', '.join(PACKAGES)}")
    if len(args) == 3 and not env_is_stale(Path(args[2])):
        print(f"{args[2]} is up to date (newer than pyproject.toml; ./env present)")
    elif len(args) == 3:
        env = Path(args[2])
        reqs = build_env(env, REPO / "build" / "reput-env")
        print(f"wrote {env}: a venv of {sys.executable} with {', '.join(reqs)}; ./env links to it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
