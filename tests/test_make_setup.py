"""`make setup` without root (issue 61): a user who is not root and cannot sudo gets one line naming the Debian
packages the full suite needs and the command that installs them, and setup exits non-zero with it (it was
`sudo: not found ... Error 127`); as root the packages are installed by apt-get, as before. Run against the
repository's Makefile with a PATH that holds no TeX (nor sudo) and an `id` that says who the user is; the venvs
and actionlint are given as set up, so nothing is built or installed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAKE = shutil.which("make")
pytestmark = pytest.mark.skipif(MAKE is None, reason="make is not installed")


def make(tmp_path: Path, uid: int, *args: str) -> subprocess.CompletedProcess[str]:
    """`make ARGS` in the repository as user `uid` (what `id -u` prints), with nothing on PATH but that `id` and
    `true`: no pdflatex, pdftotext, ip, bindfs nor sudo."""
    tools = tmp_path / f"bin-{uid}"
    tools.mkdir()
    (tools / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    (tools / "id").chmod(0o755)
    (tools / "true").symlink_to(shutil.which("true") or "/bin/true")
    for ready in (tmp_path / "venv" / "bin" / ".installed", tmp_path / "vllm" / ".installed"):  # newer than sources
        ready.parent.mkdir(parents=True, exist_ok=True)
        ready.touch()
    assert MAKE is not None
    return subprocess.run([MAKE, "--no-print-directory", "-C", str(REPO), *args, f"VENV={tmp_path / 'venv'}",
                           f"VLLM_VENV={tmp_path / 'vllm'}", "ACTIONLINT=", "CHROMIUM=/nonexistent/chromium"],
                          env={"PATH": str(tools), "HOME": str(tmp_path)}, capture_output=True, text=True,
                          timeout=60, check=False)


def test_setup_without_root_names_the_packages_and_the_command_and_fails(tmp_path: Path) -> None:
    made = make(tmp_path, 1000, "setup")
    assert made.returncode != 0
    (line,) = [line for line in made.stderr.splitlines() if not line.startswith("make: ***")]
    assert line.startswith("make: the full test suite needs the Debian packages chromium ")
    assert "texlive-latex-base texlive-latex-recommended poppler-utils" in line
    assert "as root run apt-get install -y --no-install-recommends chromium " in line
    assert "Error 127" not in made.stderr and "sudo: not found" not in made.stderr


def test_setup_as_root_installs_with_apt_get(tmp_path: Path) -> None:
    planned = make(tmp_path, 0, "-n", "system-packages")  # -n: the commands, not run
    assert planned.returncode == 0, planned.stderr
    assert "apt-get install -y --no-install-recommends chromium " in planned.stdout
    assert "texlive-latex-base" in planned.stdout and "sudo" not in planned.stdout
    assert "cannot sudo" not in planned.stdout + planned.stderr


@pytest.mark.skipif(os.name != "posix", reason="POSIX only")
def test_setup_with_every_package_there_says_nothing(tmp_path: Path) -> None:
    made = make(tmp_path, 1000, "-n", "setup", "SYSTEM_PACKAGES=")
    assert made.returncode == 0 and "Debian packages" not in made.stdout + made.stderr
