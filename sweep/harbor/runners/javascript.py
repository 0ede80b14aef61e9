"""What the JavaScript runners share: a test's id is its file and its title path.

`FILE > describe > ... > title` (`test/calc.test.js > calc > adds`): the file relative to the
repository, the suites and the test's own title. Two tests with one title path in one file are two
ids (`... #2`, in declaration order): a JUnit reporter that collapses them hides a failure.
"""
from __future__ import annotations

import re
from typing import Sequence

from sweep.harbor.runners.base import base_id, regex_alternation

SEP = " > "


def js_id(file: str, titles: Sequence[str]) -> str:
    return SEP.join([file, *[" ".join(t.split()) for t in titles]])


def id_file(test_id: str) -> str:
    return test_id.split(SEP, 1)[0]


def id_titles(test_id: str) -> list[str]:
    return base_id(test_id).split(SEP)[1:]


def files_of(ids: Sequence[str]) -> list[str]:
    out: list[str] = []
    for test_id in ids:
        if id_file(test_id) not in out:
            out.append(id_file(test_id))
    return out


def name_pattern(ids: Sequence[str], joiner: str = " ") -> str:
    """A regex matching exactly the ids' full names (suites and title joined by `joiner`)."""
    names = sorted({joiner.join(id_titles(i)) for i in ids})
    return regex_alternation(names)


def source_names(test_id: str) -> list[str]:
    """The words of the test's own title (a title built from a template, `adds %i`, keeps its
    words but not its values): each must appear in the test's file."""
    titles = id_titles(test_id)
    words = re.findall(r"[A-Za-z_][A-Za-z_]{2,}", titles[-1] if titles else "")
    return list(dict.fromkeys(words))
