"""Benchmark name -> implementation and where its data comes from. One line per benchmark."""

from __future__ import annotations

from dataclasses import dataclass

from mai.errors import ConfigError
from mai.evals.base import Benchmark
from mai.evals.chartqa import ChartQABenchmark
from mai.evals.demo import DemoBenchmark
from mai.evals.infovqa import InfoVQABenchmark
from mai.evals.mmbench import MMBenchBenchmark
from mai.evals.mmmu import MMMUBenchmark
from mai.evals.pope import PopeBenchmark
from mai.evals.realworldqa import RealWorldQABenchmark
from mai.evals.shapes import ShapesBenchmark


@dataclass(frozen=True)
class BenchmarkEntry:
    factory: type
    hub_ids: tuple[str, ...]  # preferred first; older ids still accepted
    split: str
    config: str | None = None


BENCHMARKS: dict[str, BenchmarkEntry] = {
    "demo": BenchmarkEntry(DemoBenchmark, hub_ids=(), split="test"),
    "shapes": BenchmarkEntry(ShapesBenchmark, hub_ids=(), split="test"),
    "pope": BenchmarkEntry(PopeBenchmark, ("lmms-lab-encoder/POPE", "lmms-lab/POPE"), split="test"),
    "mmbench": BenchmarkEntry(MMBenchBenchmark, ("lmms-lab-encoder/MMBench", "lmms-lab/MMBench"), split="dev",
                              config="en"),
    "mmmu": BenchmarkEntry(MMMUBenchmark, ("lmms-lab-encoder/MMMU", "lmms-lab/MMMU"), split="validation"),
    "chartqa": BenchmarkEntry(ChartQABenchmark, ("lmms-lab-encoder/ChartQA", "lmms-lab/ChartQA"), split="test"),
    "realworldqa": BenchmarkEntry(RealWorldQABenchmark, ("lmms-lab-encoder/RealWorldQA", "lmms-lab/RealWorldQA"),
                                  split="test"),
    "infovqa": BenchmarkEntry(InfoVQABenchmark, ("lmms-lab-encoder/DocVQA", "lmms-lab/DocVQA"), split="validation",
                              config="InfographicVQA"),
}


def get_benchmark(name: str) -> Benchmark:
    entry = BENCHMARKS.get(name)
    if entry is None:
        raise ConfigError(f"unknown benchmark '{name}': choose one of {sorted(BENCHMARKS)}")
    benchmark: Benchmark = entry.factory()
    return benchmark


def get_entry(name: str) -> BenchmarkEntry:
    get_benchmark(name)
    return BENCHMARKS[name]
