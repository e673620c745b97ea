"""The run manifest (what ran, with what, what it cost) and its human-readable summary."""

from __future__ import annotations

import json
import platform
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from mai.backends.registry import loaded_engines
from mai.manifest import (
    ROUTE_LABELS,
    BackendReport,
    DataRecord,
    ModelRecord,
    RunCounts,
    RunManifest,
    RunProvenance,
    RunScores,
    RunTimings,
    ServerEvent,
    ServerRecord,
    StageMaps,
    StageStatistics,
)
from mai.plan import RunPlan
from mai.progress import Tally
from mai.provenance import machine, model_provenance
from mai.storage.generations import count_computed_by_run, shared_store
from mai.storage.paths import Home
from mai.storage.rows import RunRow

PACKAGES = ("mai", "torch", "transformers", "prefect", "duckdb", "pyarrow", "datasets", "tokenizers")


def backend_report(backend: str, started_at: datetime) -> BackendReport:
    """Which servers the run's engines in this process used (URL, owner, log file) and what happened to them
    during the run (starts, restarts after a server died); empty lists for in-process backends."""
    engines = [e for e in loaded_engines() if e.backend == backend]
    servers: list[ServerRecord] = [server.record() for e in engines
                                   if (server := getattr(e, "server", None)) is not None]
    events: list[ServerEvent] = [event for e in engines for event in getattr(e, "events", [])
                                 if event["at"] >= started_at.isoformat()]
    return {"name": backend, "servers": servers, "events": events,
            "restarts": sum(event["event"] == "restarted" for event in events)}


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    versions["python"] = platform.python_version()
    return versions


def run_versions(plan: RunPlan) -> dict[str, str]:
    """This process's packages; in a vLLM run, `vllm`, `transformers` and `torch` are the servers' (what computed
    the outputs: the versions the identities name, mai.identity; "unknown" for a server given by URL that cannot
    tell; the roles' values joined by ", " where they differ), and this process's own are `client_transformers`
    and `client_torch`."""
    versions = package_versions()
    if plan.config.backend != "vllm":
        return versions
    backends = list(plan.backends.values())

    def servers(values: list[str | None]) -> str:
        return ", ".join(sorted({value or "unknown" for value in values}))

    versions["client_transformers"], versions["client_torch"] = versions["transformers"], versions["torch"]
    versions["vllm"] = servers([b.engine.removeprefix("vllm ") for b in backends])
    versions["transformers"] = servers([b.transformers for b in backends])
    versions["torch"] = servers([b.torch for b in backends])
    return versions


def git_commit() -> str | None:
    """The commit of the mai checkout in use (with '+dirty' when it has local changes), if it is one."""
    source = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "")


def stage_statistics(plan: RunPlan, stage_maps: dict[str, StageMaps]) -> dict[str, StageStatistics]:
    """Per stage: generations used by the run and their output tokens (computed or reused alike)."""
    store = shared_store(plan.home)
    stats: dict[str, StageStatistics] = {}
    for stage in (s for s in plan.stages if s.generates):
        ids = {g for maps in stage_maps.values() for g in maps.get(stage.name, {}).values()}
        rows = store.read(plan.models[stage.role], stage.prompt_kind, ids, ["output_tokens"])
        tokens = sum(int(r["output_tokens"]) for r in rows.values())
        stats[stage.name] = {"generations": len(ids), "output_tokens": tokens,
                             "mean_output_tokens": tokens / len(ids) if ids else 0.0}
    return stats


def run_partitions(plan: RunPlan, appended: bool = False) -> set[Path]:
    """The generation partitions (model x prompt kind) the run's steps read and write; `appended`: with every
    partition the run may have appended to (sparse RT's attention and selections too)."""
    store, large = shared_store(plan.home), plan.models.get("large")
    found = {store.directory(plan.models[s.role], s.prompt_kind) for s in plan.stages if s.generates}
    if appended and large and plan.config.transfer == "sparse":
        from mai.storage.attention import attention_dir, selections_dir  # pyarrow.dataset: only here

        found |= {attention_dir(store.home, large), selections_dir(store.home, large)}
    return found


def build_manifest(plan: RunPlan, stage_maps: dict[str, StageMaps], scores: RunScores, timings: RunTimings,
                   started_at: datetime, tally: Tally) -> RunManifest:
    """The run's manifest. `tally` is what this run's own steps made the engines do; `generations_computed` is
    read from the store (rows this run's id wrote), so the two can be checked."""
    return {
        "run_id": plan.run_id, "run_name": plan.run_name, "config_key": plan.config.key(),
        "config": plan.config.model_dump(),
        "models": {role: ModelRecord(name_or_path=m.name_or_path, revision=m.revision, dtype=m.dtype, local=m.local)
                   for role, m in plan.models.items()},
        "data": DataRecord(location=plan.source.location, split=plan.source.split, config=plan.source.config,
                           revision=plan.source.revision, fingerprint=plan.source.fingerprint),
        "versions": run_versions(plan), "git_commit": (commit := git_commit()),
        "started_at": started_at.isoformat(), "finished_at": datetime.now(UTC).isoformat(),
        "shard_paths": sorted(stage_maps), "scorer_profile": scores["scorer_profile"],
        "counts": _counts(plan, stage_maps, scores, tally), "routes": scores["routes"],
        "stages": stage_statistics(plan, stage_maps), "metrics": scores["metrics"], "errors": scores["errors"],
        "timings": timings, "backend": backend_report(plan.config.backend, started_at),
        "provenance": run_provenance(plan, scores, tally, commit),
    }


