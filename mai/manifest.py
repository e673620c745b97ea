"""The typed records a run leaves: what one shard hands its parent (`ShardOutcome`), what routing and scoring
found (`RunScores`), and the run manifest (`RunManifest`, written last as `runs/<run_id>/manifest.json`, and
returned by `mai.api.run`).

The manifest is a JSON document read by people, notebooks and other tools, so it is a TypedDict: a plain dict
at run time (`manifest["routes"]["MV1"]`), with every key and value type checked by mypy where it is built and
read. The shard outcome travels between processes (a file in the store), so it is a pydantic model that
validates what it reads back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NotRequired, TypedDict

from pydantic import BaseModel, ConfigDict

from mai.progress import Tally
from mai.types import Route, StageName

# stage name -> sample_id -> output id (gen_id, or a selection id): how later stages find earlier outputs
StageMaps = dict[StageName, dict[str, str]]
ROUTE_LABELS: tuple[Route, ...] = ("MV1", "MV2", "RT", "SINGLE", "ERROR")


class RouteCounts(TypedDict):
    MV1: int
    MV2: int
    RT: int
    SINGLE: int
    ERROR: int


class MetricSummary(TypedDict):
    metric: str
    subset: str
    value: float
    n: int


class SampleError(TypedDict):
    sample_id: str
    error: str


class RunScores(TypedDict):
    """What routing and scoring a run found: counts per route, the metrics, the samples that could not run."""

    routes: RouteCounts
    scorer_profile: str
    metrics: list[MetricSummary]
    errors: list[SampleError]


class StageStatistics(TypedDict):
    generations: int
    output_tokens: int
    mean_output_tokens: float


class RunCounts(TypedDict):
    samples: int
    valid: int
    errors: int
    generations_needed: int
    generations_computed: int      # read from the store: rows this run's id wrote
    generations_reused: int
    engine_generations: int        # what this run's steps made the engines do (its own ledger)
    attention_prefills: int
    attention_rows_computed: int
    selections_computed: int


class RunTimings(TypedDict):
    wall_s: float
    engine_generate_s: float
    model_load_s: float
    # where the wall time went, phase by phase (absent from manifests of runs that did not measure them)
    # a command's start (the interpreter, its imports) before the run's own work; absent where no command started it
    startup_s: NotRequired[float]
    plan_s: NotRequired[float]
    materialize_s: NotRequired[float]
    # from the command's resolution to the flow's start (a temporary Prefect server's start, the flow run's creation)
    handover_s: NotRequired[float]
    shards_s: NotRequired[float]
    route_and_score_s: NotRequired[float]
    compaction_s: NotRequired[float]  # the partitions the run appended to, compacted when due
    manifest_s: NotRequired[float]


class ServerRecord(TypedDict):
    """A vLLM server as JSON (mai.backends.vllm_server.ServerInfo): in the `mai serve` registry and in manifests."""

    model: str
    url: str
    owner: str
    log_path: str | None
    pid: int | None
    start_s: float | None
    started_at: str | None
    # the versions the server runs (None: a server given by URL); absent in registries written before them
    vllm_version: NotRequired[str | None]
    transformers_version: NotRequired[str | None]
    torch_version: NotRequired[str | None]
    serve_args: NotRequired[str]  # its flags beyond mai's own; absent in registries written before they were recorded


ServerEventKind = Literal["started", "restarted", "adopted"]


class ServerEvent(ServerRecord):
    """A server an engine started, restarted or adopted during a run: the event, its time, and the server."""

    event: ServerEventKind
    at: str      # ISO time


class BackendReport(TypedDict):
    name: str
    servers: list[ServerRecord]
    events: list[ServerEvent]
    restarts: int


class ModelRecord(TypedDict):
    name_or_path: str
    revision: str
    dtype: str
    local: bool


class DataRecord(TypedDict):
    location: str
    split: str
    config: str | None
    revision: str | None
    fingerprint: str


class ModelProvenance(TypedDict):
    """A model as the run resolved it: its identity name, what it was loaded from, the revision (a local
    checkpoint's content fingerprint 'sha256:...'), the weights fingerprint (that fingerprint, or a hub id's
    snapshot commit 'commit:<sha>' in the Hugging Face cache; None where neither is known), and its family and
    architecture from its own config.json (mai.provenance; family 'unknown' where the config could not be read)."""

    name: str
    name_or_path: str
    revision: str
    weights: str | None
    dtype: str
    family: str
    model_type: str | None
    architecture: str | None


class MachineRecord(TypedDict):
    """The machine a run's times were measured on, and how busy it was (load averages 1, 5, 15 min)."""

    host: str
    hardware: str
    cpu_count: int
    load_at_start: list[float]
    load_at_end: list[float]


class RunProvenance(TypedDict):
    """Everything a reader needs to know what a run compares with: the models, the exact data and sample count,
    the command, the machine and its load, the code."""

    models: dict[str, ModelProvenance]
    data: DataRecord
    limit: int | None
    n_samples: int
    command: str
    machine: MachineRecord
    git_commit: str | None
    # seconds the run spent capturing attention for sparse RT (the prefill that picks the tokens), counted in its
    # measured time; 0 outside sparse RT
    capture_s: float


class RunManifest(TypedDict):
    run_id: str
    run_name: str
    config_key: str
    config: Mapping[str, object]   # the RunConfig as given (RunConfig.model_dump())
    models: dict[str, ModelRecord]
    data: DataRecord
    versions: dict[str, str]
    git_commit: str | None
    started_at: str
    finished_at: str
    shard_paths: list[str]
    scorer_profile: str
    counts: RunCounts
    routes: RouteCounts
    stages: dict[str, StageStatistics]
    metrics: list[MetricSummary]
    errors: list[SampleError]
    timings: RunTimings
    backend: BackendReport
    provenance: RunProvenance
    # a fanned-out run's worker hosts that could not serve it (host -> why, naming the fix): flows/fanout.py
    hosts_taken_out: NotRequired[dict[str, str]]
    # added by `mai.api.run` for its caller: where the results lie
    home: NotRequired[str]
    catalog: NotRequired[str]


class ShardOutcome(BaseModel):
    """What a shard flow hands its parent through the store: its stage maps and its own accounting, and where
    and how long it ran. The same whether the shard ran in the parent's process or on a worker."""

    model_config = ConfigDict(frozen=True)

    shard_path: str
    stage_maps: StageMaps
    tally: Tally
    # the models (identity names) that the shard's process loaded while it ran: the process keeps its engines, so
    # a process that runs several shards of a run (a drain) loads each model for the first of them only
    loaded_models: list[str] = []
    host: str
    pid: int
    worker_pid: int
    wall_s: float
