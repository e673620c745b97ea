"""The latency flow `mai-profile`: a model measured on simulated inputs into a named latency profile (paper tables
1-4). Pricing a stored run under profiles (`mai estimate`) runs no model and needs no flow: mai/run/estimate.py."""

from __future__ import annotations

import platform
import statistics

from prefect import flow
from prefect.artifacts import create_progress_artifact, update_progress_artifact

from mai import progress
from mai.backends.registry import get_engine
from mai.backends.transformers_backend import TransformersEngine
from mai.backends.transformers_profiling import ProfilePoint, profile_calls
from mai.config import resolve_model
from mai.errors import ConfigError
from mai.evals.fingerprint_cache import FingerprintCache
from mai.run.prefect_sync import synchronous
from mai.storage.catalog import build_catalog
from mai.storage.latency import profile_path, write_profile
from mai.storage.paths import Home
from mai.storage.rows import LatencyProfileRow


def hardware_description() -> str:
    import torch

    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda})"
    return f"CPU {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"


@flow(name="mai-profile", persist_result=False)
def mai_profile(model: str, name: str, resolutions: list[int], query_tokens: list[int], output_tokens: list[int],
                repeats: int = 3, revision: str = "main", dtype: str = "float32", backend: str = "transformers",
                home: str | None = None, replace: bool = False) -> list[LatencyProfileRow]:
    root = Home.at(home)
    spec = resolve_model(model, revision, dtype, root.models, FingerprintCache(root.fingerprints))
    if repeats < 1 or not (resolutions and query_tokens and output_tokens):
        raise ConfigError("profiling needs at least one resolution, query length and output length, and repeats >= 1")
    if profile_path(root, name).exists() and not replace:  # before the model loads, not after minutes of timing
        raise ConfigError(f"latency profile '{name}' exists: choose another name or pass --replace")
    engine = get_engine(spec, backend)
    if not isinstance(engine, TransformersEngine):
        raise ConfigError("profiling is implemented for the transformers backend")
    grid = [(r, q, o) for r in resolutions for q in query_tokens for o in output_tokens]
    artifact = synchronous(create_progress_artifact(progress=0.0, key="mai-profile-progress",
                                                    description=f"profile {name}"))
    # on the terminal: one step per timed model call (a point of a real-size model on a CPU takes minutes)
    progress.stage_started("profile", len(grid) * profile_calls(repeats))
    rows, hardware = [], hardware_description()
    for index, (resolution, query, output) in enumerate(grid):
        point = engine.profile(resolution, query, output, repeats, on_call=lambda: progress.advanced("profile", 1))
        rows.append(_profile_row(point, spec.identity_name, backend, dtype, hardware))
        # every point as soon as it is measured: a profile stopped part-way (a time limit, a lost machine) keeps
        # what it measured
        write_profile(root, name, rows, replace=True)
        update_progress_artifact(artifact, 100.0 * (index + 1) / len(grid))
    build_catalog(root)
    return rows


def _profile_row(point: ProfilePoint, model: str, backend: str, dtype: str, hardware: str) -> LatencyProfileRow:
    """A measured point: the median of its repeats and their spread, per timed call (TTFT and decode come from
    the same calls, `TransformersEngine.profile`)."""
    t = point.timings
    preprocess, vision, ttft, decode = (_milliseconds(values) for values in (t.preprocess, t.vision, t.ttft, t.decode))
    steps = point.output_tokens - 1  # tokens after the first, which TTFT already covers
    return {
        "model": model, "backend": backend, "dtype": dtype, "hardware": hardware, "source": "measured",
        "image_resolution": point.image_resolution, "image_tokens": point.image_tokens,
        "query_tokens": point.query_tokens, "input_tokens": point.input_tokens, "output_tokens": point.output_tokens,
        "repeats": point.repeats,
        "preprocess_ms": preprocess[0], "preprocess_ms_min": preprocess[1], "preprocess_ms_max": preprocess[2],
        "vision_ms": vision[0], "vision_ms_min": vision[1], "vision_ms_max": vision[2],
        "ttft_ms": ttft[0], "ttft_ms_min": ttft[1], "ttft_ms_max": ttft[2],
        "decode_ms": decode[0], "decode_ms_min": decode[1], "decode_ms_max": decode[2],
        "tokens_per_s": steps / (decode[0] / 1000) if steps > 0 and decode[0] > 0 else None,
    }


def _milliseconds(seconds: tuple[float, ...]) -> tuple[float, float, float]:
    """(median, min, max) in milliseconds."""
    ms = [v * 1000 for v in seconds]
    return statistics.median(ms), min(ms), max(ms)
