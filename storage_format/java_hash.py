"""Java `String.hashCode()` for millions of UTF-8 strings at once (tagsCode, index key hashes).

The hash runs over UTF-16 code units (a character outside the BMP is a surrogate pair, two units) with
signed 32-bit wrap-around. All array arithmetic here is uint32, whose wrap-around is exactly mod 2^32.

Bytes that are not valid UTF-8 hash like Java's `new String(bytes, UTF_8)` (JDK 17, checked against the
real JDK on 300,000 random byte strings): every malformed sequence becomes one U+FFFD, where a malformed
sequence is the Unicode "maximal subpart" (the longest prefix of a well-formed sequence, at least one
byte), with one JDK quirk: an encoded surrogate `ED A0..BF [80..BF]` is ONE malformed sequence of up to
three bytes (the Unicode rule, and Python's decoder, would make each byte its own U+FFFD). Each string
is decoded on its own: a sequence never runs over the end of its string.
"""
from __future__ import annotations

import codecs

import numpy as np
import pyarrow as pa

INT32_MIN = -(2**31)
_MASK32 = 0xFFFFFFFF
INV31 = pow(31, -1, 2**32)  # 31 is odd, so it has an inverse mod 2^32
_REPLACEMENT = 0xFFFD
# Bytes of input per vectorised pass: bounds the temporary arrays (a few int64 per byte).
CHUNK_BYTES = 4 << 20


def _java_utf8_errors(err: UnicodeError) -> tuple[str, int]:
    """Codec error handler: one U+FFFD per malformed sequence, as JDK 17's UTF-8 String decoder does."""
    if not isinstance(err, UnicodeDecodeError):
        raise err
    raw, start = err.object, err.start
    if raw[start] == 0xED and start + 1 < len(raw) and 0xA0 <= raw[start + 1] <= 0xBF:
        # JDK quirk: an encoded surrogate is one malformed sequence (Python would split it per byte).
        has_third = start + 2 < len(raw) and 0x80 <= raw[start + 2] <= 0xBF
        return "\ufffd", start + (3 if has_third else 2)
    return "\ufffd", err.end


_ERRORS_NAME = "reput-java-utf8"
codecs.register_error(_ERRORS_NAME, _java_utf8_errors)


def decode_utf8_like_java(raw: bytes) -> str:
    """Decode UTF-8 bytes to the string Java's `new String(raw, UTF_8)` would give (see module doc)."""
    return bytes(raw).decode("utf-8", _ERRORS_NAME)


def java_hash(s: str) -> int:
    """Scalar reference: Java `s.hashCode()` as a signed int (lone surrogates count as one unit each)."""
    units = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & _MASK32
    return h - (1 << 32) if h >= 1 << 31 else h


def java_hash_bytes(raw: bytes) -> int:
    """Scalar reference: Java `new String(raw, UTF_8).hashCode()`."""
    return java_hash(decode_utf8_like_java(raw))


def index_key_hash_scalar(h: int) -> int:
    """IndexFile.indexKeyHashMethod: `Math.abs(hash)`, and Integer.MIN_VALUE (whose abs is negative) -> 0."""
    return 0 if h == INT32_MIN else abs(h)


def index_key_hash(h: np.ndarray) -> np.ndarray:
    """Vectorised `index_key_hash_scalar` over an int32 array."""
    h = np.asarray(h, dtype=np.int32)
    return np.where(h == np.int32(INT32_MIN), np.int32(0), np.abs(h)).astype(np.int32)


def _pow_u32(base: int, exponent: np.ndarray) -> np.ndarray:
    """base ** exponent mod 2^32 elementwise (exponentiation by squaring over the whole array)."""
    e = np.asarray(exponent, dtype=np.int64)
    if e.size and int(e.min()) < 0:
        raise ValueError("negative exponent")
    out = np.ones(e.shape, dtype=np.uint32)
    square = base & _MASK32
    top = int(e.max()) if e.size else 0
    bit = 0
    while (top >> bit) != 0:
        hit = ((e >> bit) & 1).astype(bool)
        out[hit] *= np.uint32(square)  # array op: wraps mod 2^32
        square = (square * square) & _MASK32
        bit += 1
    return out


