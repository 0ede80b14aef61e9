#!/usr/bin/env bash
# The Python 3.12 venv with Harbor 0.26.0 that tests/test_export_harbor.py checks the export with
# (Harbor needs Python >= 3.12; sweep's own venv may be older). Made at .cache/harbor-venv from, in
# order: $SWEEP_HARBOR_PYTHON, the machine's pyenv 3.12, a python3.12 on PATH, a 3.12 that uv
# installs. A machine where none works gets no venv, and the test then fails saying so.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${SWEEP_HARBOR_VENV:-.cache/harbor-venv}"
HARBOR="harbor[daytona,modal]==0.26.0"

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("harbor") != "0.26.0")' 2>/dev/null; then
    echo "harbor venv: $VENV (Harbor 0.26.0, $("$VENV/bin/python" -V))"
    exit 0
fi

find_python() {
    if [ -n "${SWEEP_HARBOR_PYTHON:-}" ]; then echo "$SWEEP_HARBOR_PYTHON"; return; fi
    local root="${PYENV_ROOT:-$HOME/.pyenv}"
    command -v pyenv >/dev/null 2>&1 && root="$(pyenv root)"
    for p in "$root"/versions/3.12*/bin/python3; do
        [ -x "$p" ] && { echo "$p"; return; }
    done
    command -v python3.12 >/dev/null 2>&1 && { command -v python3.12; return; }
    # no 3.12 on the machine: uv (from PyPI) can install one
    local uvenv=.cache/uv-venv
    if [ ! -x "$uvenv/bin/uv" ]; then
        python3 -m venv "$uvenv" && "$uvenv/bin/python" -m pip install -q uv >/dev/null 2>&1 || return 0
    fi
    "$uvenv/bin/uv" python install 3.12 >/dev/null 2>&1 || return 0
    "$uvenv/bin/uv" python find 3.12 2>/dev/null || true
}

PY="$(find_python)"
if [ -z "$PY" ] || ! "$PY" -c 'import sys; sys.exit(sys.version_info[:2] < (3, 12))' 2>/dev/null; then
    echo "harbor venv: NO Python >= 3.12 found (pyenv, PATH, uv); tests/test_export_harbor.py will fail" >&2
    exit 0          # the test reports it, with this reason, instead of CI stopping here
fi
rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
"$VENV/bin/python" -m pip install -q "$HARBOR" podman-compose==1.6.0
echo "harbor venv: $VENV (Harbor 0.26.0, $("$VENV/bin/python" -V), from $PY)"
