"""Run mypy over the whole `mai` package as it is installed: core, flows, tasks, storage, dashboards.

Why a view: setuptools installs the top-level folders `flows/ tasks/ storage/ dashboards/` as `mai.flows`, ...
(`package-dir` in pyproject.toml). mypy cannot follow that mapping (an editable install reaches it through an
import hook, which mypy never runs), and `mypy_path`/`explicit_package_bases` only choose package roots, they
do not rename a folder. So this script builds `build/typecheck/mai/`: a link to every module and subpackage of
`mai/`, plus `flows`, `tasks`, `storage`, `dashboards`, `cli`, `api` linked in as subpackages, and runs mypy on that one
tree. Every file is seen once, under the module name it is imported by; mypy's paths are mapped back to the
real files (`build/typecheck/mai/storage/x.py` -> `storage/x.py`) so that an error points at a file to open.

Usage: python scripts/typecheck.py [extra mypy arguments]   (mypy settings: [tool.mypy] in pyproject.toml)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VIEW = ROOT / "build" / "typecheck"
# subpackage of `mai` -> folder in the repository; must agree with [tool.setuptools] package-dir
SHELL = {"flows": "flows", "tasks": "tasks", "storage": "storage", "dashboards": "dashboards", "cli": "cli",
         "api": "api"}


def build_view() -> Path:
    """Rebuilt on every run, so that added, renamed or removed modules are seen at once."""
    package = VIEW / "mai"
    shutil.rmtree(VIEW, ignore_errors=True)
    package.mkdir(parents=True)
    links = {e.name: e for e in (ROOT / "mai").iterdir()
             if e.suffix in (".py", ".pyi") or (e.is_dir() and (e / "__init__.py").exists())}
    clashes = links.keys() & SHELL.keys()
    if clashes:
        sys.exit(f"mai/ and the shell folders both define {sorted(clashes)}: rename one")
    links.update({name: ROOT / folder for name, folder in SHELL.items()})
    for name, target in sorted(links.items()):
        # relative links: the view stays valid wherever the checkout lives
        (package / name).symlink_to(os.path.relpath(target, package))
    return package


def real_paths(text: str) -> str:
    """mypy reports the view's paths: map them back to the repository's files (longest prefix first)."""
    view = os.path.relpath(VIEW / "mai", ROOT)
    for name, folder in SHELL.items():
        text = text.replace(f"{view}/{name}/", f"{folder}/")
    return text.replace(f"{view}/", "mai/")


def main(argv: list[str]) -> int:
    package = build_view()
    os.chdir(ROOT)  # mypy reads [tool.mypy] from ./pyproject.toml; paths are relative to the root
    with subprocess.Popen([sys.executable, "-m", "mypy", *argv, os.path.relpath(package, ROOT)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as mypy:
        assert mypy.stdout is not None
        for line in mypy.stdout:
            sys.stdout.write(real_paths(line))
    return mypy.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
