"""The daytona and modal download code unpacks through sweep.tree.extract_tar (the real daytona SDK
against the REST fake; modal's SDK surface on the stand-in that runs real processes): a sandbox
workspace holding link chains out is refused member by member with nothing written outside, and a
sparse file outside the write paths is never unpacked. 64 MiB here: the sandbox's GNU tar reads a
sparse file dense, and 2 GiB through the fakes took over 10 minutes on the loaded 2-core machine
(extract_tar's own handling of a 2 GiB file is in tests/test_extract.py and tests/test_host_bounds.py)."""
from __future__ import annotations

import os
import shutil

import pytest

from sweep.tree import ExtractRefused

pytest.importorskip("daytona")
pytest.importorskip("modal")

from tests.test_provider_daytona import fake, provider, spec, tags  # noqa: E402,F401
from tests.test_provider_modal_exec import setup  # noqa: E402,F401

HOSTILE = ("mkdir -p repo && echo ok > repo/ok.txt && ln -s ../../../.. repo/up && ln -s /etc repo/etc-link "
           "&& mkdir -p repo/d && ln -s ../up/tmp repo/d/chain")
SPARSE = "mkdir -p repo other && echo ok > repo/ok.txt && truncate -s 64M other/big.bin"


def disk_used(root) -> int:
    return sum(os.lstat(os.path.join(d, f)).st_blocks * 512 for d, _, fs in os.walk(root) for f in fs)


def check(download, run, tmp_path):
    run(HOSTILE)
    back = tmp_path / "back" / "sub"
    back.parent.mkdir()
    with pytest.raises(ExtractRefused, match="is a symlink"):
        download(back, only=["repo"], max_bytes=300 << 20)
    assert sorted(os.listdir(tmp_path / "back")) == ["sub"]
    assert not any(p.is_symlink() for p in back.rglob("*"))
    run("rm -rf repo && " + SPARSE)
    shutil.rmtree(back)
    download(back, only=["repo"], max_bytes=300 << 20)
    assert (back / "repo" / "ok.txt").read_text() == "ok\n" and not (back / "other").exists()
    assert disk_used(back) < 1 << 20


def test_the_daytona_download_refuses_links_and_skips_what_is_not_a_write_path(provider, tmp_path):  # noqa: F811
    h = provider.create(spec(tags()))

    def run(script):
        assert provider.exec(h, ["bash", "-c", script], cwd="/workspace", timeout_s=120).rc == 0
    check(lambda back, **kw: provider.download_archive(h, "/workspace", back, **kw), run, tmp_path)


def test_the_modal_download_refuses_links_and_skips_what_is_not_a_write_path(setup, tmp_path):  # noqa: F811
    p, h, _ = setup

    def run(script):
        assert p.exec(h, ["bash", "-c", f"mkdir -p /workspace 2>/dev/null; {script}"], cwd="/workspace",
                      timeout_s=120).rc == 0
    check(lambda back, **kw: p.download_archive(h, "/workspace", back, **kw), run, tmp_path)
