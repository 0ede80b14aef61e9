"""sweep/redact.py finds a secret in every spelling it promises, in text, streams and files."""
import base64
import json
import os
import stat
import subprocess
import urllib.parse
import uuid

import pytest

from sweep.redact import REDACTED, Redactor


def secret() -> str:
    return "sk-ant-api03-" + uuid.uuid4().hex + "+/x"      # + and / make std and urlsafe base64 differ


def test_the_plain_value_is_redacted_in_text_and_bytes():
    s = secret()
    red = Redactor([s], include_registered=False)
    assert red.scrub(f"key={s};") == f"key={REDACTED};"
    assert red.scrub_bytes(f"key={s};".encode()) == f"key={REDACTED};".encode()


@pytest.mark.parametrize("align", [0, 1, 2])
@pytest.mark.parametrize("encode", [base64.b64encode, base64.urlsafe_b64encode], ids=["std", "urlsafe"])
def test_base64_of_the_value_is_found_at_every_alignment(align, encode):
    s = secret()
    blob = encode(os.urandom(align) + s.encode() + os.urandom(4)).decode()
    red = Redactor([s], include_registered=False)
    assert red.found_in(blob)
    cleaned = red.scrub(f"header {blob} trailer")
    kept = cleaned.split()[1]
    assert REDACTED in kept
    assert len(kept.replace(REDACTED, "")) < 16 < len(blob)     # only the non-secret edges are left


def test_base64_wrapped_by_the_base64_tool_is_found():
    s = secret()
    wrapped = subprocess.run(["base64", "-w", "20"], input=("prefix " + s).encode(), capture_output=True,
                             check=True).stdout.decode()
    assert "\n" in wrapped.strip()
    assert Redactor([s], include_registered=False).found_in(wrapped)


def test_hex_and_url_encodings_are_found():
    s = secret()
    red = Redactor([s], include_registered=False)
    for form in (s.encode().hex(), s.encode().hex().upper(), urllib.parse.quote(s, safe=""),
                 urllib.parse.quote_plus(s)):
        assert red.found_in(f"x {form} y"), form
        assert REDACTED in red.scrub(f"x {form} y")


def test_a_value_split_by_whitespace_or_newlines_is_found():
    s = secret()
    red = Redactor([s], include_registered=False)
    split_lines = "\n".join(s[i:i + 7] for i in range(0, len(s), 7))
    assert red.scrub("before\n" + split_lines + "\nafter") == f"before\n{REDACTED}\nafter"
    assert red.found_in(" ".join(s))                          # every character apart
    assert red.found_in(json.dumps(split_lines))              # as JSON stores it: \n escapes


def test_short_values_and_ordinary_text_are_left_alone():
    red = Redactor(["ab", "xyz"], include_registered=False)
    assert not red
    assert red.scrub("ab xyz") == "ab xyz"
    text = "the quick brown fox " * 100
    assert Redactor([secret()], include_registered=False).scrub(text) == text


def test_a_stream_split_anywhere_is_redacted():
    s = secret()
    red = Redactor([s], include_registered=False)
    b64 = base64.b64encode(s.encode()).decode()
    data = f"a {s} b {b64} c\n".encode()
    out = b""
    for i in range(0, len(data), 3):
        out += red.feed(data[i:i + 3])
    out += red.flush()
    assert out.count(REDACTED.encode()) == 2
    assert s.encode() not in out and b64[:-4].encode() not in out


def test_scrub_file_keeps_the_mode_and_lists_files(tmp_path):
    s = secret()
    (tmp_path / "d").mkdir()
    leaky = tmp_path / "d" / "instruction.md"
    leaky.write_text("solve it\n" + base64.b64encode(s.encode()).decode() + "\n")
    os.chmod(leaky, 0o644)
    (tmp_path / "clean.txt").write_text("nothing here\n")
    red = Redactor([s], include_registered=False)
    assert red.files_with_secrets(tmp_path) == ["d/instruction.md"]
    assert red.scrub_file(leaky)
    assert stat.S_IMODE(leaky.stat().st_mode) == 0o644
    assert red.files_with_secrets(tmp_path) == []
    assert not red.scrub_file(tmp_path / "clean.txt")


def test_a_file_larger_than_one_chunk_is_scanned_across_the_chunk_boundary(tmp_path):
    from sweep import redact
    s = secret()
    big = tmp_path / "big.bin"
    with open(big, "wb") as fh:
        fh.write(b"x" * (redact.SCAN_CHUNK - 10))
        fh.write(s.encode())
        fh.write(b"y" * 100)
    assert Redactor([s], include_registered=False).file_has_secret(big)
