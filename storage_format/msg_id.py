"""RocketMQ message ids: the broker's offset message id and the producer's unique key (`UNIQ_KEY`).

Both are upper-case hex of big-endian bytes (`UtilAll.bytes2string`; reading upper-cases first, so
lower-case hex is accepted here too). Scalar functions are the reference; the `*_ids`/`*_keys` forms
do the same over Arrow arrays without a per-row Python loop (host addresses, which repeat a lot, are
turned into text once per distinct value).

Offset message id (`MessageDecoder.createMessageId` / `decodeMessageId`, 4.x and 5.x): store host
address (4 bytes IPv4 or 16 bytes IPv6) + store port (4, Java int) + the record's commit-log physical
offset (8, Java long): 16 or 28 bytes, 32 or 56 hex characters. The id's length tells the family.

Unique key (`MessageClientIDSetter.createUniqID`, set by the producer, or in 5.x by the broker when
missing): a fixed prefix per client process, then a per-message part:
  client IP (4 bytes, or 16 when the client's address is IPv6 - clients that size the prefix by
  `ip.length`, as 4.9.x and 5.x do; older 4.x clients always wrote 4) + pid (2: the low 16 bits of
  the process id) + hash code of the class loader of MessageClientIDSetter (4, Java int), then the
  time since the start of the current month (4: ms, relative to the start of the month in the
  PRODUCER's default time zone, `java.util.Calendar`) + a counter (2, wraps at 65536).
  16 or 28 bytes: 32 or 56 hex characters.
The month start itself is not in the id, so a born time needs a reference time that is known to be a
little after the id was made (e.g. the record's storeTimestamp): born = start of the reference's month
+ offset, or of the previous month when that lands after the reference (+ `future_slack_ms`), as
`MessageClientIDSetter.getNearlyTimeFromID` does with "now". A reference more than about a month after
the id (e.g. a delayed message delivered weeks later keeps its original key) gives a born time whole
months late; the record's bornTimestamp is the better reference there. The offset is read unsigned:
the producer writes `(int)` of it, which is negative from the 25th, 20:31, of a month on (4.9.x/5.x clients
also turn a slightly negative difference - clock stepped back - into 0; the bytes decode the same).
"""
from __future__ import annotations

import ipaddress
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .java_hash import arrow_buffers
from .month_time import born_time_ms
from .ragged import plain_array

_HEX_DIGITS = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
_HEX_VALUE = np.full(256, 0xFF, dtype=np.uint8)  # hex character -> value, 0xFF when not a hex digit
for _i, _c in enumerate(b"0123456789ABCDEF"):
    _HEX_VALUE[_c] = _i
for _i, _c in enumerate(b"abcdef"):
    _HEX_VALUE[_c] = 10 + _i

_FAMILY_BY_HEX_LEN = {32: 4, 56: 16}

OFFSET_MSG_ID_TYPE = pa.struct(
    [("host", pa.string()), ("host_bytes", pa.binary()), ("port", pa.int32()), ("physical_offset", pa.int64())]
)
UNIQ_KEY_TYPE = pa.struct(
    [
        ("client_ip", pa.string()),
        ("pid", pa.int32()),
        ("classloader_hash", pa.int32()),
        ("born_time_offset_ms", pa.int64()),
        ("counter", pa.int32()),
        ("born_time", pa.int64()),
    ]
)


@dataclass(frozen=True)
class OffsetMsgId:
    """A decoded offset message id: where the broker stored the record."""

    host: str
    host_bytes: bytes
    port: int
    physical_offset: int


@dataclass(frozen=True)
class UniqKey:
    """A decoded producer unique key; `born_time` (epoch ms) only when a reference time was given."""

    client_ip: str
    pid: int
    classloader_hash: int
    born_time_offset_ms: int
    counter: int
    born_time: int | None


# ---------------------------------------------------------------- scalar forms (the reference)


def _host_bytes(host: bytes | str) -> bytes:
    """Address bytes from raw bytes (4 or 16) or a textual IPv4/IPv6 address."""
    if isinstance(host, str):
        try:
            return ipaddress.ip_address(host).packed
        except ValueError as exc:
            raise ValueError(f"not an IP address: {host!r}") from exc
    raw = bytes(host)
    if len(raw) not in (4, 16):
        raise ValueError(f"host address must be 4 (IPv4) or 16 (IPv6) bytes, got {len(raw)}")
    return raw