def run_provenance(plan: RunPlan, scores: RunScores, tally: Tally, commit: str | None) -> RunProvenance:
    """What the report and `mai compare` show of where and with what the run ran (mai.provenance)."""
    return {"models": {role: model_provenance(m) for role, m in plan.models.items()},
            "data": DataRecord(location=plan.source.location, split=plan.source.split, config=plan.source.config,
                               revision=plan.source.revision, fingerprint=plan.source.fingerprint),
            "limit": plan.config.limit, "n_samples": sum(scores["routes"][label] for label in ROUTE_LABELS),
            "command": plan.command, "machine": machine(plan.load_at_start), "git_commit": commit,
            "capture_s": round(tally.capture_s, 6)}


def _counts(plan: RunPlan, stage_maps: dict[str, StageMaps], scores: RunScores, tally: Tally) -> RunCounts:
    generated = {g for maps in stage_maps.values() for name, stage in maps.items() if name != "select_rt"
                 for g in stage.values()}
    needed, routes = len(generated), scores["routes"]
    computed = count_computed_by_run(Home.at(plan.home), plan.run_id, run_partitions(plan))
    attention = _attention_computed(plan)
    samples = sum(routes[label] for label in ROUTE_LABELS)
    return {"samples": samples, "valid": samples - routes["ERROR"], "errors": routes["ERROR"],
            "generations_needed": needed, "generations_computed": computed, "generations_reused": needed - computed,
            "engine_generations": tally.generations, "attention_prefills": tally.captures,
            "attention_rows_computed": attention["attention_rows_computed"],
            "selections_computed": attention["selections_computed"]}


def _attention_computed(plan: RunPlan) -> dict[str, int]:
    """Attention rows and selections the run computed: only sparse RT computes any (and reading the attention
    tables imports pyarrow.dataset, and so pandas, which a cached run does without)."""
    if plan.config.transfer != "sparse":
        return {"attention_rows_computed": 0, "selections_computed": 0}
    from mai.storage.attention import computed_by_run

    return computed_by_run(Home.at(plan.home), plan.run_id)


def catalog_row(manifest: RunManifest, plan: RunPlan, started_at: datetime, finished_at: datetime) -> RunRow:
    """The run's row of the `runs` table, from the typed values (never parsed back from the manifest's JSON)."""
    config, counts, routes, models = plan.config, manifest["counts"], manifest["routes"], plan.models
    single = config.mode == "single"
    return {
        "run_id": plan.run_id, "run_name": plan.run_name, "config_key": manifest["config_key"],
        "started_at": started_at, "finished_at": finished_at,
        "wall_s": manifest["timings"]["wall_s"], "engine_generate_s": manifest["timings"]["engine_generate_s"],
        "model_load_s": manifest["timings"]["model_load_s"], "mode": config.mode, "benchmark": config.benchmark,
        "dataset_fingerprint": plan.source.fingerprint, "split": plan.source.split,
        "small_model": models["small"].identity_name if "small" in models else None,
        "large_model": models["large"].identity_name if "large" in models else None,
        "single_model": config.single_model if single else None,
        "single_prompt": config.single_prompt if single else None,
        "s2": config.s2, "transfer": config.transfer, "transfer_layer": config.transfer_layer,
        "transfer_delta": config.transfer_delta if config.transfer == "sparse" else None,
        "backend": config.backend, "n_shards": config.shards,
        "n_samples": counts["samples"], "n_valid": counts["valid"], "n_errors": counts["errors"],
        "n_generations_needed": counts["generations_needed"],
        "n_generations_computed": counts["generations_computed"],
        "n_generations_reused": counts["generations_reused"],
        "routed_mv1": routes["MV1"], "routed_mv2": routes["MV2"], "routed_rt": routes["RT"],
        "git_commit": manifest["git_commit"], "config_json": json.dumps(manifest["config"], sort_keys=True),
        "versions_json": json.dumps(manifest["versions"], sort_keys=True),
        "provenance_json": json.dumps(manifest["provenance"], sort_keys=True),
    }


def describe_models(plan: RunPlan) -> str:
    return " + ".join(f"{role} {Path(m.identity_name).name}" for role, m in sorted(plan.models.items()))


def summary_markdown(manifest: RunManifest) -> str:
    lines = [f"# MAI run `{manifest['run_id']}`", "", "| route | samples |", "|---|---|"]
    lines += [f"| {route} | {count} |" for route, count in manifest["routes"].items() if count]
    lines += ["", "| metric | subset | value | n |", "|---|---|---|---|"]
    lines += [f"| {m['metric']} | {m['subset']} | {m['value']:.4f} | {m['n']} |" for m in manifest["metrics"]]
    lines += ["", "| stage | generations | output tokens | mean |", "|---|---|---|---|"]
    lines += [f"| {name} | {s['generations']} | {s['output_tokens']} | {s['mean_output_tokens']:.1f} |"
              for name, s in manifest["stages"].items()]
    c = manifest["counts"]
    lines += ["", (f"generations computed {c['generations_computed']}, reused {c['generations_reused']}; "
                   f"wall {manifest['timings']['wall_s']:.1f} s")]
    backend = manifest["backend"]
    if backend["servers"]:
        lines += ["", f"backend {backend['name']}: " + ", ".join(f"{s['model']} at {s['url']} ({s['owner']})"
                                                             for s in backend["servers"])
                  + f"; server restarts {backend['restarts']}"]
    return "\n".join(lines)
