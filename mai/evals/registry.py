"""Benchmark name -> implementation and where its data comes from. One line per built-in benchmark; a benchmark
described by a spec file (mai/evals/spec.py) is known by its name once its spec is registered (`register_spec`:
done by every RunConfig that carries it, and for a store's recorded specs by the commands that read the store)."""

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
from mai.evals.spec import BenchmarkSpec, SpecBenchmark, is_spec_path, load_spec, spec_split


@dataclass(frozen=True)
class BenchmarkEntry:
    factory: type
    hub_ids: tuple[str, ...]  # preferred first; older ids still accepted
    split: str
    config: str | None = None
    revision: str | None = None  # a spec's pinned hub revision


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


# spec benchmarks known in this process, by name; a later spec of the same name (a new version) replaces the earlier
_SPECS: dict[str, BenchmarkSpec] = {}


def register_spec(spec: BenchmarkSpec) -> None:
    _SPECS[spec.name] = spec


def get_benchmark(name: str) -> Benchmark:
    entry = BENCHMARKS.get(name)
    if entry is not None:
        benchmark: Benchmark = entry.factory()
        return benchmark
    spec = _SPECS.get(name)
    if spec is None:
        raise ConfigError(f"unknown benchmark '{name}': choose one of {sorted(BENCHMARKS)}, or pass a benchmark spec "
                          "file (--benchmark path/to/bench.yaml; see `mai benchmarks`)")
    return SpecBenchmark(spec)


def benchmark_named(name_or_spec: str) -> Benchmark:
    """A built-in or registered benchmark by name, or the benchmark of a spec file (registered on the way)."""
    if is_spec_path(name_or_spec):
        spec = load_spec(name_or_spec)
        register_spec(spec)
        return SpecBenchmark(spec)
    return get_benchmark(name_or_spec)


def get_entry(name: str) -> BenchmarkEntry:
    get_benchmark(name)
    spec = _SPECS.get(name)
    if name not in BENCHMARKS and spec is not None:
        return BenchmarkEntry(SpecBenchmark, hub_ids=(spec.data,), split=spec_split(spec),
                              config=spec.subset, revision=spec.revision)
    return BENCHMARKS[name]

