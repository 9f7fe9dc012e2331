"""A real S3-compatible server for the tests: moto's standalone server on 127.0.0.1, reached through
pyarrow (the tests' own reads and writes) and the AWS_* settings every job reads (see jobs/pipeline/io/fs.py)."""
from __future__ import annotations

import hashlib
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

START_TIMEOUT_S = 60


@dataclass
class S3Server:
    """A running server: its endpoint, the environment that points the AWS clients at it, the process."""

    endpoint: str
    env: dict[str, str]
    proc: subprocess.Popen

    def fs(self, **options) -> pafs.S3FileSystem:
        """pyarrow's S3 filesystem on this server (built from the endpoint, not from the environment)."""
        return pafs.S3FileSystem(endpoint_override=self.endpoint, access_key=self.env["AWS_ACCESS_KEY_ID"],
                                 secret_key=self.env["AWS_SECRET_ACCESS_KEY"], region="us-east-1", **options)

    def make_bucket(self, name: str) -> None:
        self.fs(allow_bucket_creation=True).create_dir(name)

    def upload(self, src: Path, dest: str) -> None:
        """Copy the local directory `src` to `bucket/prefix` (every file, byte for byte)."""
        pafs.copy_files(str(src), dest, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=self.fs())

    def tree(self, prefix: str) -> dict[str, str]:
        """{relative path: sha256} of every object under `bucket/prefix`, read back from the server."""
        fs, out = self.fs(), {}
        for info in fs.get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True)):
            if info.type == pafs.FileType.File:
                with fs.open_input_stream(info.path) as f:
                    out[info.path[len(prefix) + 1:]] = hashlib.sha256(f.read()).hexdigest()
        return out

    def read(self, key: str) -> bytes:
        with self.fs().open_input_stream(key) as f:
            return f.read()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start() -> S3Server:
    """Start `python -m moto.server` on a free port of 127.0.0.1 and wait until it answers."""
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto's S3 server did not start on {endpoint}") from None
            time.sleep(0.1)
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    return S3Server(endpoint, env, proc)
