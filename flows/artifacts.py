"""Prefect artifacts of a finished run and of a regression check, for the UI: the run's summary, tables to read at a
glance (routing counts, metrics, the samples that changed against a baseline) and the command that builds the
run's own offline HTML report (Prefect is imported only to publish them). The report is built on demand (`mai report RUN_ID`, or `mai run --report FILE`), never by every
run: it costs more than a cached run itself (docs/benchmarks.md, "Startup").
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict, cast

from mai.evals.base import natural_order
from mai.manifest import ROUTE_LABELS, MetricSummary, RunManifest
from mai.regression import SampleScores
from mai.run.summary import summary_markdown


class RoutingRow(TypedDict):
    route: str
    samples: int
    share_percent: float


class MetricRow(MetricSummary):
    scorer_profile: NotRequired[str]


def routing_rows(manifest: RunManifest) -> list[RoutingRow]:
    routes = manifest["routes"]
    total = sum(routes[label] for label in ROUTE_LABELS)
    return [{"route": label, "samples": routes[label],
             "share_percent": round(100 * routes[label] / total, 2) if total else 0.0}
            for label in ROUTE_LABELS if routes[label] or label in ("MV1", "MV2", "RT")]


def metric_rows(manifest: RunManifest) -> list[MetricRow]:
    rows: list[MetricRow] = [{"metric": m["metric"], "subset": m["subset"], "value": round(float(m["value"]), 6),
                              "n": m["n"]} for m in manifest["metrics"]]
    if manifest.get("scorer_profile"):
        for row in rows:
            row["scorer_profile"] = manifest["scorer_profile"]
    return rows


def publish_run(manifest: RunManifest) -> None:
    """The run's summary, table artifacts of its routing counts and metrics, and how to build its HTML report (on
    demand: a report takes 1-2 s to build, more than a cached run itself)."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    run_id = manifest["run_id"]
    create_markdown_artifact(summary_markdown(manifest), key="mai-run-summary", description=f"run {run_id}")
    # Prefect types a table as plain dicts; the typed rows are those at run time
    create_table_artifact(cast(list[dict[str, Any]], routing_rows(manifest)), key="mai-run-routing",
                          description=f"routing counts of run {run_id}")
    create_table_artifact(cast(list[dict[str, Any]], metric_rows(manifest)), key="mai-run-metrics",
                          description=f"metrics of run {run_id}")
    create_markdown_artifact(report_hint(run_id), key="mai-run-report", description=f"report of run {run_id}")


def report_hint(run_id: str) -> str:
    """How to build the run's offline HTML report: it is not built by the run (docs/reports.md)."""
    return (f"The HTML report of run `{run_id}` is built on demand: `mai report {run_id} --out report.html` (one "
            f"self-contained file that opens offline; `mai run --report FILE` builds it at the end of a run). "
            f"`mai report --all` covers every run of the store; `mai report {run_id} OTHER_RUN` compares two.")


def diff_rows(baseline: SampleScores, candidate: SampleScores) -> list[dict[str, Any]]:
    """The samples whose score differs between a baseline and a candidate run (missing or errored included)."""
    rows = []
    for sid, (category, score) in sorted(baseline.items(), key=lambda item: natural_order(item[0])):
        if score is None:
            continue
        other = candidate.get(sid, ("", None))[1]
        if other == score:
            continue
        change = "missing" if other is None else ("worse" if other < score else "better")
        rows.append({"sample_id": sid, "category": category, "baseline": score, "candidate": other,
                     "change": change})
    return rows


def publish_regression(run_id: str, baseline_name: str, baseline: SampleScores, candidate: SampleScores,
                       report: str) -> None:
    """A regression check's report and the samples whose score changed, as artifacts of its flow run."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    create_table_artifact(diff_rows(baseline, candidate) or [{"sample_id": "(none)", "category": "", "baseline": None,
                                                              "candidate": None, "change": "no sample changed"}],
                          key="mai-regression-diff",
                          description=f"samples of run {run_id} that changed against {baseline_name}")
    create_markdown_artifact(report, key="mai-regression", description=f"run {run_id} vs {baseline_name}")
