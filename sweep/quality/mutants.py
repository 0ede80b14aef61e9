"""Mechanical mutants: wrong solutions derived from the reference patch, with no model.

A task whose tests accept a wrong solution is not verified. The cheapest wrong solutions are the
reference patch itself, slightly broken: each hunk alone, each hunk left out, each changed line
reverted, and on the lines the patch adds: a comparison flipped, a returned expression replaced by
a constant or None/nil/null, an integer literal off by one, an `if` condition dropped, `and`/`or`
(`&&`/`||`) swapped. Upstream projects later add exactly the tests such mutants show missing.

Everything here is pure and deterministic: the same patch gives the same mutants in the same order,
so a re-run of the probe phase judges the same candidates. Every mutant keeps the reference's
preimage (context and removed lines) unchanged or drops whole hunks, so it applies to the base
wherever the reference does; `derive_mutants` can still be given an `accept` check (git apply
--check against the base, in sweep/quality/probes.py) that runs before the bound is applied.

Token rewriting is line-based: string literals and comments are masked first (per language:
Python, Go, Rust, JavaScript/TypeScript, Java; other files get only the structural mutants), so a
`<` inside a string is never flipped.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

LANGUAGES = {".py": "python", ".go": "go", ".rs": "rust", ".js": "javascript", ".mjs": "javascript",
             ".cjs": "javascript", ".jsx": "javascript", ".ts": "javascript", ".tsx": "javascript",
             ".java": "java"}

# Documentation changes nothing a test can see: a hunk there left out (or kept alone, beside the
# code's hunks) is an equivalent mutant by construction, and a PR that fixes code and adds a
# changelog line would be "weak" for it. Such files are left out of the patch before derivation.
DOC_SUFFIXES = (".md", ".markdown", ".rst", ".adoc", ".asciidoc")
DOC_NAMES = ("changelog", "changes", "news", "history", "authors", "contributors")
DOC_DIRS = ("docs", "doc")


def is_documentation(path: str) -> bool:
    """Whether `path` (repository-relative) is documentation: a doc suffix, a CHANGELOG-like name
    (bare or .txt: news.py is code), or anything under a top-level docs/ or doc/ directory."""
    parts = path.split("/")
    name = parts[-1].lower()
    stem, _, suffix = name.partition(".")
    return (name.endswith(DOC_SUFFIXES) or (stem in DOC_NAMES and suffix in ("", "txt"))
            or (len(parts) > 1 and parts[0].lower() in DOC_DIRS))


# The kinds, in the order the bound takes them round-robin (one of each kind before a second of any).
KINDS = ("hunk_left_out", "hunk_alone", "line_reverted", "return_constant", "comparison_flipped",
         "condition_dropped", "boolean_swapped", "integer_off_by_one")


@dataclass(frozen=True)
class Mutant:
    id: str                 # stable within one patch: "<kind>:<path>:<line>[:<n>]" or "<kind>:<unit>"
    kind: str               # one of KINDS
    path: str               # the file it changes ("" for a structural mutant over several files)
    line: int | None        # the reference's line it changes (new side; old side for a removed line)
    description: str
    patch: bytes


# ---- the patch model ---------------------------------------------------------------------------

@dataclass
class Line:
    tag: str                # " ", "-" or "+"
    text: str               # without the tag and the newline
    no_newline: bool = False    # followed by "\ No newline at end of file"


@dataclass
class Hunk:
    old_start: int
    section: str            # what follows the second "@@" (a function name), kept as is
    lines: list[Line]


@dataclass
class FilePatch:
    header: list[str]       # "diff --git ...", "index ...", "--- ...", "+++ ...", mode lines
    path: str
    hunks: list[Hunk] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)   # a binary patch's body, kept whole

    @property
    def deleted(self) -> bool:
        return any(h.startswith("deleted file mode") for h in self.header)


_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


class PatchProblem(ValueError):
    """The text is not a unified diff this module can rewrite."""


def parse_patch(data: bytes) -> list[FilePatch]:
    text = data.decode("utf-8", errors="surrogateescape")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    files: list[FilePatch] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("diff --git "):
            if files:
                raise PatchProblem(f"line {i + 1}: unexpected {lines[i][:60]!r}")
            i += 1          # text before the first file (a commit message): not part of any file
            continue
        fp = FilePatch(header=[lines[i]], path=_path_of(lines[i]))
        i += 1
        while i < len(lines) and not lines[i].startswith(("@@ ", "diff --git ", "GIT binary patch")):
            fp.header.append(lines[i])
            if lines[i].startswith("+++ b/"):
                fp.path = lines[i][6:]
            elif lines[i].startswith("--- a/") and fp.path == "":
                fp.path = lines[i][6:]
            i += 1
        if i < len(lines) and lines[i].startswith("GIT binary patch"):
            while i < len(lines) and not lines[i].startswith("diff --git "):
                fp.opaque.append(lines[i])
                i += 1
        while i < len(lines) and lines[i].startswith("@@ "):
            m = _HUNK_RE.match(lines[i])
            if m is None:
                raise PatchProblem(f"line {i + 1}: malformed hunk header {lines[i][:60]!r}")
            old_len = int(m.group(2)) if m.group(2) is not None else 1
            new_len = int(m.group(4)) if m.group(4) is not None else 1
            hunk = Hunk(old_start=int(m.group(1)), section=m.group(5), lines=[])
            i += 1
            seen_old = seen_new = 0
            while i < len(lines) and (seen_old < old_len or seen_new < new_len or lines[i].startswith("\\")):
                raw = lines[i]
                if raw.startswith("\\"):
                    if hunk.lines:
                        hunk.lines[-1].no_newline = True
                    i += 1
                    continue
                tag, body = (raw[:1] or " "), raw[1:]
                if tag not in " -+":
                    raise PatchProblem(f"line {i + 1}: hunk line starts with {tag!r}")
                hunk.lines.append(Line(tag, body))
                seen_old += tag in " -"
                seen_new += tag in " +"
                i += 1
            fp.hunks.append(hunk)
        files.append(fp)
    return files


def _path_of(diff_line: str) -> str:
    # "diff --git a/x b/x": the b/ side (exact for paths without " b/" in them; "+++ b/" overrides)
    rest = diff_line[len("diff --git "):]
    half = rest.rfind(" b/")
    return rest[half + 3:] if half >= 0 else ""


def _spec(start: int, length: int) -> str:
    return f"{start}" if length == 1 else f"{start},{length}"


def _new_start(h: Hunk, delta: int) -> int:
    """The hunk's first line on the new side, `delta` being what the file's earlier hunks added.
    A side with no lines names the line before the hunk (git's convention)."""
    old_len = sum(ln.tag != "+" for ln in h.lines)
    new_len = sum(ln.tag != "-" for ln in h.lines)
    start = h.old_start + delta
    if old_len == 0 and new_len:
        start += 1
    elif new_len == 0 and old_len:
        start -= 1
    return start


def render_patch(files: list[FilePatch]) -> bytes:
    """The files back as a unified diff, hunk headers recomputed from their lines (a file whose
    every hunk is gone is left out; a file that only had hunks and now has none likewise)."""
    out: list[str] = []
    for fp in files:
        hunks = [h for h in fp.hunks if any(ln.tag != " " for ln in h.lines)]
        if fp.hunks and not hunks:
            continue
        out.extend(fp.header)
        out.extend(fp.opaque)
        delta = 0
        for h in hunks:
            old_len = sum(ln.tag != "+" for ln in h.lines)
            new_len = sum(ln.tag != "-" for ln in h.lines)
            new_start = _new_start(h, delta)
            out.append(f"@@ -{_spec(h.old_start, old_len)} +{_spec(max(new_start, 0), new_len)} @@{h.section}")
            for ln in h.lines:
                out.append(ln.tag + ln.text)
                if ln.no_newline:
                    out.append("\\ No newline at end of file")
            delta += new_len - old_len
    return ("\n".join(out) + "\n").encode("utf-8", errors="surrogateescape") if out else b""


def _copy(files: list[FilePatch]) -> list[FilePatch]:
    return [FilePatch(header=list(f.header), path=f.path, opaque=list(f.opaque),
                      hunks=[Hunk(h.old_start, h.section, [Line(ln.tag, ln.text, ln.no_newline) for ln in h.lines])
                             for h in f.hunks]) for f in files]


# ---- masking strings and comments ----------------------------------------------------------------

MASK = "\x00"               # a string literal's characters
COMMENT = "\x01"            # a comment's
_C_LIKE_STRINGS = {"go": "\"'`", "rust": '"', "javascript": "\"'`", "java": "\"'"}
_RUST_CHAR_RE = re.compile(r"'(?:\\.|[^'\\])'")


def mask_code(text: str, language: str) -> str:
    """`text` (one line of code) with every string literal replaced by MASK characters and every
    comment by COMMENT characters, same length, so a match in the result is a position in code."""
    out = list(text)
    quotes = "\"'" if language == "python" else _C_LIKE_STRINGS.get(language, "")
    comment = "#" if language == "python" else "//"
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith(comment, i):
            out[i:] = COMMENT * (n - i)
            break
        if language != "python" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out[i:end] = COMMENT * (end - i)
            i = end
            continue
        if language == "rust" and c == "'":
            m = _RUST_CHAR_RE.match(text, i)
            if m:
                out[i:m.end()] = MASK * (m.end() - i)
                i = m.end()
            else:
                i += 1          # a lifetime ('a): code
            continue
        if c in quotes:
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            end = min(j + 1, n)
            out[i:end] = MASK * (end - i)
            i = end
            continue
        i += 1
    return "".join(out)


def _masked_new_side(fp: FilePatch, hunk: Hunk, language: str) -> list[str | None]:
    """Per hunk line, its masked code, or None when the line may be inside a multi-line string or
    comment (a Python triple-quoted string, a C-like block comment) and must not be rewritten."""
    out: list[str | None] = []
    inside = False
    for ln in hunk.lines:
        if ln.tag == "-":
            out.append(None)
            continue
        text = ln.text
        if language == "python":
            toggles = text.count('"""') + text.count("'''")
            touched = inside or toggles > 0
            inside = inside ^ (toggles % 2 == 1)
        else:
            stripped = text.lstrip()
            opens = text.count("/*") > text.count("*/")
            touched = inside or opens or stripped.startswith("*")
            inside = (inside and "*/" not in text) or opens
        out.append(None if touched else mask_code(text, language))
    return out


# ---- token rewrites on one added line ---------------------------------------------------------------

_FLIP = {"==": "!=", "!=": "==", "===": "!==", "!==": "===", "<": ">=", ">": "<=", "<=": ">", ">=": "<"}
_CMP_RE = re.compile(r"(?<![=!<>])(===|!==)(?!=)|(?<![=!<>])(==|!=|<=|>=)(?![=>])|(?<=\s)(<|>)(?=\s)")
_INT_RE = re.compile(r"(?<![\w.])(\d+)(?![\w.])")
_NONE = {"python": "None", "go": "nil", "rust": "Default::default()", "javascript": "null", "java": "null"}
_TRUE = {"python": "True"}
_BOOL_OPS = {"python": (r"\band\b", r"\bor\b", "and", "or")}
_C_BOOL = (r"&&", r"\|\|", "&&", "||")

Edit = tuple[int, int, str, str, str]     # start, end, replacement, kind, description


def _balanced(code: str) -> bool:
    depth = 0
    for c in code:
        depth += c in "([{"
        depth -= c in ")]}"
        if depth < 0:
            return False
    return depth == 0


MAX_TEST_LITERALS = 8        # literals of the PR's tests tried as a returned constant, at most
_NUMBER_RE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w.])")
_NEGATIVE_BEFORE = ("(", ",", "[", "{", "=", ":", "return", "")


