"""sweep/textsafe.py: every control character an attacker could use is shown, never obeyed."""
from sweep import textsafe

ATTACK = "\x1b]0;pwned\x07\x1b[2J\x1b[H\rALL GOOD\x08\x08\x9b31m\u202eevil\u2066\u2028x\udcff"


def test_every_dangerous_character_is_escaped():
    shown = textsafe.line(ATTACK)
    for ch in "\x1b\x07\r\x08\x9b\u202e\u2066\u2028\udcff\n":
        assert ch not in shown
    assert shown.startswith("\\x1b]0;pwned\\x07\\x1b[2J")
    assert "ALL GOOD" in shown and "\\u202e" in shown and "\\x9b" in shown
    shown.encode("utf-8")      # a lone surrogate no longer breaks the terminal's encoder


def test_block_keeps_newlines_and_tabs_only():
    assert textsafe.block("a\tb\nc\x1bd\re") == "a\tb\nc\\x1bd\\re"
    assert textsafe.line("a\nb") == "a\\nb"


def test_ordinary_text_is_unchanged():
    text = "Fix clamp() — naïve résumé 日本語 ✓ [REDACTED] 100%"
    assert textsafe.line(text) == text and textsafe.is_clean(text)


def test_json_text_escapes_what_json_encoders_leave_raw():
    import json

    import orjson
    raw = orjson.dumps({"detail": ATTACK.replace("\udcff", "")}).decode()
    assert "\x9b" in raw and "\u202e" in raw        # orjson leaves C1 and bidi raw
    safe = textsafe.json_text(raw)
    assert "\x9b" not in safe and "\u202e" not in safe
    assert json.loads(safe) == json.loads(raw)
