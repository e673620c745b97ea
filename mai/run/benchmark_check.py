"""`mai benchmark check`: a spec and its data read as a run reads them, plus how long its prompts are for the
run's models (default: the built-in pair, built into the store when missing, as a run builds them). No model runs:
the tokenizer and image processor count each prompt (mai/backends/prompt_length.py), and the rows that would not fit
a model's context with the run's output budgets are those a run would refuse (mai/run/prompt_limits.py)."""

from __future__ import annotations

import hashlib
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path

from mai.backends.prompt_length import prompt_counter
from mai.config import RunConfig
from mai.evals.loading import ImageSink
from mai.evals.registry import get_benchmark
from mai.evals.spec_check import PromptLengths, SpecCheck, read_spec_samples, summarise_check
from mai.plan import RunPlan
from mai.prompts import build_prompt
from mai.run.prompt_limits import refused_samples
from mai.types import Sample


def check_spec_file(config: RunConfig, plan: RunPlan) -> SpecCheck:
    """Every row of the configuration's spec benchmark read (images decoded into a temporary folder), counted, and
    its prompts measured with the plan's models."""
    spec = config.benchmark_spec
    assert spec is not None, "check_spec_file takes a spec benchmark's configuration"
    with tempfile.TemporaryDirectory(prefix="mai-check-") as folder:
        columns, samples = read_spec_samples(spec, config.max_image_pixels, _image_files(Path(folder)))
        found = summarise_check(spec, columns, samples)
        usable = [s for s in samples if s.error is None]
        return replace(found, prompts=prompt_lengths(plan, usable)) if usable else found


def prompt_lengths(plan: RunPlan, samples: list[Sample]) -> PromptLengths:
    """The S prompts' tokens on the first model of the plan (the small one in a cascade), and every sample a run of
    the plan would refuse for its length, with the reason."""
    role = "small" if "small" in plan.models else next(iter(plan.models))
    model = plan.models[role]
    counter = prompt_counter(model)
    benchmark = get_benchmark(plan.benchmark)
    sizes = sorted(counter.count(build_prompt(benchmark.format_question(s), s.image_paths, "S",
                                              benchmark.answer_style(s), benchmark.rt_template(s)),
                                 counter.context_length).tokens for s in samples)
    over = refused_samples(plan, samples)
    return PromptLengths(model=model.name_or_path.rstrip("/").rsplit("/", 1)[-1], context=counter.context_length,
                         min=sizes[0], median=int(statistics.median_low(sizes)), max=sizes[-1],
                         over_context=sorted(over.items()))


def _image_files(folder: Path) -> ImageSink:
    """Images kept as files by content (the prompt counter reads each image's size from its header)."""
    def keep(encoded: bytes) -> tuple[str, str]:
        digest = hashlib.sha256(encoded).hexdigest()
        path = folder / digest
        if not path.exists():
            path.write_bytes(encoded)
        return str(path), digest

    return keep
