"""Explicit Arrow schemas of every table (never inferred). Columns are snake_case with units.

Next to a schema, where storage/ builds or reads its rows, the row as Python sees it at the Arrow boundary
(`pa.Table.from_pylist` / `to_pylist`): a TypedDict with the same columns, so a new column is added to both
in one place. A column the store stamps itself (`created_at`, a profile's name) is not in the row type.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, NotRequired, Required, TypedDict

import pyarrow as pa

from mai.types import STAGE_NAMES, AnswerStyle, FinishReason, PromptKind, Role, RunMode

STRING_LIST = pa.list_(pa.string())

SAMPLES = pa.schema([
    ("sample_id", pa.string()),
    ("benchmark", pa.string()),
    ("dataset_fingerprint", pa.string()),
    ("shard", pa.int32()),
    ("question", pa.string()),
    ("options", STRING_LIST),
    ("answer", pa.string()),
    ("image_paths", STRING_LIST),
    ("image_sha256", STRING_LIST),
    ("category", pa.string()),
    ("content_hash", pa.string()),
    ("answer_style", pa.string()),
    ("error", pa.string()),
    ("references", STRING_LIST),
    ("meta_json", pa.string()),
])


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

GENERATIONS = pa.schema([
    ("gen_id", pa.string()),
    ("sample_id", pa.string()),
    ("benchmark", pa.string()),
    ("model", pa.string()),
    ("model_revision", pa.string()),
    ("dtype", pa.string()),
    ("prompt_kind", pa.string()),
    ("template", pa.string()),
    ("upstream_gen_id", pa.string()),
    ("max_new_tokens", pa.int32()),
    ("min_new_tokens", pa.int32()),
    ("prompt_text", pa.string()),
    ("text", pa.string()),
    ("output_token_ids", pa.list_(pa.int32())),
    ("answer_span", pa.string()),
    ("prompt_tokens", pa.int32()),
    ("output_tokens", pa.int32()),
    ("finish_reason", pa.string()),
    ("ttft_s", pa.float64()),
    ("decode_s", pa.float64()),
    ("wall_s", pa.float64()),
    ("batch_size", pa.int32()),
    ("backend", pa.string()),
    ("run_id", pa.string()),  # the run that computed it; every later run reuses it
    ("created_at", pa.timestamp("us", tz="UTC")),
    # prompt tokens the engine took from its prefix cache (vLLM); NULL in rows written before it existed
    ("cached_prompt_tokens", pa.int32()),
])


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
    run_id: str
    created_at: datetime
    cached_prompt_tokens: int | None

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

METRICS = pa.schema([
    ("run_id", pa.string()),
    ("benchmark", pa.string()),
    ("metric", pa.string()),
    ("subset", pa.string()),
    ("value", pa.float64()),
    ("n", pa.int64()),
    ("unit", pa.string()),
    ("scorer_profile", pa.string()),
])

SCORES = pa.schema([
    ("run_id", pa.string()),
    ("sample_id", pa.string()),
    ("scorer_profile", pa.string()),
    ("parsed", pa.string()),
    ("score", pa.float64()),
    ("final_gen_id", pa.string()),
])

FLOAT_LIST = pa.list_(pa.float64())
INT_LIST = pa.list_(pa.int32())

ATTENTION = pa.schema([
    ("capture_id", pa.string()),
    ("layer", pa.int32()),
    ("sample_id", pa.string()),
    ("model", pa.string()),
    ("reasoning_gen_id", pa.string()),
    ("n_reasoning_tokens", pa.int32()),
    ("prompt_tokens", pa.int32()),
    ("span_attention", pa.float64()),  # mean over heads of the last position's attention on the reasoning
    ("weights", FLOAT_LIST),           # per reasoning token, mean over heads
    ("head_span_attention", FLOAT_LIST),
    ("head_tokens_for_80", INT_LIST),
    ("token_ids", INT_LIST),
    ("token_texts", STRING_LIST),
    ("run_id", pa.string()),
    ("created_at", pa.timestamp("us", tz="UTC")),
    # wall seconds of the prefill that captured this sample, batch-amortised, the same on each of its layers' rows
    # (NULL in captures stored before it was recorded): sparse RT's time counts it once per capture it used
    ("capture_s", pa.float64()),
])


class CaptureRow(TypedDict):
    """A row of `attention`: one layer of one large-model prefill over the small model's reasoning."""

    capture_id: str
    layer: int
    sample_id: str
    model: str
    reasoning_gen_id: str
    n_reasoning_tokens: int
    prompt_tokens: int
    span_attention: float
    weights: list[float]
    head_span_attention: list[float]
    head_tokens_for_80: list[int]
    token_ids: list[int]
    token_texts: list[str]
    run_id: str
    capture_s: float

SELECTIONS = pa.schema([
    ("selection_id", pa.string()),
    ("capture_id", pa.string()),
    ("layer", pa.int32()),
    ("delta", pa.float64()),
    ("sample_id", pa.string()),
    ("model", pa.string()),
    ("n_reasoning_tokens", pa.int32()),
    ("n_selected", pa.int32()),
    ("share_selected", pa.float64()),
    ("span_attention", pa.float64()),
    ("selected_token_ids", INT_LIST),
    ("transferred_text", pa.string()),
    ("transferred_tokens", pa.int32()),
    ("run_id", pa.string()),
    ("created_at", pa.timestamp("us", tz="UTC")),
])


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