def _pack(fmt: str, value: int, what: str) -> bytes:
    """struct.pack that names the field when the value does not fit."""
    try:
        return struct.pack(fmt, value)
    except struct.error as exc:
        raise ValueError(f"{what} {value} does not fit the id's {struct.calcsize(fmt)}-byte field") from exc


def _unhex(text: str, what: str) -> bytes:
    """Bytes of a 32- or 56-character hex id, with a ValueError that says what is wrong."""
    if not isinstance(text, str):
        raise ValueError(f"{what} must be a str, got {type(text).__name__}")
    if len(text) not in _FAMILY_BY_HEX_LEN:
        raise ValueError(f"{what} {text!r} has {len(text)} characters; expected 32 (IPv4) or 56 (IPv6)")
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raw = b""
    if len(raw) * 2 != len(text):  # fromhex also skips whitespace: insist on exactly the hex digits
        raise ValueError(f"{what} {text!r} is not hexadecimal")
    return raw


def encode_offset_msg_id(host: bytes | str, port: int, offset: int) -> str:
    """MessageDecoder.createMessageId: host address + port (int) + physical offset (long), upper-case hex."""
    raw = _host_bytes(host)
    return (raw + _pack(">i", port, "port") + _pack(">q", offset, "physical offset")).hex().upper()


def decode_offset_msg_id(msg_id: str) -> OffsetMsgId:
    """MessageDecoder.decodeMessageId: split an offset message id into host, port and physical offset."""
    raw = _unhex(msg_id, "offset message id")
    width = _FAMILY_BY_HEX_LEN[len(msg_id)]
    port, offset = struct.unpack_from(">iq", raw, width)
    host = raw[:width]
    return OffsetMsgId(str(ipaddress.ip_address(host)), host, port, offset)


def encode_uniq_key(
    client_ip: bytes | str, pid: int, classloader_hash: int, born_time_offset_ms: int, counter: int
) -> str:
    """MessageClientIDSetter.createUniqID from its parts (pid and counter are cut to 16 bits as Java's
    `(short)` does; the offset must fit 32 bits, signed or unsigned)."""
    raw = _host_bytes(client_ip)
    if not -(2**31) <= born_time_offset_ms < 2**32:
        raise ValueError(f"born time offset {born_time_offset_ms} does not fit 32 bits")
    offset = born_time_offset_ms & 0xFFFFFFFF
    body = struct.pack(">H", pid & 0xFFFF) + _pack(">i", classloader_hash, "classloader hash")
    return (raw + body + struct.pack(">IH", offset, counter & 0xFFFF)).hex().upper()


def decode_uniq_key(
    uniq: str, reference_ms: int | None = None, tz: str = "UTC", future_slack_ms: int = 0
) -> UniqKey:
    """Split a UNIQ_KEY into its parts; with `reference_ms`, also its born time (see module docstring)."""
    raw = _unhex(uniq, "unique key")
    width = _FAMILY_BY_HEX_LEN[len(uniq)]
    pid, loader, offset, counter = struct.unpack_from(">HiIH", raw, width)
    born = None
    if reference_ms is not None:
        ref = np.array([reference_ms], dtype=np.int64)
        born = int(born_time_ms(np.array([offset], dtype=np.int64), ref, tz, future_slack_ms)[0])
    return UniqKey(str(ipaddress.ip_address(raw[:width])), pid, loader, offset, counter, born)


# ---------------------------------------------------------------- vectorised helpers


def _string_array(arr: pa.Array | pa.ChunkedArray | Sequence[str | None]) -> pa.Array:
    """One Arrow string/binary array from an Arrow array, chunked array, dictionary or Python sequence."""
    if not isinstance(arr, (pa.Array, pa.ChunkedArray)):
        arr = pa.array(arr, type=pa.string())
    return plain_array(arr)


def _valid_mask(arr: pa.Array) -> np.ndarray:
    """True where the Arrow array is not null."""
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    return arr.is_valid().to_numpy(zero_copy_only=False)


