"""Explicit Arrow schemas of every table (never inferred). Columns are snake_case with units."""

from __future__ import annotations

import pyarrow as pa

from mai.types import STAGE_NAMES

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
])

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
])

# every table of the store by its view's name
TABLE_SCHEMAS: dict[str, pa.Schema] = {
    "samples": SAMPLES, "generations": GENERATIONS, "routes": ROUTES, "metrics": METRICS, "scores": SCORES,
    "runs": RUNS, "attention": ATTENTION, "selections": SELECTIONS, "latency_profiles": LATENCY_PROFILES,
    "estimates": ESTIMATES, "speculative": SPECULATIVE,
}
