"""Redaction: one place that keeps secret values out of every text sweep stores.

A secret is a value (an API key, a token) that sweep hands to a session or uses itself. The
stored texts are transcripts, evidence files, events, prompts handed to the next role, session
records, logs, report.md and task bundles; each goes through a `Redactor` before it reaches disk.

What a Redactor finds, for every value of at least MIN_SECRET_LEN characters:
- the value itself, and its JSON-escaped spelling where that differs;
- its base64 encodings, standard and URL-safe, at each of the three byte alignments (the value
  may sit anywhere inside a longer encoded blob: only the characters that depend on the value's
  bytes alone are matched, so a prefix or suffix does not hide it);
- its hex encodings (lower and upper case) and its URL-encoding (`%2B`, `+` for space);
- any of these split by whitespace or newlines (up to MAX_GAP whitespace characters, or their
  JSON escapes `\\n`, `\\r`, `\\t`, between any two characters), which is how `base64` wraps lines
  and how an agent would slip a key past a plain search.
Encoded forms shorter than MIN_FORM_LEN are not matched (they would shred ordinary text).

Not found: a value split by other text, encrypted, compressed, or re-encoded some other way. The
first defence is that a session never receives a secret it does not need (see sweep/secrets.py).

Values known to the whole process (the controller registers its plan's secrets at start, see
`register`) are included in every Redactor, so a transcript of a gate or a trial, which holds no
secret itself, is still scrubbed of one that PR code found somewhere.
"""
from __future__ import annotations

import base64
import binascii
import json
import os
import re
import urllib.parse
from pathlib import Path
from typing import Iterable

REDACTED = "[REDACTED]"
MIN_SECRET_LEN = 4      # redacting shorter values would shred the transcript and reveal little
# Process-wide values (registered by the controller) must be longer: they are matched in every
# stored text and in bundles, where a dummy key like "test" would block every run.
MIN_REGISTERED_LEN = 8
MIN_FORM_LEN = 8        # an encoded form shorter than this matches ordinary text by chance
MAX_GAP = 16            # whitespace characters tolerated between two characters of a value
_GAP = rb"(?:\s|\\[nrt]){0,%d}" % MAX_GAP
_B64_URLSAFE = bytes.maketrans(b"+/", b"-_")
SCAN_CHUNK = 1 << 20

_WHITESPACE = b" \t\n\r\x0b\x0c"

_registered: set[str] = set()
_cache: dict[frozenset[str], tuple[re.Pattern[bytes] | None, int, tuple[bytes, ...] | None]] = {}


def register(values: Iterable[str]) -> None:
    """Make `values` known to every Redactor this process creates from now on."""
    for value in values:
        if value and len(value) >= MIN_REGISTERED_LEN:
            _registered.add(value)


def registered() -> frozenset[str]:
    return frozenset(_registered)


