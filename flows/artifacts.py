"""Prefect artifacts of a finished run and of a regression check, for the UI: tables to read at a glance (routing
counts, metrics, the samples that changed against a baseline) and the run's own offline HTML report.

A run's report (`runs/<run_id>/report.html`, `mai report RUN_ID` over that run alone) is written after its
manifest, so the run is complete whether or not the report could be built: a failure to build it is logged and
said in the artifact, and never fails the run.
"""

from __future__ import annotations

import logging
from typing import Any, NotRequired, TypedDict, cast

from mai.storage.paths import Home
from mai.storage.runs import run_report_path
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from mai.manifest import ROUTE_LABELS, RunManifest
from mai.regression import SampleScores

RUN_REPORT_TRACE_SAMPLES = 200

log = logging.getLogger(__name__)


class RoutingRow(TypedDict):
    route: str
    samples: int
    share_percent: float


class MetricRow(TypedDict):
    metric: str
    subset: str
    value: float
    n: int
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


def publish_run(home: Home, manifest: RunManifest) -> str | None:
    """Table artifacts of the run's routing counts and metrics, and its report's path; returns that path (None
    when the report could not be built)."""
    run_id = manifest["run_id"]
    # Prefect types a table as plain dicts; the typed rows are those at run time
    create_table_artifact(cast(list[dict[str, Any]], routing_rows(manifest)), key="mai-run-routing",
                          description=f"routing counts of run {run_id}")
    create_table_artifact(cast(list[dict[str, Any]], metric_rows(manifest)), key="mai-run-metrics",
                          description=f"metrics of run {run_id}")
    path = run_report_path(home, run_id)
    try:
        from mai.dashboards.report import build_report

        built = build_report(home, [run_id], path, RUN_REPORT_TRACE_SAMPLES)
        text = (f"Report of run `{run_id}`: `{built.path}` ({built.bytes / 1e6:.1f} MB, self-contained: it opens "
                f"offline). `mai report --all` covers every run of the store; `mai report {run_id} OTHER_RUN` "
                "compares two.")
        written: str | None = str(built.path)
    except Exception as error:  # noqa: BLE001  (the run is complete and stored: the report is a view of it)
        log.warning("run %s: the HTML report could not be built: %s", run_id, error)
        text = f"Report of run `{run_id}` could not be built: {error}. `mai report {run_id}` tries again."
        written = None
    create_markdown_artifact(text, key="mai-run-report", description=f"report of run {run_id}")
    return written


def diff_rows(baseline: SampleScores, candidate: SampleScores) -> list[dict[str, Any]]:
    """The samples whose score differs between a baseline and a candidate run (missing or errored included)."""
    rows = []
    for sid, (category, score) in sorted(baseline.items(), key=lambda item: _natural(item[0])):
        if score is None:
            continue
        other = candidate.get(sid, ("", None))[1]
        if other == score:
            continue
        change = "missing" if other is None else ("worse" if other < score else "better")
        rows.append({"sample_id": sid, "category": category, "baseline": score, "candidate": other,
                     "change": change})
    return rows


def publish_regression_diff(run_id: str, baseline_name: str, baseline: SampleScores, candidate: SampleScores
                            ) -> list[dict[str, Any]]:
    rows = diff_rows(baseline, candidate)
    create_table_artifact(rows or [{"sample_id": "(none)", "category": "", "baseline": None, "candidate": None,
                                    "change": "no sample changed"}],
                          key="mai-regression-diff", description=f"samples of run {run_id} that changed against "
                                                                 f"{baseline_name}")
    return rows


def _natural(sample_id: str) -> tuple[str, int, str]:
    head, _, tail = sample_id.rpartition("-")
    return (head, int(tail), "") if tail.isdigit() else (sample_id, 0, sample_id)
