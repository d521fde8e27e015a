"""The request fingerprint of docs/fingerprint.md, computed client-side: the same 32 bytes as
SQL idempotency.fingerprint(body::jsonb, exclude) for every JSON text PostgreSQL accepts."""
from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from decimal import Decimal
from json.encoder import encode_basestring  # the C escaper: exactly the canonical escapes

from .errors import InvalidJson, InvalidParameterValue, ProgramLimitExceeded

MAX_DEPTH = 1000
MAX_DIGITS = 1000

_NUMBER = re.compile(r"(-?)(0|[1-9][0-9]*)(?:\.([0-9]+))?(?:[eE]([-+]?[0-9]+))?\Z")


class _Num(str):
    """A number already in canonical form."""


class _Obj(list):
    """An object's members as parsed: (name, value) pairs, duplicates kept."""


def canonical_number(text: str) -> str:
    """The canonical form of a JSON number text (section 3 of docs/fingerprint.md)."""
    m = _NUMBER.match(text)
    if m is None:
        raise InvalidJson(f'invalid JSON number "{text[:40]}"')
    negative, int_digits, frac, exp = m.groups()
    frac = frac or ""
    digits = (int_digits + frac).lstrip("0")
    if not digits:
        return "0"
    exp = exp or "0"
    if len(exp.lstrip("+-").lstrip("0")) > 18:  # non-zero: far more than MAX_DIGITS digits
        raise ProgramLimitExceeded(f"JSON number has more than {MAX_DIGITS} digits")
    x = int(exp) - len(frac)
    significand = digits.rstrip("0")
    x += len(digits) - len(significand)
    n = len(significand)
    point = n + x
    width = n + x if x >= 0 else (n if point > 0 else 1 - x)
    if width > MAX_DIGITS:
        raise ProgramLimitExceeded(f"JSON number has more than {MAX_DIGITS} digits")
    sign = "-" if negative else ""
    if x >= 0:
        return sign + significand + "0" * x
    if point > 0:
        return sign + significand[:point] + "." + significand[point:]
    return sign + "0." + "0" * (-point) + significand


def _number_hook(text):
    return _Num(canonical_number(text))


def _bad_constant(name):
    raise InvalidJson(f'invalid JSON: token "{name}" is not JSON')


def _ensure_stack():
    # The json module and the writer recurse once per level; 1000 levels must fit.
    if sys.getrecursionlimit() < 2500:
        sys.setrecursionlimit(2500)


def _parse(text: str):
    # Nesting deeper than MAX_DEPTH is refused by the writer (or, far deeper, by the parser's
    # recursion); only the stack must fit MAX_DEPTH levels. A syntax error wins, as in SQL.
    if text.count("[") + text.count("{") > 200:
        _ensure_stack()
    try:
        return json.loads(text, parse_int=_number_hook, parse_float=_number_hook,
                          parse_constant=_bad_constant, object_pairs_hook=_Obj)
    except json.JSONDecodeError as e:
        raise InvalidJson(f"invalid JSON at character {e.pos}: {e.msg}") from None
    except RecursionError:
        raise ProgramLimitExceeded(f"JSON nesting exceeds {MAX_DEPTH} levels") from None


def _check_string(s: str):
    if "\x00" in s:
        raise InvalidJson("unsupported Unicode escape sequence: \\u0000 cannot be stored",
                          sqlstate="22P05")
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidJson("invalid JSON: unpaired Unicode surrogate in a string") from None


