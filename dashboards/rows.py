"""The rows the dashboards' queries return, one TypedDict per query shape: a row crosses from DuckDB as a mapping
of the SELECT's column names, so a mapping with named, typed fields is its honest type. `fetch` (views.py) casts
to them; the SQL they describe sits next to the code that runs it."""

from __future__ import annotations

from datetime import datetime
from typing import TypedDict

from mai.types import PromptKind, Route, RunMode


class UsedRow(TypedDict):
    """One generation a run used for a sample (`USED_GENERATIONS`); `stage` is the routes column, 'gen_r_small'."""

    run_id: str
    sample_id: str
    stage: str
    gen_id: str


class HeadlineRow(TypedDict):
    run_id: str
    scorer_profile: str
    metric: str
    value: float


class ScoreRow(TypedDict):
    run_id: str
    sample_id: str
    scorer_profile: str
    score: float | None


class MissingRow(TypedDict):
    run_id: str
    used: int
    missing: int


class RunTokensRow(TypedDict):
    run_id: str
    tokens: int | None


class RouteCountRow(TypedDict):
    run_id: str
    route: Route
    n: int


class CountRow(TypedDict):
    n: int


class S2PairRow(TypedDict):
    """s2_vs_non_s2.sql: two runs that differ only in S2, over the samples both hold."""

    mode: RunMode
    small_model: str | None
    large_model: str | None
    run_without_s2: str
    run_with_s2: str
    common_samples: int
    accuracy_without_s2: float
    accuracy_with_s2: float
    mv2_without_s2: int
    mv2_with_s2: int
    rt_without_s2: int
    rt_with_s2: int
    answers_changed: int


class S2ChangedRow(TypedDict):
    sample_id: str
    category: str
    without_s2: str | None
    with_s2: str | None
    reference: str | None
    score_without: float | None
    score_with: float | None
    route_without: Route
    route_with: Route


class SweepRow(TypedDict):
    """transfer_layer_sweep.sql: a sparse-RT run per (layer, delta), next to full RT and the large model's S."""

    setting: str
    layer: int | None
    delta: float | None
    mode: RunMode
    benchmark: str
    large_model: str | None
    rt_samples: int | None
    mean_reasoning_tokens: float | None
    mean_transferred_tokens: float | None
    mean_share_selected: float | None
    metric: str
    value: float
    run_id: str


class CaptureGroupRow(TypedDict):
    """The comparison group of attention rows (transfer_section.RUN_CAPTURES): the sample set of the report's run
    that wrote or read them."""

    benchmark: str
    dataset_fingerprint: str
    sample_ids: str
    group_n: int
    group_run: str


class AttentionPairRow(CaptureGroupRow):
    """transfer_section.PER_LAYER: one layer of a large model reading another model's reasoning."""

    model: str
    reasoning_model: str
    layer: int
    prefills: int
    attention: float
    share_for_80: float
    reasoning_tokens: float


class HeadCellRow(CaptureGroupRow):
    """transfer_section.PER_HEAD: one head of one layer, mean over the captures."""

    model: str
    reasoning_model: str
    layer: int
    head: int
    attention: float
    share_for_80: float


class ExampleSampleRow(CaptureGroupRow):
    """transfer_section.EXAMPLE_SAMPLE: the sample table 16 shows for a model pair in a comparison group."""

    pair: str
    sample_id: str


class ExampleWeightsRow(CaptureGroupRow):
    """transfer_section.EXAMPLE_WEIGHTS: one layer's head-averaged weights over the example's reasoning."""

    pair: str
    layer: int
    sample_id: str
    weights: list[float]
    token_texts: list[str]


class LatencyPointRow(TypedDict):
    """A row of the `latency_profiles` view, as the latency section plots it (published profiles leave the
    measured-only columns NULL)."""

    profile_name: str
    model: str
    hardware: str
    input_tokens: int
    query_tokens: int | None
    output_tokens: int | None
    image_resolution: int | None
    ttft_ms: float | None
    tokens_per_s: float | None
    preprocess_ms: float | None
    vision_ms: float | None
    decode_ms: float | None


class TimingSetRow(TypedDict):
    """timing_sets.sql: one run's outputs as a timing set (`mai time`) recomputed them."""

    timing_set: str
    run_id: str
    measured_s: float
    outputs: int
    identical: int
    realised_batches: str
    batch_limits: str
    regime: str
    load_min: float | None
    load_max: float | None
    load_band: float | None
    cpu_count: int | None
    created_at: datetime


class SpeculativeRow(TypedDict):
    run_id: str
    large_model: str
    small_model: str
    draft_tokens: int
    samples: int
    acceptance: float | None
    speculative_s: float | None
    plain_s: float | None
    speedup: float | None
    identical: bool


class SpeedupRow(TypedDict):
    """speedup.sql: a run's estimated and measured time against the large model's R run and Full RT on the same
    samples; `prices` is what the estimate prices ('model=profile, ...')."""

    benchmark: str
    estimate_name: str | None
    prices: str | None
    setting: str
    output_tokens: int
    estimated_s: float | None
    measured_s: float | None
    estimated_speedup_vs_large_r: float | None
    measured_speedup_vs_large_r: float | None
    estimated_speedup_vs_full_rt: float | None
    measured_speedup_vs_full_rt: float | None
    run_id: str
    large_r_run_id: str | None
    large_r_estimate: str | None
    full_rt_run_id: str | None
    full_rt_estimate: str | None
    n_samples: int
    timed_runs: list[str]  # the runs that computed the generations and captures measured_s adds up
    estimate_excludes_capture: bool | None  # a sparse run's estimate made before capture prefills were priced
    # why the measured speed-up against large R / Full RT is not given (None: both times in one regime,
    # docs/latency.md); the run's realised batch sizes per stage ('r_small 7, rt_large 3/4'), its batch limits per
    # prompt kind, its load (1-minute average) at the start and end, the highest and lowest any of its calls saw, the
    # band's width from the lowest, and where it was timed ('host (hardware); device; backend engine')
    large_r_mixed: str | None
    full_rt_mixed: str | None
    realised_batches: str | None
    batch_limits: str | None
    load_start: float | None
    load_end: float | None
    load_max: float | None
    load_min: float | None
    load_band: float | None
    regime: str | None


class RunIdRow(TypedDict):
    run_id: str


class EstimatePriceRow(TypedDict):
    """provenance.ESTIMATE_PRICES: an estimate's total and its 'model=profile' entries."""

    run_id: str
    estimate_name: str
    total_s: float
    prices: list[str]


class TokensByKindRow(TypedDict):
    """paper_tables.TOKENS_BY_KIND: mean output tokens of one model and prompt kind on one benchmark."""

    model: str
    benchmark: str
    prompt_kind: PromptKind
    generations: int
    mean_output_tokens: float


class StageParseRow(TypedDict):
    """paper_tables.STAGE_PARSE: a run's answers at one stage and how many no parser read."""

    run_id: str
    stage: str
    outputs: int
    unparsed: int
