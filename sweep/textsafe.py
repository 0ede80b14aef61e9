"""Untrusted text made safe to show: control characters become visible escapes.

PR titles and bodies, test output and agent output are untrusted. Printed raw, a test that writes
`ESC ] 0 ; ... BEL ESC [ 2 J ... ALL GOOD` retitles the operator's terminal, clears the screen and
forges a message; a CR or backspaces overwrite what came before on the line; a bidi override makes
text read differently from what it is. Every such character is replaced by a visible escape
(`\\x1b`, `\\r`, `\\x9b`, `\\u202e`), so the operator sees exactly which bytes were there, on a
terminal and in a pipe alike (escaping does not depend on isatty: a log piped today is catted
tomorrow).

Escaped: C0 controls (U+0000-U+001F, including ESC, BEL, CR, backspace, and newline and tab unless
the caller keeps them), DEL, C1 controls (U+0080-U+009F, e.g. the single-character CSI U+009B),
bidi controls (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069), the line and paragraph
separators U+2028/U+2029, and lone surrogates left by undecodable bytes.

Apply it at the output boundary: `line()` to each line a verb prints or writes into report.md, and
`json_text()` to JSON output (JSON already escapes C0; this adds C1, bidi and the separators).
"""
from __future__ import annotations

_BIDI = (0x061C, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068, 0x2069)
_NAMED = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}


def _escape_of(cp: int) -> str:
    if cp in _NAMED:
        return _NAMED[cp]
    if cp <= 0xFF:
        return f"\\x{cp:02x}"
    return f"\\u{cp:04x}"


def _table(keep: str) -> dict[int, str]:
    codes = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), *_BIDI, 0x2028, 0x2029, *range(0xD800, 0xE000)]
    return {cp: _escape_of(cp) for cp in codes if chr(cp) not in keep}


_LINE = _table("")
_BLOCK = _table("\n\t")
_JSON = {cp: f"\\u{cp:04x}" for cp in (0x7F, *range(0x80, 0xA0), *_BIDI, 0x2028, 0x2029)}


def line(text: object) -> str:
    """One line of output: every control character escaped, newlines included."""
    return str(text).translate(_LINE)


def block(text: object) -> str:
    """Multi-line output: like line(), but newlines and tabs are kept."""
    return str(text).translate(_BLOCK)


def json_text(text: str) -> str:
    """JSON text (from a JSON encoder, which escapes C0 already) with C1/bidi/separators escaped too.

    These characters can only occur inside JSON strings, where `\\uXXXX` is their valid spelling.
    Lone surrogates cannot come from a UTF-8 encoder, so they need no handling here.
    """
    return text.translate(_JSON)


def is_clean(text: str) -> bool:
    return line(text) == text


__all__ = ["line", "block", "json_text", "is_clean"]
