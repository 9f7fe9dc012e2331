"""Java String.hashCode over UTF-16 units: known JDK values, vectorised == scalar, golden CQ/index hashes."""
from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_format import java_hash as jh
from storage_format.java_hash import (
    decode_utf8_like_java,
    index_key_hash,
    index_key_hash_scalar,
    java_hash,
    java_hash_arrow,
    java_hash_bytes,
    java_hash_concat,
    java_hash_ragged,
    java_utf16_lengths,
    pow31,
    utf16_lengths,
)
from tests import golden_walk

# Printed by OpenJDK 17 (`s.hashCode()`). "😀" is 0xD83D * 31 + 0xDE00 = 1772899.
KNOWN = [
    ("", 0),
    ("a", 97),
    ("hello", 99162322),
    ("polygenelubricants", -2147483648),
    ("\U0001f600", 1772899),
    ("主题-Ω-topic", -1936479749),
    ("\ud800", 55296),  # a lone surrogate is one unit
    ("a\U0010ffffz", 58790041),
]

# (UTF-8 bytes, `new String(bytes, UTF_8).hashCode()`, `.length()`), printed by OpenJDK 17.
JDK_BYTES = [
    ("eda080", 65533, 1),  # encoded surrogate: ONE U+FFFD in the JDK (Python's decoder gives three)
    ("eda0", 65533, 1),
    ("edbfbf", 65533, 1),
    ("ed9fbf", 55295, 1),
    ("eda0bf41", 2031588, 2),
    ("edbf", 65533, 1),
    ("ed", 65533, 1),
    ("f09f98", 65533, 1),
    ("f09f9880", 1772899, 2),
    ("f09f98f09f9880", 64750112, 3),
    ("c080", 2097056, 2),
    ("c1bf", 2097056, 2),
    ("e08080", 65074269, 3),
    ("e0a080", 2048, 1),
    ("f4908080", 2017367872, 4),
    ("f48fbfbf", 1803232, 2),
    ("f5", 65533, 1),
    ("ff", 65533, 1),
    ("fe41", 2031588, 2),
    ("80", 65533, 1),
    ("bfbf", 2097056, 2),
    ("e4b8", 65533, 1),
    ("ad", 65533, 1),
    ("e4b8ad", 20013, 1),
    ("41e4b8ade4b8", 748401, 3),
    ("c2", 65533, 1),
    ("f0", 65533, 1),
    ("f09f", 65533, 1),
    ("e4b8ade69687eda080f09f9880c3a9", 1965232835, 6),
    ("efbbbf", 65279, 1),
    ("00", 0, 1),
]


