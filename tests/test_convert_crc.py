"""convert checks every converted record's body CRC as its segment writers copy it (layout_kernel.hop_copy_checked,
convert.write), instead of decoding the store a second time: the copy pass's check against zlib on golden data files
with damaged bodies, read with the test's own struct; and what the writers find and list equal to what the separate
audit (scan.crc_audit, which a dry run still runs) finds and lists on stores with damaged records in several splits,
in the DLedger data files and in an upgraded store's plain segments, with the listing capped per split."""
from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from jobs.pipeline.convert.bad_crc import BY_AUDIT, BY_WRITERS
from storage_format.kernels.layout_kernel import hop_copy, hop_copy_checked
from tests.conftest import GOLDEN
from tests.helpers import run_job_lines
from tests.hostile import copy_store

HEADER = 48  # a DLedger entry's header (FORMAT.md)


def _body(record: bytes | bytearray) -> tuple[int, int]:
    """(where the body starts, its length) in a record, with the test's own offsets (FORMAT.md: bornHost at 48, then
    storeTimestamp, storeHost, reconsumeTimes, preparedTransactionOffset, bodyLength)."""
    flag = struct.unpack_from(">i", record, 36)[0]
    at = 48 + (20 if flag & 0x10 else 8) + 8 + (20 if flag & 0x20 else 8) + 4 + 8
    return at + 4, struct.unpack_from(">i", record, at)[0]


def _crc_ok(record: bytes) -> bool:
    at, n = _body(record)
    return n <= 0 or zlib.crc32(record[at:at + n]) & 0x7FFFFFFF == struct.unpack_from(">i", record, 8)[0]


def _entries(data: bytes | bytearray) -> list[tuple[int, int]]:
    """(position, size) of every entry of a DLedger data file, up to its blank or zeros."""
    found, at = [], 0
    while at + 8 <= len(data) and struct.unpack_from(">i", data, at)[0] == 1:
        size = struct.unpack_from(">i", data, at + 4)[0]
        found.append((at, size))
        at += size
    return found


def _damage(data: bytearray, positions: list[int]) -> None:
    """Flip the first body byte of the records at `positions` (record starts in `data`) whose body is not empty."""
    for p in positions:
        at, n = _body(data[p:p + 200])
        if n > 0:
            data[p + at] ^= 0x01


@pytest.mark.parametrize("case", ["dledger-clean-small-11", "dledger-upgrade-11"])
def test_the_copy_pass_checks_body_crcs_as_zlib_does(case):
    """Every 5th record's body damaged: the records hop_copy_checked names are exactly those whose CRC-32 (zlib)
    differs from the stored bodyCRC; with the check off it names none; the bytes copied are hop_copy's either way."""
    for path in sorted((GOLDEN / case / "dledger-n0" / "data").iterdir()):
        data = bytearray(path.read_bytes())
        entries = _entries(data)
        if not entries:
            continue
        _damage(data, [p + HEADER for p, _ in entries[::5]])
        expect = [i for i, (p, n) in enumerate(entries) if not _crc_ok(bytes(data[p + HEADER:p + n]))]
        assert expect, path
        arr = np.frombuffer(bytes(data), np.uint8)
        outs = {}
        for check in (True, False):
            cap = len(entries) + 1
            dst, offs, sizes, news = np.zeros(len(data), np.uint8), *(np.zeros(cap, t) for t in (np.int64, np.int32,
                                                                                                  np.int64))
            bad = np.zeros(cap, np.int64)
            n, _, _, copied, _, failed, _ = hop_copy_checked(arr, int(path.name), 0, HEADER, 2**62, dst, 0, offs,
                                                             sizes, news, bad, check)
            assert n == len(entries)
            assert bad[:failed].tolist() == (expect if check else [])
            outs[check] = dst[:copied].copy()
        dst, offs, sizes, news = np.zeros(len(data), np.uint8), *(np.zeros(len(entries) + 1, t)
                                                                    for t in (np.int64, np.int32, np.int64))
        _, _, _, copied, _, _ = hop_copy(arr, int(path.name), 0, HEADER, 2**62, dst, 0, offs, sizes, news)
        assert outs[True].tobytes() == outs[False].tobytes() == dst[:copied].tobytes()