def _scalar(v) -> str:
    """The canonical text of a non-container value."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, _Num):
        return v
    if isinstance(v, str):
        _check_string(v)
        return encode_basestring(v)
    if isinstance(v, int):
        if v.bit_length() > 3400:  # over 1000 decimal digits
            raise ProgramLimitExceeded(f"JSON number has more than {MAX_DIGITS} digits")
        return canonical_number(str(int(v)))
    if isinstance(v, float):
        if not math.isfinite(v):
            raise InvalidJson(f"invalid JSON: {v!r} is not a JSON number")
        return canonical_number(repr(v))
    if isinstance(v, Decimal):
        if not v.is_finite():
            raise InvalidJson(f"invalid JSON: Decimal {v} is not a JSON number")
        return canonical_number(str(v))
    raise TypeError(f"fingerprint: a {type(v).__name__} is not a JSON value")


class _Writer:
    def __init__(self, exclude):
        self.paths = set(exclude)
        self.prefixes = set()
        for p in exclude:
            segments = p.split(".")
            for i in range(1, len(segments)):
                self.prefixes.add(".".join(segments[:i]))
        self.out = []

    def write(self, v, depth, path, emit=True):
        """Writes v (or, with emit False, only checks it). path: the dotted prefix of this
        object's members ('' at the top, 'a.b.'), or None where exclusion cannot reach."""
        out = self.out
        if isinstance(v, (dict, _Obj)):
            if depth >= MAX_DEPTH:
                raise ProgramLimitExceeded(f"JSON nesting exceeds {MAX_DEPTH} levels")
            items = v.items() if isinstance(v, dict) else v
            members = {}
            for name, value in items:
                if not isinstance(name, str):
                    raise TypeError("fingerprint: object keys must be str")
                _check_string(name)
                if name in members:  # a duplicate: the last wins; check the one dropped
                    self.write(members[name], depth + 1, None, False)
                members[name] = value
            if emit:
                out.append("{")
            first = True
            for name in sorted(members):  # code point order = UTF-8 byte order
                value = members[name]
                child_path = None
                keep = emit
                if path is not None and "." not in name:
                    full = path + name
                    if full in self.paths:
                        keep = False
                    elif full in self.prefixes:
                        child_path = full + "."
                if keep:
                    if not first:
                        out.append(",")
                    first = False
                    out.append(encode_basestring(name))
                    out.append(":")
                self.write(value, depth + 1, child_path, keep)
            if emit:
                out.append("}")
        elif isinstance(v, (list, tuple)):
            if depth >= MAX_DEPTH:
                raise ProgramLimitExceeded(f"JSON nesting exceeds {MAX_DEPTH} levels")
            if emit:
                out.append("[")
            for i, item in enumerate(v):
                if emit and i:
                    out.append(",")
                self.write(item, depth + 1, None, emit)
            if emit:
                out.append("]")
        else:
            text = _scalar(v)
            if emit:
                out.append(text)


def _check_exclude(exclude):
    if isinstance(exclude, (str, bytes)) or not isinstance(exclude, (list, tuple, set, frozenset)):
        raise InvalidParameterValue(
            "exclude must be a list of strings",
            detail=f"got a {type(exclude).__name__}",
            hint='write exclude=["sent_at"], not exclude="sent_at"')
    paths = list(exclude)
    for p in paths:
        if not isinstance(p, str):
            raise InvalidParameterValue("exclude must be a list of strings",
                                        detail=f"an element is a {type(p).__name__}")
        if p == "" or p.startswith(".") or p.endswith(".") or ".." in p:
            raise InvalidParameterValue(f'invalid exclude path "{p}"')
    return paths


def canonical_json(body, exclude=()) -> bytes:
    """The canonical form (UTF-8 bytes). body: a JSON text (str, or UTF-8 bytes / bytearray /
    memoryview), or a Python value (dict, list, tuple, str, int, Decimal, float, bool, None) -
    a str is always a JSON *text*."""
    paths = _check_exclude(exclude)
    if isinstance(body, (bytes, bytearray, memoryview)):
        try:
            body = bytes(body).decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidJson(f"invalid UTF-8 in JSON at byte {e.start}") from None
    if isinstance(body, str):
        value = _parse(body)
    else:
        value = body
        _ensure_stack()
    writer = _Writer(paths)
    writer.write(value, 0, "" if paths else None)
    text = "".join(writer.out)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidJson("invalid JSON: unpaired Unicode surrogate in a string") from None


def fingerprint(body, exclude=()) -> bytes:
    """SHA-256 of the canonical form: 32 bytes, equal to SQL
    idempotency.fingerprint(body::jsonb, exclude)."""
    return hashlib.sha256(canonical_json(body, exclude)).digest()