def ragged(items: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated bytes and n + 1 offsets of a list of byte strings."""
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(b) for b in items])
    return np.frombuffer(b"".join(items), dtype=np.uint8), offsets


def utf8(s: str) -> bytes:
    """UTF-8 bytes of a str (lone surrogates kept as their 3-byte form)."""
    return s.encode("utf-8", "surrogatepass")


@pytest.mark.parametrize(("text", "expected"), KNOWN)
def test_known_java_values(text: str, expected: int) -> None:
    """Scalar hash of strings whose hashCode() the JDK printed."""
    assert java_hash(text) == expected


def test_known_values_vectorised() -> None:
    """The same strings through the ragged form, plus their UTF-16 lengths."""
    texts = [t for t, _ in KNOWN if "\ud800" not in t]  # a lone surrogate is not valid UTF-8
    data, offsets = ragged([utf8(t) for t in texts])
    assert java_hash_ragged(data, offsets).tolist() == [java_hash(t) for t in texts]
    assert java_hash_ragged(data, offsets).dtype == np.int32
    assert utf16_lengths(data, offsets).tolist() == [len(t.encode("utf-16-le")) // 2 for t in texts]


@pytest.mark.parametrize(("hexed", "expected", "length"), JDK_BYTES)
def test_malformed_utf8_like_the_jdk(hexed: str, expected: int, length: int) -> None:
    """Malformed UTF-8 decodes and hashes as `new String(bytes, UTF_8)` does."""
    raw = bytes.fromhex(hexed)
    assert java_hash_bytes(raw) == expected
    assert len(decode_utf8_like_java(raw).encode("utf-16-le", "surrogatepass")) // 2 == length


def test_malformed_vectorised_like_the_jdk() -> None:
    """The vectorised decoder agrees with the JDK on the same bytes, one string each."""
    # All cases in one buffer: neighbours such as "e4b8" + "ad" must not join across a string boundary.
    raws = [bytes.fromhex(h) for h, _, _ in JDK_BYTES]
    data, offsets = ragged(raws)
    assert java_hash_ragged(data, offsets).tolist() == [e for _, e, _ in JDK_BYTES]
    assert java_utf16_lengths(data, offsets).tolist() == [n for _, _, n in JDK_BYTES]


def test_empty_inputs() -> None:
    """n == 0, empty strings, empty and all-null Arrow arrays."""
    empty = np.zeros(0, dtype=np.uint8)
    assert java_hash_ragged(empty, np.zeros(1, dtype=np.int64)).shape == (0,)
    assert java_hash_ragged(empty, np.zeros(4, dtype=np.int64)).tolist() == [0, 0, 0]
    assert utf16_lengths(empty, np.zeros(1, dtype=np.int64)).shape == (0,)
    assert java_hash_arrow(pa.array([], pa.string())).shape == (0,)
    assert java_hash_arrow(pa.array([None, None], pa.string())).tolist() == [0, 0]


def test_offsets_into_a_larger_buffer() -> None:
    """Offsets need not start at 0 or end at the buffer end."""
    data = np.frombuffer(b"xxhelloaworld\xf0\x9f\x98\x80yy", dtype=np.uint8)
    offsets = np.array([2, 7, 8, 8, 13, 17], dtype=np.int32)  # int32 offsets are accepted too
    expected = [java_hash(s) for s in ["hello", "a", "", "world", "\U0001f600"]]
    assert java_hash_ragged(data, offsets).tolist() == expected


def test_bad_arguments_raise() -> None:
    """Unusable offsets, dtypes, array types and negative exponents are refused."""
    data = np.frombuffer(b"abc", dtype=np.uint8)
    with pytest.raises(ValueError):
        java_hash_ragged(data, np.array([0, 2, 1]))
    with pytest.raises(ValueError):
        java_hash_ragged(data, np.array([0, 4]))
    with pytest.raises(ValueError):
        java_hash_ragged(data, np.array([], dtype=np.int64))
    with pytest.raises(TypeError):
        java_hash_ragged(data.astype(np.int16), np.array([0, 3]))
    with pytest.raises(TypeError):
        java_hash_arrow(pa.array([1, 2]))
    with pytest.raises(ValueError):
        pow31(np.array([-1]))


_ALPHABETS = st.one_of(
    st.characters(exclude_categories=["Cs"]),  # any code point but a lone surrogate (not UTF-8)
    st.characters(min_codepoint=0x10000),  # astral: surrogate pairs
    st.characters(max_codepoint=0x7F),
    st.sampled_from("主题Ωé\U0001f600\u0800\uffff\U0010ffff#a "),
)
_TEXTS = st.lists(st.text(alphabet=_ALPHABETS, max_size=12), max_size=40)


@given(_TEXTS)
@settings(max_examples=300, deadline=None)
def test_ragged_equals_scalar(texts: list[str]) -> None:
    """Ragged hashes/lengths of valid UTF-8 (astral chars, empty strings) == scalar."""
    data, offsets = ragged([utf8(t) for t in texts])
    assert java_hash_ragged(data, offsets).tolist() == [java_hash(t) for t in texts]
    assert utf16_lengths(data, offsets).tolist() == [len(t.encode("utf-16-le")) // 2 for t in texts]


_UTF8_EDGE_BYTES = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0,
                    0xE1, 0xED, 0xEF, 0xF0, 0xF1, 0xF4, 0xF5, 0xFF]
_RAW = st.one_of(st.binary(max_size=10), st.lists(st.sampled_from(_UTF8_EDGE_BYTES), max_size=10).map(bytes))


@given(st.lists(_RAW, max_size=30))
@settings(max_examples=300, deadline=None)
def test_ragged_malformed_equals_scalar(raws: list[bytes]) -> None:
    """Ragged hashes/lengths of arbitrary bytes == the scalar Java-decoding reference."""
    data, offsets = ragged(raws)
    assert java_hash_ragged(data, offsets).tolist() == [java_hash_bytes(b) for b in raws]
    expected_len = [len(decode_utf8_like_java(b).encode("utf-16-le", "surrogatepass")) // 2 for b in raws]
    assert java_utf16_lengths(data, offsets).tolist() == expected_len


@given(st.lists(st.one_of(_RAW, st.text(alphabet=_ALPHABETS, max_size=6).map(utf8)), max_size=30))
@settings(max_examples=100, deadline=None)
def test_ragged_in_small_chunks(raws: list[bytes]) -> None:
    """Results do not depend on where the vectorised passes are cut."""
    # Force many vectorised passes (and strings longer than a chunk) to check the chunk seams.
    data, offsets = ragged(raws)
    old = jh.CHUNK_BYTES
    jh.CHUNK_BYTES = 5
    try:
        got = java_hash_ragged(data, offsets).tolist()
    finally:
        jh.CHUNK_BYTES = old
    assert got == [java_hash_bytes(b) for b in raws]


@given(st.text(alphabet=_ALPHABETS, max_size=20), st.text(alphabet=_ALPHABETS, max_size=20))
def test_concat_property(left: str, right: str) -> None:
    """hash(a + b) from hash(a), hash(b) and the UTF-16 length of b."""
    len16 = len(right.encode("utf-16-le")) // 2
    got = java_hash_concat(np.array([java_hash(left)]), np.array([java_hash(right)]), np.array([len16]))
    assert got.dtype == np.int32
    assert got.tolist() == [java_hash(left + right)]


def test_concat_builds_index_keys() -> None:
    """topic + "#" + key hashes from per-column hashes, as index keys need."""
    topics = pa.array(["TopicTest", "主题-Ω-topic", "T"])
    keys = pa.array(["mh-1", "\U0001f600k", ""])
    prefix = java_hash_arrow(pa.array([t + "#" for t in topics.to_pylist()]))
    got = java_hash_concat(prefix, java_hash_arrow(keys), utf16_lengths(*jh.arrow_buffers(keys)))
    assert got.tolist() == [java_hash(t + "#" + k) for t, k in zip(topics.to_pylist(), keys.to_pylist())]


@given(st.lists(st.integers(min_value=0, max_value=2**62), max_size=20))
def test_pow31(exponents: list[int]) -> None:
    """31^e mod 2^32 for exponents up to 2^62."""
    got = pow31(np.array(exponents, dtype=np.int64))
    assert got.dtype == np.uint32
    assert got.tolist() == [pow(31, e, 2**32) for e in exponents]


def test_index_key_hash_min_value() -> None:
    """abs(hash), with Integer.MIN_VALUE mapped to 0."""
    assert index_key_hash_scalar(-(2**31)) == 0
    assert index_key_hash_scalar(java_hash("polygenelubricants")) == 0
    assert index_key_hash_scalar(-5) == 5
    values = np.array([-(2**31), -(2**31) + 1, -5, 0, 5, 2**31 - 1], dtype=np.int32)
    got = index_key_hash(values)
    assert got.dtype == np.int32
    assert got.tolist() == [0, 2**31 - 1, 5, 0, 5, 2**31 - 1]


@given(st.lists(st.integers(min_value=-(2**31), max_value=2**31 - 1), max_size=30))
def test_index_key_hash_vectorised(values: list[int]) -> None:
    """Vectorised index key hash == scalar over any int32."""
    got = index_key_hash(np.array(values, dtype=np.int32)).tolist()
    assert got == [index_key_hash_scalar(v) for v in values]


def test_arrow_kinds_slices_and_nulls() -> None:
    """string/large_string/binary/view/dictionary/chunked arrays, slices, nulls -> 0."""
    values = ["x", None, "hello", "\U0001f600", "", "主题", None, "polygenelubricants"]
    expected = [0 if v is None else java_hash(v) for v in values]
    base = pa.array(values, pa.string())
    for arr in (base, base.cast(pa.large_string()), base.cast(pa.binary()), base.cast(pa.string_view())):
        assert java_hash_arrow(arr).tolist() == expected
        assert java_hash_arrow(arr.slice(2, 5)).tolist() == expected[2:7]
    assert java_hash_arrow(base.dictionary_encode()).tolist() == expected
    assert java_hash_arrow(base.dictionary_encode().slice(1, 3)).tolist() == expected[1:4]
    chunked = pa.chunked_array([base.slice(0, 3), base.slice(3)])
    assert java_hash_arrow(chunked).tolist() == expected
    assert java_hash_arrow(pa.array([b"\xed\xa0\x80", b"ok"], pa.binary())).tolist() == [65533, java_hash("ok")]


@pytest.mark.parametrize("case", ["clean-small-11", "v5-clean-small-11"])
def test_golden_consume_queue_tags_codes(golden: Path, case: str) -> None:
    """tagsCode of every non-schedule CQ unit the broker wrote == Java hash of the record's TAGS (or 0)."""
    by_offset = {r.physical_offset: r for r in golden_walk.records(case)}
    units = [u for u in golden_walk.consume_queue_entries(case)
             if u[0] != "SCHEDULE_TOPIC_XXXX" and u[3] != 0x7FFFFFFF]
    tags = [by_offset[u[2]].properties.get("TAGS", "") for u in units]
    assert len(units) > 2000
    assert sum(1 for t in tags if not t.isascii()) > 100  # the case has non-ASCII tags
    got = java_hash_arrow(pa.array(tags)).astype(np.int64)
    assert got.tolist() == [u[4] for u in units]


@pytest.mark.parametrize("case", ["clean-small-11", "v5-clean-small-11"])
def test_golden_index_key_hashes(golden: Path, case: str) -> None:
    """(keyHash, phyOffset) of all index entries == the keys every indexed record implies, hashed here."""
    keys, owners = [], []
    for record in golden_walk.records(case):
        if record.sys_flag & 0xC == 0xC:  # ROLLBACK records are not indexed
            continue
        topic = record.topic.decode("utf-8")
        if "UNIQ_KEY" in record.properties:
            keys.append(f"{topic}#{record.properties['UNIQ_KEY']}")
            owners.append(record.physical_offset)
        for token in record.properties.get("KEYS", "").split(" "):
            if token:
                keys.append(f"{topic}#{token}")
                owners.append(record.physical_offset)
    hashes = java_hash_arrow(pa.array(keys))
    assert int(np.sum(hashes == np.int32(-(2**31)))) > 0  # the Integer.MIN_VALUE keys are in there
    computed = collections.Counter(zip(index_key_hash(hashes).tolist(), owners))
    assert computed == collections.Counter(golden_walk.index_entries(case))
