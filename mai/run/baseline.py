"""A run compared with a baseline, without Prefect: what the `mai-regression` flow (flows/regression.py) does after
its run, and all that `mai regress` does when every output of its run is stored (the run is then a store lookup,
mai/pipeline.py). A baseline is either a stored run id or a baseline file (`mai baseline RUN_ID --out FILE`
writes one); the comparison is paired per sample (`mai.regression`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypedDict

from mai.errors import ConfigError
from mai.manifest import MetricSummary
from mai.regression import SampleScores, Verdict, check_same_items, compare_runs
from mai.storage.paths import Home
from mai.storage.runs import is_complete, read_manifest, read_routes, write_regression_report
from mai.storage.samples import read_shard

# what a regression flow publishes: (run id, baseline name, baseline scores, run scores, report) -> None
PublishRegression = Callable[[str, str, SampleScores, SampleScores, str], None]


class RegressionDetected(RuntimeError):
    """The candidate run is significantly worse than its baseline (the message says where)."""


def default_baseline() -> Path:
    """The shipped baseline, wherever the package is installed (editable checkout or wheel)."""
    from mai.config import shipped_models_dir

    return shipped_models_dir().parent / "regression" / "shapes-cascade.json"


def run_scores(home: Home, run_id: str) -> SampleScores:
    rows = read_routes(home, run_id)
    return {r["sample_id"]: (r["category"] or "", None if r["score"] is None else float(r["score"])) for r in rows}


def run_contents(home: Home, run_id: str) -> dict[str, str]:
    """sample_id -> content hash (question, options, answer, images) of every sample the run read."""
    return {sample.sample_id: sample.content_hash for path in read_manifest(home, run_id)["shard_paths"]
            for sample in read_shard(home.root / path)}


class BaselineFile(TypedDict):
    run_id: str
    git_commit: str | None
    config: Mapping[str, object]
    config_key: str
    metrics: list[MetricSummary]
    samples: dict[str, list[object]]   # sample_id -> [category, score]
    contents: dict[str, str]           # sample_id -> content hash


class RegressionResult(TypedDict):
    run_id: str
    baseline: str
    regressed: bool
    report: str
    absent: int
    warning: str | None


def baseline_file(home: Home, run_id: str) -> BaselineFile:
    """A stored run as a self-contained baseline: its configuration, metrics, per-sample scores and the content
    hash of each sample, so that a later run is only ever paired with the very same items."""
    manifest = read_manifest(home, run_id)
    return {"run_id": run_id, "git_commit": manifest["git_commit"], "config": manifest["config"],
            "config_key": manifest["config_key"], "metrics": manifest["metrics"],
            "samples": {sid: [category, score] for sid, (category, score) in sorted(run_scores(home, run_id).items())},
            "contents": dict(sorted(run_contents(home, run_id).items()))}


def load_baseline(home: Home, baseline: str) -> tuple[str, SampleScores, dict[str, str]]:
    """`baseline` names a baseline file or a completed run in the store: its name, scores and sample contents
    (empty for a baseline file written before contents were recorded)."""
    path = Path(baseline).expanduser()
    if path.is_file():
        data = json.loads(path.read_text())
        return (f"{path.name} (run {data['run_id']})", {sid: (c, s) for sid, (c, s) in data["samples"].items()},
                data.get("contents", {}))
    if is_complete(home, baseline):
        return f"run {baseline}", run_scores(home, baseline), run_contents(home, baseline)
    raise ConfigError(f"baseline '{baseline}' is neither a baseline file nor a completed run in {home.root}")


def report_markdown(candidate_run: str, baseline_name: str, verdict: Verdict, min_drop: float, alpha: float) -> str:
    status = "REGRESSION" if verdict.regressed else "no regression"
    lines = [f"# {status}: run `{candidate_run}` vs {baseline_name}", "",
             f"A drop counts when it is >= {min_drop} points and the paired sign test gives p < {alpha}.", "",
             "| subset | n | baseline | candidate | drop (points) | worse | better | p | regressed |",
             "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {c.subset} | {c.n} | {c.baseline:.1f} | {c.candidate:.1f} | {c.drop_points:+.1f} | {c.worse} | "
              f"{c.better} | {c.p_value:.3g} | {'yes' if c.regressed else ''} |" for c in verdict.comparisons]
    if verdict.errored:
        lines += ["", f"{len(verdict.errored)} baseline samples are errors in this run (each fails the check): "
                      + ", ".join(verdict.errored[:20])]
    if verdict.absent:
        shared = verdict.comparisons[0].n if verdict.comparisons else 0
        lines += ["", (f"{len(verdict.absent)} baseline samples are not in this run and fail the check "
                       "(--require-all): " if verdict.require_all else
                       f"warning: {len(verdict.absent)} baseline samples are not in this run (a smaller --limit or "
                       f"subset): compared over the {shared} shared samples; --require-all makes them fail the "
                       "check. E.g. ") + ", ".join(verdict.absent[:20])]
    return "\n".join(lines)


def absent_warning(verdict: Verdict) -> str | None:
    """One line for the terminal when baseline samples were left out of the comparison."""
    if not verdict.absent or verdict.require_all:
        return None
    return (f"warning: {len(verdict.absent)} of the baseline's samples are not in this run; compared over the "
            f"{verdict.comparisons[0].n if verdict.comparisons else 0} shared samples (--require-all to fail instead)")


def judge(home: Home, run_id: str, baseline: tuple[str, SampleScores, dict[str, str]], min_drop_points: float,
          alpha: float, require_all: bool, publish: PublishRegression | None = None) -> RegressionResult:
    """Compare the stored run `run_id` with `baseline` (`load_baseline`'s answer) over the samples both scored,
    write the report beside the run (and hand it and the scores to `publish`: the flow's Prefect artifacts), and
    raise RegressionDetected on a significant drop; baseline samples the run does not hold are a warning, or a
    failure with `require_all`."""
    baseline_name, baseline_scores, baseline_contents = baseline
    check_same_items(baseline_name, baseline_contents, run_contents(home, run_id))
    candidate_scores = run_scores(home, run_id)
    verdict = compare_runs(baseline_scores, candidate_scores, min_drop_points, alpha, require_all)
    report = report_markdown(run_id, baseline_name, verdict, min_drop_points, alpha)
    write_regression_report(home, run_id, report)
    if publish is not None:
        publish(run_id, baseline_name, baseline_scores, candidate_scores, report)
    if verdict.regressed:
        raise RegressionDetected(report)
    return {"run_id": run_id, "baseline": baseline_name, "regressed": False, "report": report,
            "absent": len(verdict.absent), "warning": absent_warning(verdict)}