LATENCY_PROFILES = pa.schema([
    ("profile_name", pa.string()),
    ("model", pa.string()),
    ("backend", pa.string()),
    ("dtype", pa.string()),
    ("hardware", pa.string()),
    ("source", pa.string()),            # measured | imported
    ("image_resolution", pa.int32()),    # requested square side in pixels
    ("image_tokens", pa.int32()),
    ("query_tokens", pa.int32()),
    ("input_tokens", pa.int32()),
    ("output_tokens", pa.int32()),
    ("repeats", pa.int32()),
    ("preprocess_ms", pa.float64()), ("preprocess_ms_min", pa.float64()), ("preprocess_ms_max", pa.float64()),
    ("vision_ms", pa.float64()), ("vision_ms_min", pa.float64()), ("vision_ms_max", pa.float64()),
    ("ttft_ms", pa.float64()), ("ttft_ms_min", pa.float64()), ("ttft_ms_max", pa.float64()),
    ("decode_ms", pa.float64()), ("decode_ms_min", pa.float64()), ("decode_ms_max", pa.float64()),
    ("tokens_per_s", pa.float64()),
    ("created_at", pa.timestamp("us", tz="UTC")),
])


class LatencyProfileRow(TypedDict):
    """A point of a latency profile. Published numbers (a CSV) leave out what they do not report; a measured
    point also has the spread of its repeats and the preprocessing and vision times."""

    model: str
    backend: str
    dtype: str
    hardware: str
    source: Literal["measured", "imported"]
    image_resolution: int | None
    image_tokens: int | None
    query_tokens: int | None
    input_tokens: int | None
    output_tokens: int | None
    repeats: int | None
    ttft_ms: float | None
    decode_ms: float | None
    tokens_per_s: float | None
    preprocess_ms: NotRequired[float]
    preprocess_ms_min: NotRequired[float]
    preprocess_ms_max: NotRequired[float]
    vision_ms: NotRequired[float]
    vision_ms_min: NotRequired[float]
    vision_ms_max: NotRequired[float]
    ttft_ms_min: NotRequired[float]
    ttft_ms_max: NotRequired[float]
    decode_ms_min: NotRequired[float]
    decode_ms_max: NotRequired[float]

ESTIMATES = pa.schema([
    ("run_id", pa.string()),
    ("estimate_name", pa.string()),
    ("stage", pa.string()),             # a cascade stage, or 'total'
    ("profile_name", pa.string()),
    ("calls", pa.int64()),
    ("prompt_tokens", pa.int64()),
    ("output_tokens", pa.int64()),
    ("ttft_s", pa.float64()),
    ("decode_s", pa.float64()),
    ("total_s", pa.float64()),
])


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

SPECULATIVE = pa.schema([
    ("run_id", pa.string()),            # the plain large-model R run whose outputs are the reference
    ("sample_id", pa.string()),
    ("gen_id", pa.string()),
    ("large_model", pa.string()),
    ("small_model", pa.string()),
    ("draft_tokens", pa.int32()),
    ("proposed", pa.int32()),
    ("accepted", pa.int32()),
    ("acceptance_rate", pa.float64()),
    ("rounds", pa.int32()),
    ("output_tokens", pa.int32()),
    ("identical_to_greedy", pa.bool_()),
    ("speculative_wall_s", pa.float64()),
    ("plain_wall_s", pa.float64()),     # the large model alone, greedy, batch size 1, same request
])

RUNS = pa.schema([
    ("run_id", pa.string()),
    ("run_name", pa.string()),
    ("config_key", pa.string()),
    ("started_at", pa.timestamp("us", tz="UTC")),
    ("finished_at", pa.timestamp("us", tz="UTC")),
    ("wall_s", pa.float64()),
    ("engine_generate_s", pa.float64()),
    ("model_load_s", pa.float64()),
    ("mode", pa.string()),
    ("benchmark", pa.string()),
    ("dataset_fingerprint", pa.string()),
    ("small_model", pa.string()),
    ("large_model", pa.string()),
    ("single_model", pa.string()),
    ("single_prompt", pa.string()),
    ("s2", pa.bool_()),
    ("transfer", pa.string()),
    ("transfer_layer", pa.int32()),
    ("transfer_delta", pa.float64()),
    ("backend", pa.string()),
    ("n_shards", pa.int32()),
    ("n_samples", pa.int64()),
    ("n_valid", pa.int64()),
    ("n_errors", pa.int64()),
    ("n_generations_needed", pa.int64()),
    ("n_generations_computed", pa.int64()),
    ("n_generations_reused", pa.int64()),
    ("routed_mv1", pa.int64()),
    ("routed_mv2", pa.int64()),
    ("routed_rt", pa.int64()),
    ("git_commit", pa.string()),
    ("config_json", pa.string()),
    ("versions_json", pa.string()),
    # mai.manifest.RunProvenance as JSON (NULL in runs stored before it was recorded)
    ("provenance_json", pa.string()),
])


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
    provenance_json: str | None
