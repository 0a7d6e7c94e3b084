"""Secret masking: the forms of a secret value replaced with ``***`` in what a run reports.

Best effort, never a guarantee (docs/workers.md, "Secret masking"): a run's processes hold the values
and can always transform them in ways no mask recognises (reversed, split, encrypted). What is masked,
in every output line, the outcome's message and the result file:

- the value as stored, and stripped of surrounding whitespace (a value saved with a trailing newline
  is masked where it is printed without one);
- every line of a multi-line value (a PEM key prints line by line, and output is sent line by line),
  the ``-----BEGIN/END ...-----`` marker lines included;
- cheap common encodings of the value (with and without one trailing newline, as ``echo | base64``
  adds): standard and URL-safe base64 (with and without padding, and base64(1)'s 76-character lines),
  URL encoding (``%20`` and ``+``), the JSON string escape, hex.

Forms shorter than :data:`MIN_MASKED_LENGTH` are left alone: masking every ``ab`` would destroy the log
while protecting nothing; wrapped base64 fragments must be :data:`MIN_FRAGMENT_LENGTH` long.
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Iterable, Iterator
from urllib.parse import quote, quote_plus

MIN_MASKED_LENGTH = 4
MIN_FRAGMENT_LENGTH = 16
MASK = "***"
BASE64_LINE = 76  # base64(1) and MIME wrap here


def mask(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every masked form of every secret value replaced by ``***`` (longest first)."""
    pattern = _pattern(frozenset(secrets))
    return text if pattern is None else pattern.sub(MASK, text)


def masked_forms(value: str) -> set[str]:
    """Every form of ``value`` :func:`mask` replaces."""
    return {f for f in _forms(value) if len(f) >= MIN_MASKED_LENGTH}


@functools.lru_cache(maxsize=64)
def _pattern(secrets: frozenset[str]) -> re.Pattern[str] | None:
    forms: set[str] = set()
    for value in secrets:
        if len(value.strip()) >= MIN_MASKED_LENGTH:
            forms |= masked_forms(value)
    if not forms:
        return None
    # Longest first: at each position the alternation takes the first form that matches.
    return re.compile("|".join(re.escape(f) for f in sorted(forms, key=lambda f: (-len(f), f))))


def _forms(value: str) -> Iterator[str]:
    core = value.strip()
    yield value
    yield core
    yield from (line.strip() for line in value.splitlines())
    for text in {core, core + "\n"}:
        raw = text.encode("utf-8", "surrogatepass")
        for encoded in (base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()):
            yield encoded
            yield encoded.rstrip("=")
            if len(encoded) > BASE64_LINE:
                chunks = (encoded[i : i + BASE64_LINE] for i in range(0, len(encoded), BASE64_LINE))
                yield from (c for c in chunks if len(c) >= MIN_FRAGMENT_LENGTH)
        yield raw.hex()
    yield quote(core, safe="")
    yield quote_plus(core)
    yield json.dumps(core)[1:-1]
    yield json.dumps(core, ensure_ascii=False)[1:-1]