def test_literals(files: list[tuple[str, str]], limit: int = MAX_TEST_LITERALS) -> list[str]:
    """The numeric and string literals on the given lines of test code (`files`: (path, text) pairs,
    e.g. the lines a PR adds to its test files), as source text valid in every language of
    LANGUAGES: numbers (a `-` kept when it is a sign, not a subtraction) and strings re-quoted in
    double quotes (only those without backslashes or quotes inside). Masked with `mask_code`, so a
    number inside a string or comment is not taken; in order of first appearance, deduplicated, at
    most `limit`. Files of no known language give none."""
    out: dict[str, None] = {}
    for path, text in files:
        language = next((lang for ext, lang in LANGUAGES.items() if path.endswith(ext)), None)
        if language is None:
            continue
        hunk = Hunk(0, "", [Line("+", t) for t in text.split("\n")])
        for ln, masked in zip(hunk.lines, _masked_new_side(FilePatch([], path), hunk, language), strict=True):
            if masked is None or masked.lstrip().startswith(("import ", "from ", "package ", "use ", "#")):
                continue
            for lit in _line_literals(ln.text, masked):
                out.setdefault(lit)
    return list(out)[:limit]


def _line_literals(text: str, masked: str) -> list[str]:
    found: list[tuple[int, str]] = []
    for m in _NUMBER_RE.finditer(masked):
        before = masked[:m.start()]
        sign = ""
        if before.endswith("-"):
            rest = before[:-1].rstrip()
            if rest.endswith(_NEGATIVE_BEFORE) or not rest:
                sign = "-"
        found.append((m.start(), sign + m.group(1)))
    for m in re.finditer(MASK + "+", masked):
        literal = text[m.start():m.end()]
        body = literal[1:-1]
        before = masked[m.start() - 1:m.start()] if m.start() else ""
        if (len(literal) >= 2 and literal[0] in "\"'" and literal[-1] == literal[0] and not before.isalnum()
                and not any(c in body for c in "\\\"'`$")):
            found.append((m.start(), f'"{body}"'))
    return [lit for _, lit in sorted(found)]