def _parse_hex_ids(
    arr: pa.Array, what: str, on_error: str
) -> tuple[np.ndarray, dict[int, tuple[np.ndarray, np.ndarray]]]:
    """Check every id's length and digits; return the usable-row mask and, per address width,
    (row numbers, bytes matrix). Bad rows raise (on_error="raise") or become null (on_error="null")."""
    if on_error not in ("raise", "null"):
        raise ValueError(f"on_error must be 'raise' or 'null', got {on_error!r}")
    data, offsets = arrow_buffers(arr)
    lengths = np.diff(offsets)
    usable = _valid_mask(arr)
    groups: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    bad = usable & ~np.isin(lengths, list(_FAMILY_BY_HEX_LEN))
    for chars, width in _FAMILY_BY_HEX_LEN.items():
        rows = np.flatnonzero(usable & (lengths == chars))
        digits = _HEX_VALUE[data[offsets[rows, None] + np.arange(chars)]]
        ok = np.all(digits != 0xFF, axis=1)
        bad[rows[~ok]] = True
        rows, digits = rows[ok], digits[ok]
        groups[width] = (rows, (digits[:, 0::2] << 4) | digits[:, 1::2])
    if np.any(bad):
        first = int(np.flatnonzero(bad)[0])
        if on_error == "raise":
            value = arr[first].as_py()
            raise ValueError(
                f"{int(bad.sum())} malformed {what}(s); first at row {first}: {value!r} "
                "(expected 32 or 56 hexadecimal characters)"
            )
        usable &= ~bad
    return usable, groups


def _big_endian(matrix: np.ndarray, start: int, size: int, kind: str) -> np.ndarray:
    """Big-endian integers from columns [start, start+size) of a byte matrix ('i' signed, 'u' unsigned)."""
    cols = np.ascontiguousarray(matrix[:, start : start + size])
    return cols.view(f">{kind}{size}").reshape(-1).astype(np.int64)


def _ip_texts(n: int, groups: dict[int, tuple[np.ndarray, np.ndarray]]) -> pa.Array:
    """Textual address per row (null where a row has none), formatting each distinct address once."""
    texts: list[str] = []
    index = np.full(n, -1, dtype=np.int64)
    for rows, matrix in groups.values():
        if rows.size == 0:
            continue
        keys = np.ascontiguousarray(matrix).view(np.dtype((np.void, matrix.shape[1]))).reshape(-1)
        distinct, inverse = np.unique(keys, return_inverse=True)
        index[rows] = len(texts) + inverse.reshape(-1)
        texts.extend(str(ipaddress.ip_address(key.tobytes())) for key in distinct)
    return pa.array(texts, type=pa.string()).take(pa.array(index, mask=index < 0))


def _variable_binary(
    n: int, parts: list[tuple[np.ndarray, np.ndarray]], valid: np.ndarray, kind: pa.DataType
) -> pa.Array:
    """Binary/string Arrow array whose row r is the byte row of whichever part lists r; null where not valid."""
    widths = np.zeros(n, dtype=np.int64)
    for rows, matrix in parts:
        widths[rows] = matrix.shape[1]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(widths, out=offsets[1:])
    data = np.empty(int(offsets[-1]), dtype=np.uint8)
    for rows, matrix in parts:
        if rows.size:
            data[offsets[rows, None] + np.arange(matrix.shape[1])] = matrix
    large = offsets[-1] >= 2**31
    kind = {pa.string(): pa.large_string(), pa.binary(): pa.large_binary()}[kind] if large else kind
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    offset_buf = pa.py_buffer(offsets if large else offsets.astype(np.int32))
    return pa.Array.from_buffers(kind, n, [validity, offset_buf, pa.py_buffer(data)])


def _hex_matrix(matrix: np.ndarray) -> np.ndarray:
    """Upper-case hex characters of each byte row (m, 2k)."""
    out = np.empty((matrix.shape[0], matrix.shape[1] * 2), dtype=np.uint8)
    out[:, 0::2] = _HEX_DIGITS[matrix >> 4]
    out[:, 1::2] = _HEX_DIGITS[matrix & 0x0F]
    return out


# ---------------------------------------------------------------- vectorised forms