def _b64_cores(raw: bytes) -> set[bytes]:
    """The base64 characters that depend only on `raw`'s bytes, for each of the 3 alignments."""
    cores = set()
    for k in range(3):
        encoded = base64.b64encode(b"\0" * k + raw + b"\0\0")
        first = -(-8 * k // 6)               # first character whose 6 bits all come from `raw`
        last = (8 * (k + len(raw))) // 6     # one past the last such character
        core = encoded[first:last]
        cores.add(core)
        cores.add(core.translate(_B64_URLSAFE))
    return cores


def encoded_forms(value: str) -> set[bytes]:
    """Every spelling of `value` a Redactor looks for (before whitespace splitting)."""
    raw = value.encode("utf-8", errors="surrogateescape")
    forms = {raw}
    escaped = json.dumps(value)[1:-1].encode()
    forms.add(escaped)
    encoded = _b64_cores(raw)
    encoded.add(binascii.hexlify(raw))
    encoded.add(binascii.hexlify(raw).upper())
    encoded.add(urllib.parse.quote(value, safe="").encode())
    encoded.add(urllib.parse.quote_plus(value, safe="").encode())
    forms |= {f for f in encoded if len(f) >= MIN_FORM_LEN}
    return forms


def _pattern_for(form: bytes) -> bytes:
    return _GAP.join(re.escape(bytes([c])) for c in form)


def _squeezed(data: bytes) -> bytes:
    """`data` without the gaps a match may contain (whitespace and its JSON escapes)."""
    if b"\\" in data:
        data = data.replace(b"\\n", b"").replace(b"\\r", b"").replace(b"\\t", b"")
    return data.translate(None, _WHITESPACE)


def _compiled(values: frozenset[str]) -> tuple[re.Pattern[bytes] | None, int, tuple[bytes, ...] | None]:
    hit = _cache.get(values)
    if hit is not None:
        return hit
    forms: set[bytes] = set()
    for value in values:
        forms |= encoded_forms(value)
    if not forms:
        result: tuple[re.Pattern[bytes] | None, int, tuple[bytes, ...] | None] = (None, 0, None)
    else:
        ordered = sorted(forms, key=len, reverse=True)   # the longest spelling wins an overlap
        pattern = re.compile(b"|".join(_pattern_for(f) for f in ordered))
        # the longest text one match can span: every gap at its widest, escapes two bytes a character
        longest = max(len(f) for f in ordered)
        # A cheap first look: with the gaps squeezed out of both, every match is a plain substring,
        # found by bytes.find at memory speed; only text that passes it goes through the regex.
        # (A value holding whitespace or a backslash would not survive squeezing: no first look.)
        literal = not any(b"\\" in f or _squeezed(f) != f for f in forms)
        result = (pattern, longest + (longest - 1) * MAX_GAP * 2,
                  tuple(sorted(forms, key=len)) if literal else None)
    if len(_cache) > 64:
        _cache.clear()
    _cache[values] = result
    return result


class Redactor:
    """Replaces every known spelling of the secrets with [REDACTED], in bytes, text or a stream."""

    def __init__(self, secrets: Iterable[str] = (), *, include_registered: bool = True) -> None:
        values = {s for s in secrets if s and len(s) >= MIN_SECRET_LEN}
        if include_registered:
            values |= _registered
        self.values = frozenset(values)
        self._pattern, self._span, self._literals = _compiled(self.values)
        self._keep = max(self._span - 1, 0)
        self._pending = b""

    def __bool__(self) -> bool:
        return self._pattern is not None

    # --- whole texts ----------------------------------------------------------------------------
    def _may_hold(self, data: bytes) -> bool:
        if self._literals is None:
            return True
        squeezed = _squeezed(data)
        return any(form in squeezed for form in self._literals)

    def scrub_bytes(self, data: bytes) -> bytes:
        if self._pattern is None or not data or not self._may_hold(data):
            return data
        return self._pattern.sub(REDACTED.encode(), data)

    def scrub(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        raw = text.encode("utf-8", errors="surrogateescape")
        out = self.scrub_bytes(raw)
        return text if out == raw else out.decode("utf-8", errors="surrogateescape")

    scrub_text = scrub

    def scrub_obj(self, obj):
        """A JSON-able structure with every string (keys included) scrubbed."""
        if self._pattern is None:
            return obj
        if isinstance(obj, str):
            return self.scrub(obj)
        if isinstance(obj, dict):
            return {self.scrub(k) if isinstance(k, str) else k: self.scrub_obj(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.scrub_obj(v) for v in obj]
        return obj

    def found_in(self, data: bytes | str) -> bool:
        if self._pattern is None:
            return False
        if isinstance(data, str):
            data = data.encode("utf-8", errors="surrogateescape")
        return self._may_hold(data) and self._pattern.search(data) is not None

    # --- streams ------------------------------------------------------------------------------
    def feed(self, chunk: bytes) -> bytes:
        if self._pattern is None:
            return chunk
        data = self.scrub_bytes(self._pending + chunk)
        if not self._keep:
            self._pending = b""
            return data
        # Hold back what could be the start of a secret whose end has not arrived yet.
        self._pending = data[-self._keep:]
        return data[:-self._keep]

    def flush(self) -> bytes:
        data, self._pending = self.scrub_bytes(self._pending), b""
        return data

    # --- files ----------------------------------------------------------------------------------
    def file_has_secret(self, path: Path) -> bool:
        """True if the regular file at `path` holds a secret; read in chunks that overlap by a span."""
        if self._pattern is None:
            return False
        try:
            with open(path, "rb") as fh:
                tail = b""
                while True:
                    chunk = fh.read(SCAN_CHUNK)
                    if not chunk:
                        return False
                    data = tail + chunk
                    if self.found_in(data):
                        return True
                    tail = data[-self._keep:] if self._keep else b""
        except OSError:
            return False

    def scrub_file(self, path: Path) -> bool:
        """Rewrite a regular file with its secrets redacted (same mode, atomic); True if it changed."""
        path = Path(path)
        if self._pattern is None or path.is_symlink() or not path.is_file():
            return False
        if not self.file_has_secret(path):
            return False
        data = path.read_bytes()
        cleaned = self.scrub_bytes(data)
        if cleaned == data:
            return False
        mode = path.stat().st_mode & 0o7777
        tmp = path.with_name(f".{path.name}.redact-{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            view = memoryview(cleaned)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        return True

    def files_with_secrets(self, root: Path) -> list[str]:
        """Relative paths of the regular files under `root` (symlinks not followed) holding a secret."""
        root = Path(root)
        hits: list[str] = []
        if self._pattern is None or not root.is_dir():
            return hits
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames.sort()
            for name in sorted(filenames):
                full = Path(dirpath) / name
                if full.is_symlink() or not full.is_file():
                    continue
                if self.file_has_secret(full):
                    hits.append(str(full.relative_to(root)))
        return hits


def scrub(text: str, extra: Iterable[str] = ()) -> str:
    """`text` with every registered secret (and `extra`) redacted."""
    return Redactor(extra).scrub(text)


def scrub_obj(obj, extra: Iterable[str] = ()):
    return Redactor(extra).scrub_obj(obj)


__all__ = ["Redactor", "REDACTED", "register", "registered", "encoded_forms", "scrub", "scrub_obj",
           "MIN_SECRET_LEN"]