def _return_edits(text: str, masked: str, language: str, literals: Sequence[str] = ()) -> list[Edit]:
    code = masked.rstrip(COMMENT + " \t")       # a trailing comment stays as it is
    m = re.match(r"^(\s*return\s+)(.*?)(\s*;?\s*)$", code)
    if m is None or not m.group(2).strip():
        return []
    start, end = m.start(2), m.end(2)
    expr_masked = m.group(2)
    if not _balanced(expr_masked) or expr_masked.rstrip().endswith(("\\", ",", "(", "+", "-", "*", "and", "or")):
        return []           # the expression continues on the next line: rewriting half of it breaks the syntax
    if language == "go" and "," in _top_level(expr_masked):
        return []           # several results: no one constant fits
    expr = text[start:end]
    out: list[Edit] = []
    for constant in dict.fromkeys((*literals, _NONE[language], "0")):
        if language == "rust" and constant == "0" and constant not in literals:
            continue
        if language == "python" and (expr.strip(), constant.split(".")[0]) in (("False", "0"), ("True", "1")):
            continue        # 0 == False, 1 == True: near-equivalent, and a return_constant mutant is never excused
        if expr.strip() != constant:
            origin = " (a literal of the PR's tests)" if constant in literals else ""
            out.append((start, end, constant, "return_constant",
                        f"return {constant}{origin} instead of `{expr.strip()[:60]}`"))
    return out


