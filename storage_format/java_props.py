"""How the broker reads its config file, as Java does it: `java.util.Properties.load(InputStream)` (ISO-8859-1,
continuation lines, escapes, `=`/`:`/blank separators) and the value parsers MixAll.properties2Object uses
(`Integer.parseInt` / `Long.parseLong` on the untrimmed text, any Unicode decimal digit; `Boolean.parseBoolean`;
`String.trim` for strings). A value Java cannot parse is skipped by the broker, which keeps its default.
"""
from __future__ import annotations

import unicodedata

from .errors import SettingsError

_BLANK = " \t\f"
_EOL = "\r\n"
_ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "f": "\f"}
INT_BITS, LONG_BITS = 32, 64


def _logical_lines(text: str) -> list[str]:
    """Properties.LineReader: natural lines joined at an odd number of trailing backslashes; leading blanks
    of every natural line skipped; blank lines and lines starting with '#' or '!' skipped (a continuation
    line is never a comment; an empty continuation line ends the logical line)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out: list[str] = []
    buf: str | None = None  # the logical line being continued
    for raw in lines:
        line = raw.lstrip(_BLANK)
        if buf is None:
            if not line or line[0] in "#!":
                continue
            buf = ""
        buf += line
        trailing = len(buf) - len(buf.rstrip("\\"))
        if trailing % 2 == 1:
            buf = buf[:-1]
            continue
        out.append(buf)
        buf = None
    if buf:  # end of input inside a continuation
        out.append(buf)
    return out


def _unescape(s: str) -> str:
    """Properties.loadConvert: \\t \\r \\n \\f, \\uXXXX, and \\c for any other c."""
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c != "\\" or i + 1 >= len(s):
            out.append(c)
            i += 1
            continue
        c = s[i + 1]
        if c == "u":
            digits = s[i + 2:i + 6]
            if len(digits) < 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise SettingsError(f"malformed \\uxxxx escape {s[i:i + 6]!r} (java.util.Properties refuses the "
                                    f"file, so the broker does not start)")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(c, c))
            i += 2
    return "".join(out)


def _split(line: str) -> tuple[str, str]:
    """Properties.load0: the key ends at the first unescaped '=', ':' or blank; then blanks and at most one
    '=' or ':' are skipped; the value is the rest, trailing blanks included."""
    key_len, value_start, has_sep, backslash = 0, len(line), False, False
    while key_len < len(line):
        c = line[key_len]
        if c in "=:" and not backslash:
            value_start, has_sep = key_len + 1, True
            break
        if c in _BLANK and not backslash:
            value_start = key_len + 1
            break
        backslash = (not backslash) if c == "\\" else False
        key_len += 1
    while value_start < len(line):
        c = line[value_start]
        if c not in _BLANK:
            if not has_sep and c in "=:":
                has_sep = True
            else:
                break
        value_start += 1
    return _unescape(line[:key_len]), _unescape(line[value_start:])


def parse_properties(text: str) -> dict[str, str]:
    """Key -> value as java.util.Properties loads them (a repeated key: the last one wins)."""
    out: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split(line)
        out[key] = value
    return out


def decode_properties_file(data: bytes) -> str:
    """Properties.load(InputStream) reads ISO-8859-1 (non-ASCII only through \\uXXXX escapes)."""
    return data.decode("latin-1")


def java_digit(c: str) -> int:
    """Character.digit(c, 10): the value of a Unicode decimal digit (category Nd), else -1."""
    if unicodedata.category(c) != "Nd":
        return -1
    return unicodedata.decimal(c, -1)


def java_parse_integral(text: str, bits: int) -> int | None:
    """Integer.parseInt (bits=32) / Long.parseLong (bits=64) on the exact text; None where Java throws
    NumberFormatException (empty, a sign alone, blanks, any non-digit, out of range)."""
    if not text:
        return None
    sign, digits = 1, text
    if text[0] in "+-":
        sign, digits = (-1 if text[0] == "-" else 1), text[1:]
        if not digits:
            return None
    value = 0
    for c in digits:
        d = java_digit(c)
        if d < 0:
            return None
        value = value * 10 + d
    value *= sign
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return value if low <= value <= high else None


def java_parse_boolean(text: str) -> bool:
    """Boolean.parseBoolean: "true" in any case, untrimmed; anything else is false."""
    return text.lower() == "true" and len(text) == 4


def java_trim(text: str) -> str:
    """String.trim: drops leading and trailing chars <= U+0020."""
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]
