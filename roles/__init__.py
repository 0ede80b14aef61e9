"""roles: the RoleSpec model and the shipped manifests (author.toml, reviewer.toml, solver.toml).

Imports only pydantic, the stdlib and runstate, so loading or checking manifests stays cheap.
See docs/roles.md for the fields, the invariants and how sweep enforces them.
"""
from roles.manifests import (load_manifest, load_roles_dir, manifest_paths, manifest_sha256,
                             shipped_manifests_dir)
from roles.schema import schema_problems, validate_instance
from roles.scope import bind_roots, scope_matches
from roles.spec import (KEY_FAMILY_ENV, READ_ONLY_TOOLS, UNRESTRICTED_SHELL_TOOLS, Budget, Execution,
                        RoleInvariantError, RoleSpec, invariant_violations, tool_base)

__all__ = [
    "RoleSpec", "Execution", "Budget", "RoleInvariantError", "invariant_violations",
    "KEY_FAMILY_ENV", "READ_ONLY_TOOLS", "UNRESTRICTED_SHELL_TOOLS", "tool_base",
    "load_manifest", "load_roles_dir", "manifest_paths", "manifest_sha256", "shipped_manifests_dir",
    "scope_matches", "bind_roots", "schema_problems", "validate_instance",
]