def _top_level(code: str) -> str:
    depth, out = 0, []
    for c in code:
        depth += c in "([{"
        depth -= c in ")]}"
        out.append(c if depth == 0 else " ")
    return "".join(out)


def _condition_span(masked: str, language: str) -> tuple[int, int] | None:
    """The condition of an `if`/`elif`/`else if` on this line: (start, end) in the line, or None."""
    if language == "python":
        m = re.match(r"^\s*(?:if|elif)\s+(.*?):\s*(?:\S.*)?$", masked)
        if m is None or not _balanced(m.group(1)) or not m.group(1).strip():
            return None
        return m.start(1), m.end(1)
    m = re.search(r"(?<![\w.])if\b\s*", masked)
    if m is None:
        return None
    i = m.end()
    if language in ("go", "rust") and (i >= len(masked) or masked[i] != "("):
        brace = masked.find("{", i)
        if brace < 0 or not masked[i:brace].strip() or not _balanced(masked[i:brace]) or ";" in masked[i:brace]:
            return None
        cond = masked[i:brace].rstrip()
        return i, i + len(cond)
    if i >= len(masked) or masked[i] != "(":
        return None
    depth = 0
    for j in range(i, len(masked)):
        depth += masked[j] == "("
        depth -= masked[j] == ")"
        if depth == 0:
            return (i + 1, j) if masked[i + 1:j].strip() else None
    return None


def _condition_edits(text: str, masked: str, language: str) -> list[Edit]:
    span = _condition_span(masked, language)
    if span is None:
        return []
    start, end = span
    cond = text[start:end].strip()
    always = _TRUE.get(language, "true")
    if cond in (always, "1"):
        return []
    out: list[Edit] = [(start, end, always, "condition_dropped", f"condition `{cond[:60]}` dropped (always taken)")]
    and_re, or_re, _, _ = _BOOL_OPS.get(language, _C_BOOL)
    top = _top_level(masked[start:end])
    ops = [(m.start(), m.end()) for pat in (and_re, or_re) for m in re.finditer(pat, top)]
    if len(ops) == 1:
        (a, b), = ops
        left, right = text[start:start + a].strip(), text[start + b:end].strip()
        out.append((start, end, left, "condition_dropped", f"`{right[:40]}` dropped from `{cond[:60]}`"))
        out.append((start, end, right, "condition_dropped", f"`{left[:40]}` dropped from `{cond[:60]}`"))
    return out


