"""Do two JSON texts mean the same to Python's `json` (the parser of the Python MCP SDK)?

Reads {"pairs": [[sent, forwarded, path], ...]} on stdin and writes
{"mismatches": [{"index": i, "sent": repr, "forwarded": repr}, ...]} on stdout. `sent` is
the JSON text a client sent, `forwarded` the whole body the upstream received, and `path`
the keys leading from that body to where `sent` was placed (`["params", "arguments", "v"]`).

"The same" is stricter than `==`: types must match (`1`, `1.0` and `True` differ), floats
are compared by their bits (`-0.0` differs from `0.0`, and the infinities a too-large
literal becomes are compared as such), strings code point by code point, and object members
in order. A text Python cannot load counts as a mismatch, with the error as its repr.
"""

from __future__ import annotations

import json
import math
import struct
import sys


def _canonical(value):
    if isinstance(value, bool) or value is None:
        return (type(value).__name__, value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", "nan" if math.isnan(value) else struct.pack(">d", value).hex())
    if isinstance(value, str):
        return ("str", value)
    if isinstance(value, list):
        return ("list", [_canonical(v) for v in value])
    if isinstance(value, dict):
        return ("dict", [(k, _canonical(v)) for k, v in value.items()])
    raise TypeError(type(value))


def _load(text, path=()):
    try:
        value = json.loads(text)
        for key in path:
            value = value[key]
        return True, _canonical(value)
    except (ValueError, RecursionError, KeyError, TypeError) as e:
        return False, f"{type(e).__name__}: {e}"


def main() -> None:
    pairs = json.load(sys.stdin)["pairs"]
    mismatches = []
    for index, (sent, forwarded, path) in enumerate(pairs):
        a, b = _load(sent), _load(forwarded, path)
        if not (a[0] and b[0] and a[1] == b[1]):
            mismatches.append({"index": index, "sent": repr(a[1]), "forwarded": repr(b[1])})
    json.dump({"mismatches": mismatches}, sys.stdout)


if __name__ == "__main__":
    main()
