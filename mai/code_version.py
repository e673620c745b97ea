"""The code a process runs: mai's version, a digest of its source files, and the versions of the packages mai
requires. A run's plan carries the planning host's (`RunPlan.code_versions`); a drain on another host compares its
own with it before it takes a shard (`code_difference`), so that a host with another mai, an edited checkout or
another transformers is taken out of the run instead of writing outputs that its identities do not describe."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import re
from importlib import metadata
from pathlib import Path

SOURCE = "mai source"  # the key of the source digest among the versions
# the installed packages of mai's code: the core and the folders installed as its subpackages (pyproject.toml)
_PACKAGES = ("mai", "mai.api", "mai.cli", "mai.flows", "mai.tasks", "mai.storage", "mai.dashboards")


@functools.cache
def code_versions() -> dict[str, str]:
    """distribution -> its version, for mai and every package mai requires (extras excluded), and `SOURCE` -> a
    digest of every .py file of mai's packages. Cached: the installed code does not change under a process."""
    versions = {"mai": _version("mai")}
    for requirement in metadata.requires("mai") or []:
        if "extra ==" in requirement:
            continue  # optional (dev tools): not part of what a run computes with
        name = re.split(r"[\s;<>=!~\[(]", requirement, maxsplit=1)[0]
        versions[name.lower()] = _version(name)
    versions[SOURCE] = _source_digest()
    return versions


def code_difference(planned: dict[str, str]) -> str | None:
    """What differs between the code the run was planned with and this process's, in words; None when nothing
    does (or the plan carries no versions: made before they were recorded)."""
    here = {name: code_versions()[SOURCE] if name == SOURCE else _version(name) for name in planned}
    differ = [f"{name} {here[name]} here, {version} planned" for name, version in sorted(planned.items())
              if here[name] != version]
    return "; ".join(differ) if differ else None


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "missing"


def _source_digest() -> str:
    digest = hashlib.sha256()
    for package in _PACKAGES:
        spec = importlib.util.find_spec(package)  # finds, does not import, the subpackages
        for location in (spec.submodule_search_locations or []) if spec else []:
            for path in sorted(Path(location).rglob("*.py")):
                digest.update(f"{package}/{path.relative_to(location).as_posix()}\0".encode())
                digest.update(path.read_bytes())
    return "sha256:" + digest.hexdigest()[:16]
