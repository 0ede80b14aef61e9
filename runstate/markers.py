"""Campaign-level markers: per-role and per-provider outage stamps and the drain request.

Both are whole-file atomic writes. An unreadable stamp counts as no cooldown (a corrupt latch must
never brick the loop); an unreadable drain marker counts as draining (refusing to admit is the safe
reading of a marker someone meant to write).
"""
from __future__ import annotations

import getpass
import os
import socket
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from runstate.errors import StateError
from runstate.files import Loaded, read_model, write_model_atomic
from runstate.models import (OUTAGE_COOLDOWN_S, THROTTLE_COOLDOWN_S, DrainMarker, OutageStamp,
                             ProviderStamp, validate_provider, validate_role)
from runstate.paths import DRAIN_FILE, PROVIDER_PREFIX, CampaignPaths

COOLDOWNS = {"outage": OUTAGE_COOLDOWN_S, "throttle": THROTTLE_COOLDOWN_S}


def outage_path(campaign: Path, role: str) -> Path:
    return CampaignPaths(campaign).outage(validate_role(role))


def _cooldown_fields(kind: str, detail: str | None, now: float | None, stamped_by: str | None,
                     cooldown_s: float | None) -> dict[str, Any]:
    """The fields a role's and a provider's cooldown stamp share; the cooldown is decided now."""
    return {"kind": kind, "detail": detail, "stamped_at": time.time() if now is None else now,
            "cooldown_s": COOLDOWNS[kind] if cooldown_s is None else cooldown_s,
            "stamped_by": stamped_by or f"{socket.gethostname()}.{os.getpid()}"}


def stamp_outage(campaign: Path, role: str, kind: str, detail: str | None = None, *,
                 now: float | None = None, stamped_by: str | None = None,
                 cooldown_s: float | None = None) -> OutageStamp:
    """Record that `role` hit an outage or throttle; the cooldown is decided now, at stamp time."""
    stamp = OutageStamp(role=role, **_cooldown_fields(kind, detail, now, stamped_by, cooldown_s))
    _write_marker(outage_path(campaign, role), stamp)
    return stamp


def _write_marker(path: Path, model: BaseModel) -> None:
    """Write a marker; something else in its place (a directory, an unwritable file) is reported
    as a StateError naming the path, never a traceback."""
    if path.is_dir() and not path.is_symlink():
        raise StateError(f"{path.name} is a directory, not a marker file", path=path,
                         hint=f"remove it (rmdir {path}) and run the command again")
    try:
        write_model_atomic(path, model)
    except OSError as exc:
        raise StateError(f"cannot write {path.name}: {exc.strerror or exc}", path=path) from None


def read_outage(campaign: Path, role: str) -> Loaded[OutageStamp]:
    return read_model(outage_path(campaign, role), OutageStamp)


def active_cooldowns(campaign: Path, roles: list[str], now: float) -> dict[str, OutageStamp]:
    """role -> stamp for every role whose cooldown is in force now."""
    out = {}
    for role in roles:
        stamp = read_outage(campaign, role).value
        if stamp is not None and stamp.is_active(now):
            out[role] = stamp
    return out


def provider_outage_path(campaign: Path, provider: str) -> Path:
    return CampaignPaths(campaign).provider_outage(validate_provider(provider))


def stamp_provider(campaign: Path, provider: str, kind: str, detail: str | None = None, *,
                   now: float | None = None, stamped_by: str | None = None,
                   cooldown_s: float | None = None) -> ProviderStamp:
    """Record that remote provider `provider` is down (outage) or refusing us (throttle): the tick
    admits no run that needs it until the cooldown passes, then one canary (docs/providers.md)."""
    stamp = ProviderStamp(provider=provider, **_cooldown_fields(kind, detail, now, stamped_by, cooldown_s))
    _write_marker(provider_outage_path(campaign, provider), stamp)
    return stamp


def read_provider_stamps(campaign: Path) -> dict[str, ProviderStamp]:
    """provider -> its stamp (active or not: a passed one means 'admit one canary'). One listing of
    the campaign directory; an unreadable stamp counts as none, like a role's."""
    out: dict[str, ProviderStamp] = {}
    try:
        names = [n for n in os.listdir(campaign) if n.startswith(PROVIDER_PREFIX) and n.endswith(".json")]
    except OSError:
        return out
    for name in names:
        stamp = read_model(Path(campaign) / name, ProviderStamp).value
        if stamp is not None and name == f"{PROVIDER_PREFIX}{stamp.provider}.json":
            out[stamp.provider] = stamp
    return out


def clear_provider_stamp(campaign: Path, provider: str, *, only_passed: bool = True,
                         now: float | None = None) -> bool:
    """Remove the provider's stamp after a call to it succeeded; by default only once its cooldown
    has passed (a success during the cooldown is another campaign's luck, not a recovery)."""
    path = provider_outage_path(campaign, provider)
    if only_passed:
        stamp = read_model(path, ProviderStamp).value
        if stamp is not None and stamp.is_active(time.time() if now is None else now):
            return False
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError:
        return False
    return True


def request_drain(campaign: Path, reason: str | None = None, *, who: str | None = None,
                  now: float | None = None) -> DrainMarker:
    marker = DrainMarker(requested_by=who or f"{_user()}@{socket.gethostname()}",
                         requested_at=time.time() if now is None else now, reason=reason)
    _write_marker(CampaignPaths(campaign).drain, marker)
    return marker


def clear_drain(campaign: Path) -> bool:
    path = CampaignPaths(campaign).drain
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except IsADirectoryError:
        raise StateError(f"{DRAIN_FILE} is a directory, not a drain marker; the campaign counts as "
                         "draining while it is there", path=path,
                         hint=f"remove it (rmdir {path})") from None
    except OSError as exc:
        raise StateError(f"cannot remove {DRAIN_FILE}: {exc.strerror or exc}", path=path) from None
    return True


def read_drain(campaign: Path) -> Loaded[DrainMarker]:
    return read_model(CampaignPaths(campaign).drain, DrainMarker)


def is_draining(campaign: Path) -> bool:
    """Latched: any drain-request.json, even an unreadable one, means draining."""
    return not read_drain(campaign).missing


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in some containers
        return str(os.getuid())
