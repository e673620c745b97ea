"""Explicit Arrow schemas of every table (never inferred). Columns are snake_case with units.

Where storage/ builds or reads a table's rows, the row as Python sees it at the Arrow boundary
(`parquet.arrow_table` / `to_pylist`) is a TypedDict, and the table's schema is derived from it column for
column (`arrow_schema`), so a new column is added in one place. A column the store stamps itself (`created_at`,
a profile's name) is not in the row type; it is added to the schema beside it.
"""

from __future__ import annotations

import types
from datetime import datetime
from typing import Literal, NotRequired, Required, TypedDict, Union, get_args, get_origin, get_type_hints

import pyarrow as pa

from mai.types import STAGE_NAMES, AnswerStyle, FinishReason, PromptKind, Role, RunMode

STRING_LIST = pa.list_(pa.string())
FLOAT_LIST = pa.list_(pa.float64())
INT32 = pa.int32()
INT_LIST = pa.list_(INT32)
UTC_TIMESTAMP = pa.timestamp("us", tz="UTC")
_ARROW_TYPES: dict[object, pa.DataType] = {
    str: pa.string(), float: pa.float64(), bool: pa.bool_(), datetime: UTC_TIMESTAMP,
    list[str]: STRING_LIST, list[float]: FLOAT_LIST, list[int]: INT_LIST,
}


def arrow_schema(row: type, *, ints: pa.DataType = INT32, **overrides: pa.DataType) -> pa.Schema:
    """The Arrow schema of a row TypedDict, its columns in its order: a `X | None` column is X (every Arrow
    column is nullable), a `Literal` of strings is a string, an int is `ints` unless `overrides` names it."""
    fields = []
    for name, hint in get_type_hints(row).items():
        if get_origin(hint) in (Union, types.UnionType):
            (hint,) = (arg for arg in get_args(hint) if arg is not types.NoneType)
        if get_origin(hint) is Literal:
            hint = str
        fields.append((name, overrides.get(name) or (ints if hint is int else _ARROW_TYPES[hint])))
    return pa.schema(fields)


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


SAMPLES = arrow_schema(SampleRow)


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


GENERATIONS = arrow_schema(GenerationRow)

ROUTES = pa.schema(
    [
        ("run_id", pa.string()),
        ("sample_id", pa.string()),
        ("shard", pa.int32()),
        ("category", pa.string()),
        ("route", pa.string()),
        ("final_answer", pa.string()),
        ("final_gen_id", pa.string()),
        ("reference", pa.string()),
        ("score", pa.float64()),
        ("parsed", pa.bool_()),
        ("agreement_rule", pa.string()),
        ("error", pa.string()),
    ]
    + [(f"answer_{stage}", pa.string()) for stage in STAGE_NAMES]
    + [(f"gen_{stage}", pa.string()) for stage in STAGE_NAMES]
)

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


METRICS = arrow_schema(MetricRecord, ints=pa.int64())


class ScoreRecord(TypedDict):
    """A row of the `scores` table."""

    run_id: str
    sample_id: str
    scorer_profile: str
    parsed: str | None
    score: float
    final_gen_id: str | None


SCORES = arrow_schema(ScoreRecord)


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


_CAPTURE_COLUMNS = arrow_schema(CaptureRow)
ATTENTION = _CAPTURE_COLUMNS.insert(
    _CAPTURE_COLUMNS.get_field_index("capture_s"), pa.field("created_at", UTC_TIMESTAMP)
)


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


SELECTIONS = arrow_schema(SelectionRow).append(pa.field("created_at", UTC_TIMESTAMP))


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


LATENCY_PROFILES = pa.schema(
    [("profile_name", pa.string()), *arrow_schema(LatencyProfileRow), ("created_at", UTC_TIMESTAMP)]
)


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


ESTIMATES = arrow_schema(EstimateRow, ints=pa.int64())


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


SPECULATIVE = arrow_schema(SpeculativeRow)


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


RUNS = arrow_schema(RunRow, ints=pa.int64(), transfer_layer=INT32, n_shards=INT32)