def _damaged_store(case: str, tmp_path: Path) -> Path:
    """A copy of the case with record bodies damaged in every DLedger data file (the first four records, then every
    9th) and, in an upgraded store, in every plain segment too (every 7th record)."""
    store = copy_store(GOLDEN / case, tmp_path / "store")
    for path in sorted((store / "dledger-n0" / "data").iterdir()):
        data = bytearray(path.read_bytes())
        entries = _entries(data)
        _damage(data, [p + HEADER for p, _ in entries[:4] + entries[4::9]])
        path.write_bytes(bytes(data))
    for path in sorted((store / "commitlog").iterdir()) if (store / "commitlog").is_dir() else []:
        data = bytearray(path.read_bytes())
        starts, at = [], 0
        while at + 8 <= len(data) and struct.unpack_from(">I", data, at + 4)[0] in (0xDAA320A7, 0xAABBCCDD):
            starts.append(at)
            at += struct.unpack_from(">i", data, at)[0]
        _damage(data, starts[::7])
        path.write_bytes(bytes(data))
    return store


@pytest.mark.parametrize("case", ["dledger-clean-small-11", "dledger-upgrade-11"])
def test_the_writers_find_and_list_what_the_audit_finds(no_spark, tmp_path, capsys, monkeypatch, case):
    """The same damaged store, cut into small splits, listing 2 records per split: a dry run (the audit before
    writing) and a conversion with --accept-bad-crc (the segment writers' check, the plain segments' audit beside
    them) report the same count and the same records, each with its file, byte offset, old and new offsets and what
    the broker will do; without the flag the conversion is refused naming the first, and nothing is published."""
    monkeypatch.setattr("jobs.pipeline.scan.crc_audit.LISTED_PER_SPLIT", 2)
    store = _damaged_store(case, tmp_path)
    base = ["--store", str(store), "--broker-config", str(store / "broker.conf"), "--engine", "local",
            "--master", "local[2]", "--split-size", "64k", "--quiet"]
    reports = {}
    for mode, extra in (("audit", ["--dry-run", "--out", str(tmp_path / "dry")]),
                        ("writers", ["--accept-bad-crc", "--out", str(tmp_path / "out")])):
        code, err = run_job_lines("convert", base + extra + ["--report", str(tmp_path / f"{mode}.json")], capsys)
        assert code == 0, err
        reports[mode] = json.loads((tmp_path / f"{mode}.json").read_text())
    audit, writers = (reports[m]["plan"]["bad_crc_records"] for m in ("audit", "writers"))
    assert audit.pop("checked") == BY_AUDIT and writers.pop("checked") == BY_WRITERS
    assert writers == {**audit, "accepted": True}
    assert audit["count"] > len(audit["records"]) > 4  # the listing was capped: some splits held more than 2
    if case == "dledger-upgrade-11":  # records of the plain part (no DLedger header) are among them
        assert any("/commitlog/" in r["file"] for r in writers["records"])
    code, err = run_job_lines("convert", base + ["--out", str(tmp_path / "refused")], capsys)
    errors = [line for line in err if line.startswith("reput convert: error: ")]
    first = writers["records"][0]
    assert code == 2 and len(errors) == 1 and not (tmp_path / "refused").exists(), err
    assert f"{first['file']} at byte offset {first['byte_offset']} (old offset {first['old_offset']}" in errors[0]
    assert f"(and {writers['count'] - 1} more)" in errors[0]


def test_the_carry_less_crc_equals_zlib():
    """crc32_clmul (PCLMULQDQ folding, the copy pass's CRC on x86-64 CPUs that have it) equals zlib.crc32 on every
    length 0-300 and random longer ones at random offsets, and on the bodies of a golden data file; the copy pass uses
    it exactly where layout_kernel.has_clmul() says the CPU has it."""
    import random

    from storage_format.kernels import layout_kernel

    if not layout_kernel.has_clmul():
        pytest.skip("no PCLMULQDQ for the kernels (this CPU, or numba told to compile for another): the copy pass "
                    "uses crc_kernel.crc32 (tests/test_crc_kernel.py)")
    rng = random.Random(7)
    data = np.frombuffer(rng.randbytes(20000), np.uint8)
    for n in list(range(301)) + [rng.randrange(300, 19000) for _ in range(500)]:
        lo = rng.randrange(0, 1000)
        assert layout_kernel.crc32_clmul(data, lo, lo + n) == zlib.crc32(data[lo:lo + n].tobytes()), (lo, n)
    path = sorted((GOLDEN / "dledger-clean-small-11" / "dledger-n0" / "data").iterdir())[0]
    raw = path.read_bytes()
    arr = np.frombuffer(raw, np.uint8)
    for p, size in _entries(raw):
        at, n = _body(raw[p + HEADER:p + size])
        lo = p + HEADER + at
        assert layout_kernel.crc32_clmul(arr, lo, lo + n) == zlib.crc32(raw[lo:lo + n])
    assert layout_kernel.HAS_CLMUL and layout_kernel._body_crc is layout_kernel.crc32_clmul