def line_edits(text: str, masked: str, language: str, literals: Sequence[str] = ()) -> list[Edit]:
    """Every token rewrite of one added line, in a fixed order (`literals`: `test_literals`, tried
    first as a returned constant)."""
    edits: list[Edit] = []
    edits += _return_edits(text, masked, language, literals)
    for m in _CMP_RE.finditer(masked):
        op = m.group(0)
        edits.append((m.start(), m.end(), _FLIP[op], "comparison_flipped", f"`{op}` flipped to `{_FLIP[op]}`"))
    edits += _condition_edits(text, masked, language)
    and_re, or_re, and_op, or_op = _BOOL_OPS.get(language, _C_BOOL)
    for pat, new in ((and_re, or_op), (or_re, and_op)):
        for m in re.finditer(pat, masked):
            edits.append((m.start(), m.end(), new, "boolean_swapped", f"`{m.group(0)}` swapped for `{new}`"))
    stripped = masked.lstrip()
    if not stripped.startswith(("import ", "from ", "package ", "use ", "#")):
        for m in _INT_RE.finditer(masked):
            n = int(m.group(1))
            for off in (n + 1, n - 1):
                if off >= 0:
                    edits.append((m.start(), m.end(), str(off), "integer_off_by_one", f"`{n}` -> `{off}`"))
    return edits


# ---- deriving the mutants ------------------------------------------------------------------------

def _units(files: list[FilePatch]) -> list[tuple[int, int | None]]:
    """The patch's structural units: (file index, hunk index), or (file index, None) for a file
    with no hunks (a binary patch, a mode change)."""
    out: list[tuple[int, int | None]] = []
    for fi, fp in enumerate(files):
        if not fp.hunks:
            out.append((fi, None))
        out.extend((fi, hi) for hi in range(len(fp.hunks)))
    return out


def _select(files: list[FilePatch], keep: Callable[[tuple[int, int | None]], bool]) -> list[FilePatch]:
    out = []
    for fi, fp in enumerate(files):
        if not fp.hunks:
            if keep((fi, None)):
                out.append(fp)
            continue
        hunks = [h for hi, h in enumerate(fp.hunks) if keep((fi, hi))]
        if hunks:
            out.append(FilePatch(header=fp.header, path=fp.path, hunks=hunks, opaque=fp.opaque))
    return out


def _unit_name(files: list[FilePatch], unit: tuple[int, int | None]) -> str:
    fi, hi = unit
    fp = files[fi]
    return f"{fp.path}" if hi is None else f"{fp.path}@{fp.hunks[hi].old_start}"


def _structural(files: list[FilePatch]) -> dict[str, list[tuple[str, str, str, int | None, str, list[FilePatch]]]]:
    units = _units(files)
    out: dict[str, list] = {"hunk_left_out": [], "hunk_alone": []}
    if len(units) < 2:
        return out      # one hunk: alone is the reference, left out is the empty solution (both gates)
    for unit in units:
        name = _unit_name(files, unit)
        path = files[unit[0]].path
        others = [u for u in units if u != unit]
        out["hunk_left_out"].append((f"hunk_left_out:{name}", "hunk_left_out", path, None,
                                     f"the reference without its hunk {name}", _select(files, others.__contains__)))
        out["hunk_alone"].append((f"hunk_alone:{name}", "hunk_alone", path, None,
                                  f"only the hunk {name} of the reference", _select(files, [unit].__contains__)))
    return out


def _revert_units(hunk: Hunk) -> list[tuple[int | None, int | None]]:
    """The hunk's changed lines as (removed index, added index) pairs: within each run of changed
    lines the i-th removed line is paired with the i-th added one; the rest stand alone."""
    out: list[tuple[int | None, int | None]] = []
    i = 0
    while i < len(hunk.lines):
        if hunk.lines[i].tag == " ":
            i += 1
            continue
        minus: list[int] = []
        plus: list[int] = []
        while i < len(hunk.lines) and hunk.lines[i].tag != " ":
            (minus if hunk.lines[i].tag == "-" else plus).append(i)
            i += 1
        for k in range(max(len(minus), len(plus))):
            out.append((minus[k] if k < len(minus) else None, plus[k] if k < len(plus) else None))
    return out


