"""Which variables of the tick's environment a controller job gets, by name (JobSpec.pass_env).

An explicit allowlist, never "everything": a tick started by scrontab runs inside a Slurm job of
its own, and a variable the controller reads that came from the tick's job (SLURM_RESTART_COUNT,
SLURM_JOB_ID) made every controller count the cron job's requeues as its own. The job gets:

- the basics of a process: PATH, HOME, USER, LOGNAME, SHELL, LANG, LANGUAGE, TZ, TMPDIR, every LC_*;
- SLURM_CONF (how Slurm clients in the job find the cluster) and every SWEEP_* (sweep's own);
- the network's configuration: the proxy variables and the CA bundle variables;
- the credential variables sweep knows by name: each key family's variables, the GitHub token,
  the model endpoints, and every variable the plan names as a source (any `env` / `*_env` field);
- the provider SDKs' own settings (DAYTONA_*, MODAL_*);
- whatever the plan adds in `[scheduler] pass_env`.

Only names present in the tick's environment are listed; the scheduler copies their values when
it submits (never into the job script). `SLURM_*` job context never passes (base.is_job_context).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

BASE_NAMES = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR",
                        "SLURM_CONF"})
NETWORK_NAMES = frozenset({"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                           "no_proxy", "all_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
                           "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"})
PREFIXES = ("SWEEP_", "LC_", "DAYTONA_", "MODAL_")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _credential_names() -> set[str]:
    from sweep.credentials import GITHUB_TOKEN_VARS, NON_SECRET_VARS
    from sweep.runtimes.preflight import KEY_VARIABLES
    names = set(NON_SECRET_VARS) | set(GITHUB_TOKEN_VARS)
    for family in KEY_VARIABLES.values():
        names.update(family)
    return names


def _plan_named(value: Any, key: str = "") -> Iterable[str]:
    """Every variable name the plan's settings give as an `env` or `*_env` field, at any depth."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _plan_named(v, str(k))
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _plan_named(v, key)
    elif isinstance(value, str) and (key == "env" or key.endswith("_env")) and _ENV_NAME_RE.fullmatch(value):
        yield value


def job_pass_env(settings: Any, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The names (sorted) of `environ` a controller job of a campaign with `settings` gets."""
    from sweep.scheduler.base import is_job_context
    wanted = set(BASE_NAMES) | NETWORK_NAMES | _credential_names()
    wanted.update(_plan_named(settings.model_dump(mode="json")))
    wanted.update(settings.scheduler.pass_env)
    if getattr(settings, "environment", None) is not None:
        wanted.update(settings.environment.inherit)     # the job environment's own allowlist
    wanted.update(n for n in environ if n.startswith(PREFIXES))
    return tuple(sorted(n for n in wanted if n in environ and not is_job_context(n)))