def decode_offset_msg_ids(
    arr: pa.Array | pa.ChunkedArray | Sequence[str | None], on_error: str = "raise"
) -> pa.StructArray:
    """Vectorised `decode_offset_msg_id` over a string array: struct<host, host_bytes, port, physical_offset>.

    Null ids give null rows; malformed ids raise ValueError (first bad row named) or, with
    on_error="null", give null rows.
    """
    arr = _string_array(arr)
    n = len(arr)
    usable, groups = _parse_hex_ids(arr, "offset message id", on_error)
    hosts = {w: (rows, m[:, :w]) for w, (rows, m) in groups.items()}
    port = np.zeros(n, dtype=np.int32)
    offset = np.zeros(n, dtype=np.int64)
    for width, (rows, matrix) in groups.items():
        port[rows] = _big_endian(matrix, width, 4, "i")
        offset[rows] = _big_endian(matrix, width + 4, 8, "i")
    mask = pa.array(~usable)
    children = [
        _ip_texts(n, hosts),
        _variable_binary(n, list(hosts.values()), usable, pa.binary()),
        pa.array(port, mask=~usable),
        pa.array(offset, mask=~usable),
    ]
    return pa.StructArray.from_arrays(children, fields=list(OFFSET_MSG_ID_TYPE), mask=mask)


def _host_rows(hosts: object) -> tuple[np.ndarray, dict[int, np.ndarray], np.ndarray]:
    """Normalise hosts (n x 4 / n x 16 uint8 matrix, Arrow binary/string array, or a sequence of
    bytes/str) to (valid mask, {width: row numbers}, n x 16 byte matrix holding each row's address)."""
    if isinstance(hosts, np.ndarray) and hosts.ndim == 2:
        if hosts.dtype != np.uint8 or hosts.shape[1] not in (4, 16):
            raise ValueError("a host matrix must be uint8 with 4 or 16 columns")
        n = hosts.shape[0]
        matrix = np.zeros((n, 16), dtype=np.uint8)
        matrix[:, : hosts.shape[1]] = hosts
        return np.ones(n, dtype=bool), {hosts.shape[1]: np.arange(n)}, matrix
    if not isinstance(hosts, (pa.Array, pa.ChunkedArray)):
        items = list(hosts)
        kind = pa.string() if any(isinstance(h, str) for h in items) else pa.binary()
        hosts = pa.array([h if h is None or isinstance(h, str) else bytes(h) for h in items], type=kind)
    arr = _string_array(hosts)
    if pa.types.is_fixed_size_binary(arr.type):
        arr = arr.cast(pa.binary())
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type) or pa.types.is_string_view(arr.type):
        text = arr.cast(pa.string())
        distinct = pc.unique(text.drop_null())
        packed = pa.array([_host_bytes(t) for t in distinct.to_pylist()], type=pa.binary())
        arr = packed.take(pc.index_in(text, value_set=distinct))
    valid = _valid_mask(arr)
    data, offsets = arrow_buffers(arr)
    lengths = np.diff(offsets)
    wrong = valid & (lengths != 4) & (lengths != 16)
    if np.any(wrong):
        first = int(np.flatnonzero(wrong)[0])
        raise ValueError(f"host address must be 4 or 16 bytes; row {first} has {int(lengths[first])}")
    matrix = np.zeros((len(arr), 16), dtype=np.uint8)
    by_width = {}
    for width in (4, 16):
        rows = np.flatnonzero(valid & (lengths == width))
        matrix[rows, :width] = data[offsets[rows, None] + np.arange(width)]
        by_width[width] = rows
    return valid, by_width, matrix


def _int_input(values: object, n: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values, valid mask) of an Arrow or numpy integer column of length n."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        valid = _valid_mask(arr)
        data = arr.fill_null(0).to_numpy(zero_copy_only=False)
    else:
        data = np.asarray(values)
        valid = np.ones(data.shape, dtype=bool)
    if data.shape != (n,):
        raise ValueError(f"{what} has {data.size} values, hosts have {n}")
    if data.size and not np.issubdtype(data.dtype, np.integer):
        raise ValueError(f"{what} must be integers, got {data.dtype}")
    return data.astype(np.int64), valid