def _line_numbers(hunk: Hunk, new_start: int) -> tuple[dict[int, int], dict[int, int]]:
    """Hunk line index -> its line number on the new side (context and added) and on the old side."""
    new, old = {}, {}
    n, o = new_start, hunk.old_start
    for idx, ln in enumerate(hunk.lines):
        if ln.tag != "-":
            new[idx] = n
            n += 1
        if ln.tag != "+":
            old[idx] = o
            o += 1
    return new, old


def _line_level(files: list[FilePatch], literals: Sequence[str]) -> dict[str, list]:
    out: dict[str, list] = {k: [] for k in KINDS if k not in ("hunk_left_out", "hunk_alone")}
    for fi, fp in enumerate(files):
        language = next((lang for ext, lang in LANGUAGES.items() if fp.path.endswith(ext)), None)
        delta = 0
        for hi, hunk in enumerate(fp.hunks):
            new_nums, old_nums = _line_numbers(hunk, _new_start(hunk, delta))
            delta += sum(ln.tag == "+" for ln in hunk.lines) - sum(ln.tag == "-" for ln in hunk.lines)
            if not fp.deleted:
                for minus, plus in _revert_units(hunk):
                    line_no = new_nums[plus] if plus is not None else old_nums[minus]  # type: ignore[index]
                    mutated = _copy(files)
                    lines = mutated[fi].hunks[hi].lines
                    if minus is not None:
                        lines[minus].tag = " "
                    if plus is not None:
                        lines[plus].tag = "#drop"
                    mutated[fi].hunks[hi].lines = [ln for ln in lines if ln.tag != "#drop"]
                    side = "+" if plus is not None else "-"
                    what = (f"line {line_no} reverted to the base" if plus is not None and minus is not None
                            else f"added line {line_no} left out" if plus is not None
                            else f"removed line {line_no} (base) kept")
                    out["line_reverted"].append((f"line_reverted:{fp.path}:{side}{line_no}", "line_reverted",
                                                 fp.path, line_no, what, mutated))
            if language is None:
                continue
            masked_lines = _masked_new_side(fp, hunk, language)
            for idx, ln in enumerate(hunk.lines):
                masked = masked_lines[idx]
                if ln.tag != "+" or masked is None:
                    continue
                for n, (start, end, new, kind, what) in enumerate(line_edits(ln.text, masked, language, literals)):
                    mutated = _copy(files)
                    target = mutated[fi].hunks[hi].lines[idx]
                    target.text = ln.text[:start] + new + ln.text[end:]
                    out[kind].append((f"{kind}:{fp.path}:{new_nums[idx]}:{n}", kind, fp.path, new_nums[idx],
                                      f"{fp.path}:{new_nums[idx]}: {what}", mutated))
    return out


def derive_mutants(patch: bytes, *, limit: int | None = None, accept: Callable[[bytes], bool] | None = None,
                   literals: Sequence[str] = ()) -> list[Mutant]:
    """The mutants of `patch`, deterministic: taken round-robin over KINDS (one of each kind before
    a second of any), duplicates (same patch bytes) and no-ops (empty, or the reference itself)
    dropped, those `accept` refuses dropped, at most `limit` (None: all). Documentation files
    (`is_documentation`) are left out of every mutant: they change nothing a test can see.
    `literals` (`test_literals` of the PR's test changes) are tried as returned constants, ahead
    of None/0 within return_constant, so a test that checks one input meets its hard-coded answer."""
    files = [fp for fp in parse_patch(patch) if not is_documentation(fp.path)]
    reference = render_patch(files)
    pools = {**_structural(files), **_line_level(files, literals)}
    literal_first = sorted(pools["return_constant"], key=lambda c: "a literal of the PR's tests" not in c[4])
    pools["return_constant"] = literal_first
    seen = {reference, b""}
    out: list[Mutant] = []
    for cand in _round_robin([pools.get(k, []) for k in KINDS]):
        if limit is not None and len(out) >= limit:
            break
        mid, kind, path, line, what, mutated = cand
        data = render_patch(mutated)
        if data in seen:
            continue
        seen.add(data)
        if accept is not None and not accept(data):
            continue
        out.append(Mutant(id=mid, kind=kind, path=path, line=line, description=what, patch=data))
    return out


def _round_robin(pools: list[list]) -> Iterator:
    k = 0
    while any(k < len(p) for p in pools):
        for p in pools:
            if k < len(p):
                yield p[k]
        k += 1
