"""Loading RoleSpec manifests from TOML files, with errors that name the file and the field.

A campaign keeps its own copy of the manifests (`<campaign>/roles/*.toml`, copied from the shipped
ones by `sweep init`); every session records the sha256 of the manifest file it ran under, so a
result can always be traced to the exact rules that bounded it.
"""
from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path

from pydantic import ValidationError

from roles.spec import RoleInvariantError, RoleSpec
from runstate.errors import ConfigError, validation_problem

MANIFEST_SUFFIX = ".toml"


def shipped_manifests_dir() -> Path:
    """The directory of the manifests shipped with sweep (package data: author, reviewer, solver)."""
    return Path(__file__).resolve().parent


def manifest_sha256(path: str | Path) -> str:
    """sha256 of the manifest file's bytes: what a session records as the rules it ran under."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load_manifest(path: str | Path) -> RoleSpec:
    """Parse and validate one manifest; raises ConfigError(path=, field=) on the first problem."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read manifest: {exc.strerror or exc}", path=path) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError("manifest is not UTF-8 text", path=path) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", path=path) from None
    try:
        spec = RoleSpec.model_validate(data)
    except ValidationError as exc:
        original = (exc.errors()[0].get("ctx") or {}).get("error")
        field, message = validation_problem(
            exc, top="(manifest)", unknown="unknown field (a typo? manifests reject fields sweep would not enforce)",
            first=(original.field, original.message) if isinstance(original, RoleInvariantError) else None)
        raise ConfigError(message, path=path, field=field) from None
    if spec.name != path.stem:
        raise ConfigError(f"name {spec.name!r} differs from the file name; call the file {spec.name}.toml",
                          path=path, field="name")
    return spec.with_source(path)


def manifest_paths(directory: str | Path) -> list[Path]:
    directory = Path(directory)
    if not directory.is_dir():
        raise ConfigError("not a directory of manifests", path=directory)
    return sorted(p for p in directory.iterdir() if p.suffix == MANIFEST_SUFFIX and not p.name.startswith("."))


def load_roles_dir(directory: str | Path) -> dict[str, RoleSpec]:
    """Every `*.toml` manifest in `directory`, by role name; the first invalid one raises."""
    paths = manifest_paths(directory)
    if not paths:
        raise ConfigError("no *.toml manifests found", path=directory)
    return {spec.name: spec for spec in (load_manifest(p) for p in paths)}