def encode_offset_msg_ids(hosts: object, ports: object, offsets: object) -> pa.StringArray:
    """Vectorised `encode_offset_msg_id`: hosts (addresses as bytes, text, or an n x 4 / n x 16 uint8
    matrix), ports (int32 range) and physical offsets (int64). A null in any input gives a null id."""
    valid, by_width, host_matrix = _host_rows(hosts)
    n = valid.size
    port, port_ok = _int_input(ports, n, "ports")
    offset, offset_ok = _int_input(offsets, n, "offsets")
    if np.any((port < -(2**31)) | (port >= 2**31)):
        raise ValueError("ports must fit a Java int (signed 32 bits)")
    valid &= port_ok & offset_ok
    port_bytes = port.astype(">i4").view(np.uint8).reshape(n, 4)
    offset_bytes = offset.astype(">i8").view(np.uint8).reshape(n, 8)
    parts = []
    for width, rows in by_width.items():
        rows = rows[valid[rows]]
        raw = np.concatenate([host_matrix[rows, :width], port_bytes[rows], offset_bytes[rows]], axis=1)
        parts.append((rows, _hex_matrix(raw)))
    return _variable_binary(n, parts, valid, pa.string())


def decode_uniq_keys(
    arr: pa.Array | pa.ChunkedArray | Sequence[str | None],
    reference_ms: np.ndarray | None = None,
    tz: str = "UTC",
    future_slack_ms: int = 0,
    on_error: str = "raise",
) -> pa.StructArray:
    """Vectorised `decode_uniq_key`: struct<client_ip, pid, classloader_hash, born_time_offset_ms,
    counter, born_time>; born_time is null without `reference_ms` (one epoch-ms value per row, or a
    null in an Arrow reference column). Null keys give null rows; malformed keys raise ValueError
    (first bad row named) or, with on_error="null", give null rows."""
    arr = _string_array(arr)
    n = len(arr)
    usable, groups = _parse_hex_ids(arr, "unique key", on_error)
    pid = np.zeros(n, dtype=np.int32)
    loader = np.zeros(n, dtype=np.int32)
    offset = np.zeros(n, dtype=np.int64)
    counter = np.zeros(n, dtype=np.int32)
    for width, (rows, matrix) in groups.items():
        pid[rows] = _big_endian(matrix, width, 2, "u")
        loader[rows] = _big_endian(matrix, width + 2, 4, "i")
        offset[rows] = _big_endian(matrix, width + 6, 4, "u")
        counter[rows] = _big_endian(matrix, width + 10, 2, "u")
    born_ok = np.zeros(n, dtype=bool)
    born = np.zeros(n, dtype=np.int64)
    if reference_ms is not None:
        ref, ref_ok = _int_input(reference_ms, n, "reference_ms")
        born_ok = usable & ref_ok
        born[born_ok] = born_time_ms(offset[born_ok], ref[born_ok], tz, future_slack_ms)
    ips = {w: (rows, m[:, :w]) for w, (rows, m) in groups.items()}
    children = [
        _ip_texts(n, ips),
        pa.array(pid, mask=~usable),
        pa.array(loader, mask=~usable),
        pa.array(offset, mask=~usable),
        pa.array(counter, mask=~usable),
        pa.array(born, mask=~born_ok),
    ]
    return pa.StructArray.from_arrays(children, fields=list(UNIQ_KEY_TYPE), mask=pa.array(~usable))


def offset_msg_ids_one_host(host_and_port: bytes, offsets: np.ndarray) -> pa.StringArray:
    """`encode_offset_msg_ids` for records of one store host: the id's fixed prefix (address + port bytes, 8 or
    20) once, then each offset's 16 hex digits, built straight into the Arrow buffers (convert's msgId map)."""
    prefix = _hex_matrix(np.frombuffer(host_and_port, np.uint8)[None, :])[0]
    offsets = np.asarray(offsets, np.int64)
    raw = offsets.astype(">i8").view(np.uint8).reshape(-1, 8)
    width = len(prefix) + 16
    out = np.empty((len(offsets), width), np.uint8)
    out[:, :len(prefix)] = prefix
    out[:, len(prefix)::2] = _HEX_DIGITS[raw >> 4]
    out[:, len(prefix) + 1::2] = _HEX_DIGITS[raw & 15]
    ends = np.arange(0, width * len(offsets) + 1, width, dtype=np.int32)
    return pa.StringArray.from_buffers(len(offsets), pa.py_buffer(ends), pa.py_buffer(out))
