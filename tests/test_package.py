"""What spark-submit ships (jobs.pipeline.runtime.package): the code zip, the packed environment's requirements,
and conf/spark-defaults.conf naming exactly those files. The cluster test submits with them."""
from __future__ import annotations

import tomllib
import zipfile

from jobs.pipeline.runtime.package import build_zip, env_requirements, link_driver_env
from tests.conftest import REPO


def spark_defaults() -> dict[str, str]:
    """conf/spark-defaults.conf as a dict (whitespace-separated key and value, # comments)."""
    out = {}
    for line in (REPO / "conf" / "spark-defaults.conf").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, value = line.split(None, 1)
            out[key] = value.strip()
    return out


def test_spark_defaults_ship_the_packed_env_and_the_zip():
    conf = spark_defaults()
    assert conf["spark.archives"] == "dist/reput-env.tar.gz#env"
    assert conf["spark.pyspark.python"] == "./env/bin/python"
    assert conf["spark.submit.pyFiles"] == "dist/reput.zip"
    assert "/opt/reput" not in (REPO / "conf" / "spark-defaults.conf").read_text()


def test_env_has_every_dependency_but_pyspark():
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    reqs = env_requirements()
    assert [d for d in deps if d not in reqs] == [d for d in deps if d.startswith("pyspark")]
    assert any(r.startswith("pyarrow") for r in reqs) and any(r.startswith("numpy") for r in reqs)


def test_env_ships_the_rocksdb_extra():
    """Executors open a RocksDB store's database (rebuild's key-range tasks): the extra travels in the env."""
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["rocksdb"]
    assert extra and set(extra) <= set(env_requirements())


def test_zip_is_deterministic_and_holds_every_job(tmp_path):
    a, b = tmp_path / "a.zip", tmp_path / "b.zip"
    names = build_zip(a)
    build_zip(b)
    assert a.read_bytes() == b.read_bytes()
    jobs = {p.relative_to(REPO).as_posix() for p in (REPO / "jobs").glob("*.py")}
    assert jobs <= set(names) and set(zipfile.ZipFile(a).namelist()) == set(names)


def test_driver_env_link_is_relative(tmp_path):
    (tmp_path / "build" / "reput-env" / "bin").mkdir(parents=True)
    link = link_driver_env(tmp_path / "build" / "reput-env", tmp_path)
    assert link == tmp_path / "env" and str(link.readlink()) == "build/reput-env"
    assert link_driver_env(tmp_path / "build" / "reput-env", tmp_path).resolve() == tmp_path / "build" / "reput-env"
