"""Every archive sweep unpacks goes through sweep.tree.extract_tar (real archives, real files): the
crafted CVE-2025-4517 archive, which writes outside through tarfile's own `data` filter on this
machine's interpreters, writes nothing outside through extract_tar on each of them; links, hard
links and devices are refused, names cannot leave the destination, only the write paths come back,
zeros stay holes and the size bound stops the unpacking before it is crossed."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from sweep.tree import ExtractRefused, extract_tar

REPO = Path(__file__).resolve().parents[1]
PYENV = Path.home() / ".pyenv" / "versions"
INTERPRETERS = [pytest.param(sys.executable, id="venv")] + [
    pytest.param(str(PYENV / v / "bin" / "python3"), id=f"pyenv-{v}",
                 marks=pytest.mark.skipif(not (PYENV / v / "bin" / "python3").exists(), reason=f"no pyenv {v}"))
    for v in ("3.12.1", "3.13.0")]


def cve_2025_4517_archive(dest: Path) -> bytes:
    """The attack of CPython's own regression test for CVE-2025-4517: directories and symlinks whose
    expansion overflows PATH_MAX, so `os.path.realpath` in the filter stops expanding, then a link
    to the top and links through it to a file outside, overwritten and joined by a new one."""
    buf = io.BytesIO()
    steps = "abcdefghijklmnop"
    max_path = os.pathconf(dest.parent, "PC_PATH_MAX")
    component = "d" * ((max_path - (len(str(dest)) + 1)) // (len(steps) + 1))

    def add(tar, name, *, kind=tarfile.REGTYPE, link="", data=b""):
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.size, info.mode = kind, link, len(data), 0o777 if kind == tarfile.DIRTYPE else 0o644
        tar.addfile(info, io.BytesIO(data) if data else None)
    with tarfile.open(fileobj=buf, mode="w") as tar:
        path = ""
        for step in steps:
            add(tar, os.path.join(path, component), kind=tarfile.DIRTYPE)
            add(tar, os.path.join(path, step), kind=tarfile.SYMTYPE, link=component)
            path = os.path.join(path, component)
        linkpath = os.path.join(*steps, "l" * 254)
        add(tar, linkpath, kind=tarfile.SYMTYPE, link=os.path.join(*[".."] * len(steps)))
        add(tar, "escape", kind=tarfile.SYMTYPE, link=os.path.join(linkpath, ".."))
        add(tar, "flaglink", kind=tarfile.LNKTYPE, link=os.path.join("escape", "flag"))
        add(tar, "flaglink", data=b"overwrite")
        add(tar, "escape/newfile", data=b"new")
    return buf.getvalue()


RUN = '''import io, sys, tarfile
sys.path.insert(0, sys.argv[1])
data = open(sys.argv[2], "rb").read()
if sys.argv[4] == "data-filter":
    try:
        tarfile.open(fileobj=io.BytesIO(data)).extractall(sys.argv[3], filter="data")
        print("extracted")
    except Exception as exc:
        print("refused", type(exc).__name__)
else:
    from sweep.tree import ExtractRefused, extract_tar
    try:
        extract_tar(io.BytesIO(data), sys.argv[3])
        print("extracted")
    except ExtractRefused as exc:
        print("refused", exc.message[:200])
'''


@pytest.mark.parametrize("python", INTERPRETERS)
def test_the_cve_2025_4517_archive_writes_nothing_outside(python, tmp_path):
    outer = tmp_path / "o"
    outer.mkdir()
    (outer / "flag").write_text("original\n")
    archive = tmp_path / "poc.tar"
    for how in ("data-filter", "extract_tar"):
        dest = outer / f"dest-{how}"
        dest.mkdir()
        archive.write_bytes(cve_2025_4517_archive(dest))
        said = subprocess.run([python, "-I", "-c", RUN, str(REPO), str(archive), str(dest), how], capture_output=True,
                              text=True, timeout=120)
        assert said.returncode == 0, said.stderr
        outside = sorted(p.name for p in outer.iterdir() if not p.name.startswith("dest-"))
        if how == "data-filter":
            # the control: on an interpreter without the fix, tarfile's filter lets it out
            live = outside != ["flag"] or (outer / "flag").read_text() != "original\n"
            if not live:
                pytest.skip(f"{python} has the CVE-2025-4517 fix: the control attack is not live there")
            for p in outer.iterdir():
                if not p.name.startswith("dest-"):
                    p.unlink()
            (outer / "flag").write_text("original\n")
        else:
            assert said.stdout.startswith("refused") and "is a symlink" in said.stdout, said.stdout
            assert outside == ["flag"] and (outer / "flag").read_text() == "original\n"


def tar_of(members: list[tuple[str, bytes | None, dict]]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data, extra in members:
            info = tarfile.TarInfo(name)
            for key, value in extra.items():
                setattr(info, key, value)
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    buf.seek(0)
    return buf


@pytest.mark.parametrize("member,why", [
    (("link", None, {"type": tarfile.SYMTYPE, "linkname": "inside"}), "is a symlink"),
    (("hard", None, {"type": tarfile.LNKTYPE, "linkname": "a.txt"}), "is a hard link"),
    (("dev", None, {"type": tarfile.CHRTYPE, "devmajor": 1, "devminor": 3}), "a device or FIFO"),
    (("fifo", None, {"type": tarfile.FIFOTYPE}), "a device or FIFO"),
    (("../up.txt", b"x", {}), "leaves the destination"),
    (("/etc/abs.txt", b"x", {}), "leaves the destination"),
])
def test_links_devices_and_names_leaving_are_refused(tmp_path, member, why):
    with pytest.raises(ExtractRefused) as info:
        extract_tar(tar_of([("a.txt", b"a", {}), member]), tmp_path / "out")
    assert why in info.value.message
    assert not (tmp_path / "up.txt").exists() and not Path("/etc/abs.txt").exists()


def test_a_link_planted_on_the_host_side_is_not_followed(tmp_path):
    """The destination already holds `repo` as a link out (as a copy-back target could): a member
    under `repo/` fails its O_NOFOLLOW open instead of landing where the link points."""
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "out"
    dest.mkdir()
    os.symlink(outside, dest / "repo")
    with pytest.raises(ExtractRefused):
        extract_tar(tar_of([("repo/x.txt", b"pwned", {})]), dest)
    assert list(outside.iterdir()) == []


def test_only_the_write_paths_come_back_and_zeros_stay_holes(tmp_path):
    zeros = bytes(8 << 20)
    archive = tar_of([("./repo/", None, {"type": tarfile.DIRTYPE}), ("./repo/a.py", b"print(1)\n", {"mode": 0o755}),
                      ("./repo/zeros.bin", zeros, {}), ("./other/big.bin", zeros, {}),
                      ("./.sweep-io/out.json", b"{}", {})])
    total = extract_tar(archive, tmp_path / "back", only=["repo", ".sweep-io/out.json"])
    assert total == (8 << 20) + 9 + 2
    assert not (tmp_path / "back" / "other").exists()
    assert os.stat(tmp_path / "back" / "repo" / "a.py").st_mode & 0o100
    st = os.stat(tmp_path / "back" / "repo" / "zeros.bin")
    assert st.st_size == 8 << 20 and st.st_blocks * 512 < 1 << 20


def test_the_size_bound_stops_before_the_member_that_crosses_it(tmp_path):
    archive = tar_of([("repo/a.bin", b"a" * 1000, {}), ("repo/b.bin", b"b" * 1000, {})])
    with pytest.raises(ExtractRefused) as info:
        extract_tar(archive, tmp_path / "back", max_bytes=1500)
    assert info.value.limit and "more than 1500 bytes" in info.value.message
    assert (tmp_path / "back" / "repo" / "a.bin").is_file() and not (tmp_path / "back" / "repo" / "b.bin").exists()
