"""The paper's latency estimate (appendix B.2, equation 27), as pure functions.

    T = sum over a run's calls k of ( TTFT_k(context length) + output tokens_k / tokens-per-second_k )

TTFT comes from a latency profile of the call's model (measured by `mai profile`, or imported from
published numbers such as the paper's tables 3-4), interpolated linearly in the total input length,
extended with the last segment beyond the longest profiled input and held at the shortest one's value
below it (a line through short inputs can reach zero or below); tokens per second is the profile's decoding throughput. The
estimate is deliberately sequential (no batching, no overlap), as in the paper.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass

from mai.errors import ConfigError


@dataclass(frozen=True)
class LatencyProfile:
    name: str
    model: str
    ttft_points: tuple[tuple[int, float], ...]  # (total input tokens, TTFT seconds), any order
    tokens_per_s: float


@dataclass(frozen=True)
class Call:
    stage: str
    model: str
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class StageEstimate:
    stage: str
    profile: str
    calls: int
    prompt_tokens: int
    output_tokens: int
    ttft_s: float
    decode_s: float

    @property
    def total_s(self) -> float:
        return self.ttft_s + self.decode_s


def ttft_at(profile: LatencyProfile, input_tokens: int) -> float:
    """Piecewise-linear in the input length; points at the same length are averaged."""
    by_length: dict[int, list[float]] = {}
    for length, seconds in profile.ttft_points:
        by_length.setdefault(length, []).append(seconds)
    points = sorted((length, sum(v) / len(v)) for length, v in by_length.items())
    if not points:
        raise ConfigError(f"latency profile '{profile.name}' has no TTFT points")
    if len(points) == 1 or input_tokens <= points[0][0]:
        return points[0][1]
    # the segment whose right end is the first point at or past the input; past the last point, the last segment
    segment = min(bisect_left([x for x, _ in points], input_tokens, 1), len(points) - 1) - 1
    (x0, y0), (x1, y1) = points[segment], points[segment + 1]
    return y0 + (y1 - y0) * (input_tokens - x0) / (x1 - x0)


def call_seconds(profile: LatencyProfile, call: Call) -> tuple[float, float]:
    """(TTFT, decode) of one call under equation 27."""
    if profile.tokens_per_s <= 0:
        raise ConfigError(f"latency profile '{profile.name}' has no positive tokens-per-second")
    return ttft_at(profile, call.prompt_tokens), call.output_tokens / profile.tokens_per_s


def estimate(calls: Iterable[Call], profiles: dict[str, LatencyProfile]) -> list[StageEstimate]:
    """Per stage (in first-seen order), summed over its calls; `profiles` maps model -> profile."""
    sums: dict[str, list[float]] = {}
    names: dict[str, str] = {}
    for call in calls:
        profile = profiles.get(call.model)
        if profile is None:
            raise ConfigError(f"no latency profile given for model '{call.model}' (stage {call.stage})")
        ttft, decode = call_seconds(profile, call)
        row = sums.setdefault(call.stage, [0, 0, 0, 0.0, 0.0])
        row[0] += 1
        row[1] += call.prompt_tokens
        row[2] += call.output_tokens
        row[3] += ttft
        row[4] += decode
        names[call.stage] = profile.name
    return [StageEstimate(stage, names[stage], int(r[0]), int(r[1]), int(r[2]), r[3], r[4]) for stage, r in sums.items()]
