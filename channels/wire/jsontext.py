"""JSON text of records in and out of a pipeline: orjson where it agrees with the stdlib.

Records leave a pipeline as JSON (Kafka values, JSONL lines, printed lines). Encoding
them was one of the largest per-record costs of a sink (stdlib ``json`` builds its
encoder per call: ~2.3 µs for a three-field record, orjson ~0.13 µs). The text is compact
(no spaces), keys sorted (stable output whatever the order a function built the dict
in), UTF-8 (non-ASCII is not escaped).

Where orjson and the stdlib differ:

* integers beyond 64 bits: orjson refuses them; they are written by the stdlib, exact.
* NaN and ±Infinity are written as ``null``: JSON has no such numbers, and the stdlib's
  ``NaN`` is text that strict readers (Spillway's own file source among them) reject.
* dataclasses, datetimes, enums and UUIDs are written (orjson's rules) where the
  stdlib raised ``TypeError``.

A value neither can write raises ``TypeError`` naming its type.

Reading (:func:`loads`, Kafka source values): orjson (~0.4 µs for a 200-byte event, the
stdlib ~2.3 µs), except where the two differ: orjson reads an integer beyond 64 bits as
a *float* (silently inexact), so any text with a run of 19 or more digits is read by the
stdlib; and what orjson refuses but the stdlib accepts (``NaN``/``Infinity`` literals) is
read by the stdlib too. Every text reads exactly as it did with the stdlib.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
_orjson_dumps = orjson.dumps
_orjson_loads = orjson.loads
_stdlib_loads = json.JSONDecoder().decode
# 19 digits: the shortest run that can hold an integer outside orjson's exact range
# (below -2**63 or above 2**64 - 1); a digit run inside a string only costs the fast path.
# Digits to "0", all else to " ", then one substring search: ~0.15 µs for 200 bytes, where
# re's search for a digit run took ~1.9 µs (more than the stdlib's whole parse).
_DIGITS_ONLY = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_RUN = b"0" * 19


def has_long_digit_run(text: bytes) -> bool:
    """True if ``text`` holds 19 or more digits in a row: orjson may read such a number
    inexactly (as a float), so exact readers take the stdlib's path for it."""
    return _LONG_RUN in text.translate(_DIGITS_ONLY)


# The fallback escapes non-ASCII: a lone surrogate (which JSON text may hold and the
# source may read) cannot be encoded as UTF-8, and orjson refuses it.
_stdlib = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode


def dumps(value: Any) -> bytes:
    """Compact, key-sorted UTF-8 JSON of ``value``; ``TypeError`` if it is not JSON-able."""
    try:
        return _orjson_dumps(value, option=_OPTIONS)
    except TypeError:
        # Integers beyond 64 bits (the stdlib writes them exactly); anything else raises
        # the stdlib's own TypeError, which names the type.
        return _stdlib(value).encode()


def loads(text: bytes) -> Any:
    """The value of UTF-8 JSON ``text``; ``ValueError`` if it is not JSON (or not UTF-8)."""
    if not has_long_digit_run(text):
        try:
            return _orjson_loads(text)
        except orjson.JSONDecodeError:
            pass  # NaN/Infinity literals, or not JSON: the stdlib decides
    # str first: json.loads(bytes) would sniff the encoding; UTF-8 is ours.
    return _stdlib_loads(text.decode())