def pow31(n: np.ndarray) -> np.ndarray:
    """31 ** n mod 2^32 for an array of non-negative exponents, as uint32."""
    return _pow_u32(31, n)


def java_hash_concat(h_left: np.ndarray, h_right: np.ndarray, len16_right: np.ndarray) -> np.ndarray:
    """hash(left + right) from the parts: h_left * 31^len16(right) + h_right (mod 2^32), as int32."""
    left = np.asarray(h_left, dtype=np.int32).view(np.uint32)
    right = np.asarray(h_right, dtype=np.int32).view(np.uint32)
    out = left * pow31(len16_right) + right
    return np.asarray(out, dtype=np.uint32).view(np.int32)


def _as_buffers(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Check and normalise a (uint8 data, n+1 offsets) pair; offsets must be non-decreasing and in range."""
    data = np.asarray(data)
    if data.dtype != np.uint8:
        raise TypeError(f"data must be uint8, got {data.dtype}")
    data = data.reshape(-1)
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1)
    if offsets.size == 0:
        raise ValueError("offsets must hold n + 1 entries (at least one)")
    if offsets[0] < 0 or offsets[-1] > data.size or (offsets.size > 1 and np.any(np.diff(offsets) < 0)):
        raise ValueError("offsets must be non-decreasing and lie within data")
    return data, offsets


def _unit_prefix(region: np.ndarray) -> np.ndarray:
    """Running UTF-16 length before each byte (n + 1 entries), exact for valid UTF-8."""
    per_byte = ((region & 0xC0) != 0x80).astype(np.int64) + (region >= 0xF0)
    prefix = np.zeros(region.size + 1, dtype=np.int64)
    np.cumsum(per_byte, out=prefix[1:])
    return prefix


def utf16_lengths(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """UTF-16 length of each UTF-8 string data[offsets[i]:offsets[i+1]]: non-continuation bytes plus
    4-byte lead bytes (>= 0xF0). Exact for valid UTF-8; for malformed bytes see `java_utf16_lengths`."""
    data, offsets = _as_buffers(data, offsets)
    lo = int(offsets[0])
    prefix = _unit_prefix(data[lo : int(offsets[-1])])
    return np.diff(prefix[offsets - lo])


# Decoder tables by lead byte: sequence length (1 also for bytes that can never start one) and the
# allowed range of the second byte. ED allows A0..BF here: the JDK consumes an encoded surrogate as
# one malformed sequence, and `_decode_java` marks that sequence invalid afterwards.
_NEED = np.zeros(256, dtype=np.int8)
_NEED[0x00:0x80] = 1
_NEED[0xC0:0xC2] = 1
_NEED[0xC2:0xE0] = 2
_NEED[0xE0:0xF0] = 3
_NEED[0xF0:0xF5] = 4
_NEED[0xF5:0x100] = 1
_SECOND_LO = np.full(256, 0x80, dtype=np.uint8)
_SECOND_HI = np.full(256, 0xBF, dtype=np.uint8)
_SECOND_LO[0xE0] = 0xA0
_SECOND_LO[0xF0] = 0x90
_SECOND_HI[0xF4] = 0x8F


def _decode_java(region: np.ndarray, rel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised JDK-exact UTF-8 decode of every string: (UTF-16 units as uint32, unit offsets)."""
    size = region.size
    index = np.int32 if size < 2**31 - 8 else np.int64
    lengths = np.diff(rel)
    pos = np.arange(size, dtype=index)
    avail = np.repeat(rel[1:].astype(index), lengths) - pos  # bytes left in the string holding each byte
    padded = np.zeros(size + 3, dtype=np.uint8)
    padded[:size] = region
    b1, b2, b3 = padded[1 : size + 1], padded[2 : size + 2], padded[3 : size + 3]
    cont = (region & 0xC0) == 0x80
    need = _NEED[region]
    ok1 = (avail >= 2) & (b1 >= _SECOND_LO[region]) & (b1 <= _SECOND_HI[region])
    ok2 = ok1 & (avail >= 3) & ((b2 & 0xC0) == 0x80)
    ok3 = ok2 & (avail >= 4) & ((b3 & 0xC0) == 0x80)
    # Bytes consumed by the sequence starting here (for lead bytes): its maximal subpart.
    take = np.ones(size, dtype=index)
    take[(need >= 2) & ok1] = 2
    take[(need >= 3) & ok2] = 3
    take[(need == 4) & ok3] = 4
    # A continuation byte belongs to the nearest lead before it when that lead's sequence reaches it;
    # a lead in an earlier string never reaches (its `take` stops at its string's end).
    lead_at = np.maximum.accumulate(np.where(cont, index(-1), pos))
    where_cont = np.flatnonzero(cont)
    lead_of = lead_at[where_cont]
    begins = np.ones(size, dtype=bool)
    begins[where_cont] = ~((lead_of >= 0) & (where_cont - lead_of < take[np.maximum(lead_of, 0)]))
    # Decode the characters that begin at `at`: a valid sequence gives its code point, anything else U+FFFD.
    at = np.flatnonzero(begins)
    lead = region[at].astype(np.int32)
    n = need[at]
    done = take[at] == n
    valid = np.where(n == 1, lead < 0x80, done & ~((lead == 0xED) & (b1[at] >= 0xA0)))
    c1 = (b1[at] & 0x3F).astype(np.int32)
    c2 = (b2[at] & 0x3F).astype(np.int32)
    c3 = (b3[at] & 0x3F).astype(np.int32)
    cp = np.full(at.size, _REPLACEMENT, dtype=np.int32)
    for width, value in (
        (1, lead),
        (2, ((lead & 0x1F) << 6) | c1),
        (3, ((lead & 0x0F) << 12) | (c1 << 6) | c2),
        (4, ((lead & 0x07) << 18) | (c1 << 12) | (c2 << 6) | c3),
    ):
        pick = valid & (n == width)
        cp[pick] = value[pick]
    pair = valid & (n == 4)  # outside the BMP: a surrogate pair
    units_here = np.zeros(size, dtype=np.int64)
    units_here[at] = 1 + pair
    unit_prefix = np.zeros(size + 1, dtype=np.int64)
    np.cumsum(units_here, out=unit_prefix[1:])
    first = unit_prefix[at]
    units = np.empty(int(unit_prefix[-1]), dtype=np.uint32)
    units[first] = cp
    high = cp[pair] - 0x10000
    units[first[pair]] = 0xD800 + (high >> 10)
    units[first[pair] + 1] = 0xDC00 + (high & 0x3FF)
    return units, unit_prefix[rel]


def _code_units(region: np.ndarray, rel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """UTF-16 code units of all strings of a region (uint8 or uint32) and each string's unit offsets."""
    if not np.any(region >= 0x80):
        return region, rel  # ASCII: the bytes are the code units
    cont = (region & 0xC0) == 0x80
    inside = rel[rel < region.size]
    if not np.any(cont[inside]):  # no string starts or ends inside a character
        try:
            text = region.tobytes().decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None:  # whole region valid and cut at character starts: every string is valid
            units = np.frombuffer(text.encode("utf-16-be"), dtype=">u2").astype(np.uint32)
            return units, _unit_prefix(region)[rel]
    return _decode_java(region, rel)


# (31^e, 31^-e) mod 2^32 for e < len, grown on demand, shared by all calls; one tuple so that a
# concurrent caller never sees the two tables at different sizes.
_TABLES = (np.ones(1, dtype=np.uint32), np.ones(1, dtype=np.uint32))


def _power_tables(count: int) -> tuple[np.ndarray, np.ndarray]:
    """Tables of 31^e and 31^-e (mod 2^32) for e = 0..count, cached across calls."""
    global _TABLES
    tables = _TABLES
    if tables[0].size <= count:
        size = max(count + 1, 2 * tables[0].size, CHUNK_BYTES + 1)
        powers = np.full(size, 31, dtype=np.uint32)
        inverse = np.full(size, INV31, dtype=np.uint32)
        powers[0] = inverse[0] = 1
        np.cumprod(powers, dtype=np.uint32, out=powers)
        np.cumprod(inverse, dtype=np.uint32, out=inverse)
        tables = _TABLES = (powers, inverse)
    return tables


def _hash_units(units: np.ndarray, unit_offsets: np.ndarray) -> np.ndarray:
    """Hash of each units[a:b] from one prefix sum: G[k] = sum_{i<k} u_i 31^(N-1-i),
    hash(a, b) = (G[b] - G[a]) * 31^-(N-b), all mod 2^32 (uint32 arithmetic wraps)."""
    total = units.size
    if total == 0:
        return np.zeros(unit_offsets.size - 1, dtype=np.int32)
    powers, inverse = _power_tables(total)
    weighted = np.multiply(units, powers[total - 1 :: -1], dtype=np.uint32)  # u_i * 31^(N-1-i)
    prefix = np.zeros(total + 1, dtype=np.uint32)
    np.cumsum(weighted, dtype=np.uint32, out=prefix[1:])
    ends = unit_offsets[1:]
    span = prefix[ends] - prefix[unit_offsets[:-1]]
    return (span * inverse[total - ends]).view(np.int32)


def _chunks(offsets: np.ndarray) -> list[tuple[int, int]]:
    """Split strings [0, n) into runs of about CHUNK_BYTES bytes (at least one string each)."""
    n = offsets.size - 1
    runs = []
    first = 0
    while first < n:
        last = int(np.searchsorted(offsets, offsets[first] + CHUNK_BYTES, side="right")) - 1
        last = min(max(last, first + 1), n)
        runs.append((first, last))
        first = last
    return runs


def java_hash_and_length_ragged(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Java hash (int32) and Java `length()` (int64, UTF-16 units) of each UTF-8 string
    data[offsets[i]:offsets[i+1]] from one decode; exact for malformed bytes too (module doc)."""
    data, offsets = _as_buffers(data, offsets)
    hashes = np.zeros(offsets.size - 1, dtype=np.int32)
    lengths = np.zeros(offsets.size - 1, dtype=np.int64)
    for first, last in _chunks(offsets):
        offs = offsets[first : last + 1]
        lo = int(offs[0])
        region = data[lo : int(offs[-1])]
        if region.size:
            units, unit_offsets = _code_units(region, offs - lo)
            hashes[first:last] = _hash_units(units, unit_offsets)
            lengths[first:last] = np.diff(unit_offsets)
    return hashes, lengths


def java_hash_ragged(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Java hash (int32) of each UTF-8 string data[offsets[i]:offsets[i+1]], vectorised; "" -> 0."""
    return java_hash_and_length_ragged(data, offsets)[0]


def java_utf16_lengths(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Length (`String.length()`) of each string as Java decodes it, malformed bytes included."""
    return java_hash_and_length_ragged(data, offsets)[1]


def arrow_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Zero-copy (uint8 data, int64 offsets of len(arr) + 1) of a string/binary Arrow array, slice-aware."""
    kind = arr.type
    if pa.types.is_string_view(kind) or pa.types.is_binary_view(kind):
        arr = arr.cast(pa.large_binary())
        kind = arr.type
    if pa.types.is_large_string(kind) or pa.types.is_large_binary(kind):
        width = np.int64
    elif pa.types.is_string(kind) or pa.types.is_binary(kind):
        width = np.int32
    else:
        raise TypeError(f"expected a string or binary array, got {kind}")
    buffers = arr.buffers()
    if len(arr) == 0 or buffers[1] is None:
        return np.zeros(0, dtype=np.uint8), np.zeros(len(arr) + 1, dtype=np.int64)
    offsets = np.frombuffer(buffers[1], dtype=width)[arr.offset : arr.offset + len(arr) + 1]
    data = np.zeros(0, dtype=np.uint8) if buffers[2] is None else np.frombuffer(buffers[2], dtype=np.uint8)
    return data, offsets.astype(np.int64)


def java_hash_arrow(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Java hash (int32) of every value of a string/binary (or dictionary of those) Arrow array; null -> 0."""
    if isinstance(arr, pa.ChunkedArray):
        parts = [java_hash_arrow(chunk) for chunk in arr.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
    if pa.types.is_dictionary(arr.type):
        per_value = java_hash_arrow(arr.dictionary)
        indices = arr.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        out = per_value[indices] if per_value.size else np.zeros(len(arr), dtype=np.int32)
    else:
        data, offsets = arrow_buffers(arr)
        out = java_hash_ragged(data, offsets)
    if arr.null_count:
        out[~arr.is_valid().to_numpy(zero_copy_only=False)] = 0
    return out
