"""What `mai benchmark check` reads and reports of a spec benchmark without a model (mai/evals/spec.py), and the
fields `mai benchmarks` lists. The prompt lengths are counted a layer up (mai/run/benchmark_check.py), which
has the models' tokenizers: `PromptLengths` is their result."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass

from mai.evals.chartqa import to_float
from mai.evals.loading import DEFAULT_MAX_IMAGE_PIXELS, ImageSink, resolve_source, rows_to_samples
from mai.evals.spec import BenchmarkSpec, SpecBenchmark, spec_split
from mai.types import Sample

# what `mai benchmarks` prints and docs/benchmarks-and-scoring.md explains: every field, with its default
SPEC_TEMPLATE = """\
name: my-colours            # the benchmark's name in the store, runs and reports (not a built-in's)
description: ...            # optional: free text for people (no output depends on it)
data: colours.tsv           # a file or folder, relative to this spec and inside its folder; format hub: owner/name
# data_root: ..             # optional: the folder the data and image files must be in (relative to this spec;
                            # default: this spec's folder); paths that leave it are refused
format: vlmevalkit-tsv      # vlmevalkit-tsv | parquet | jsonl | hub
answer_kind: choice         # choice (as MMBench) | yes_no (as POPE) | number (as ChartQA) | text (as InfoVQA)
metric: accuracy            # choice, yes_no: accuracy; number: relaxed_accuracy | exact_match;
                            # text: anls | exact_match (default: the first)
columns:                    # where each field is (these are the defaults)
  id: index                 # optional: else the row's position
  image: image              # base64 (TSV), bytes, {bytes, path}, a path relative to the data file, or a list of
                            # these in one cell; a list of columns for several images
  question: question
  options: [A, B, C, D]     # choice only; default: the columns A..H the data has
  answer: answer            # a letter (choice), yes/no, a number, a text (or a list of accepted texts)
  category: category        # optional: per-category metrics
  hint: hint                # optional: put before the question
# prompt: "{hint}\\n{question}\\nOptions:\\n{options}"   # optional: the question's layout, over {question}, {hint},
                            # {options} (A. text lines), {category} and any data column by name (default: the
                            # answer kind's); the stage instruction (S, R, S2, RT) follows it unchanged
# max_new_tokens: {S: 32, R: 256}   # optional: output budgets per prompt kind (S, E, R, S2, RT), unless the
                            # command sets them (--max-new-tokens)
# split: test               # hub, or a Parquet folder with several splits
# revision: <commit sha>    # hub: required
# subset: <config name>     # hub: the dataset's config
"""


@dataclass(frozen=True)
class PromptLengths:
    """The S prompts' tokens (image tokens included) as `model`'s tokenizer and processor count them, over the usable
    rows, and the rows whose prompt of some stage does not fit a model of the run with its output budgets."""

    model: str
    context: int
    min: int
    median: int
    max: int
    over_context: list[tuple[str, str]]  # (sample id, reason)


@dataclass(frozen=True)
class SpecCheck:
    """What `mai benchmark check` found in a spec's data, without running a model."""

    spec: BenchmarkSpec
    columns: list[str]                   # the data's
    fields: list[tuple[str, str, bool]]  # (spec field, data column, whether the data has it)
    rows: int
    usable: int
    images: int                          # images that decoded, over the usable rows
    answers: dict[str, int]              # reference answers (choice: letters; yes_no: yes / no; else kinds)
    categories: dict[str, int]
    errors: list[tuple[str, str]]        # (sample id, reason) of every row that cannot be used
    prompts: PromptLengths | None = None  # None: not counted (no model at hand, or no usable row)


def _hash_only(encoded: bytes) -> tuple[str, str]:
    return "", hashlib.sha256(encoded).hexdigest()


def read_spec_samples(spec: BenchmarkSpec, max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
                      store_image: ImageSink = _hash_only) -> tuple[list[str], list[Sample]]:
    """The data's columns and every row as a run makes it a sample (images decoded; `store_image` keeps them, by
    default nowhere)."""
    benchmark = SpecBenchmark(spec)
    source = resolve_source(spec.data, spec_split(spec), spec.subset, spec.revision)
    benchmark.check_data(source)
    columns, rows = benchmark.read_rows(source)
    return list(columns), rows_to_samples(benchmark, rows, store_image, max_image_pixels)


def check_spec(spec: BenchmarkSpec, max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> SpecCheck:
    """Read every row of the spec's data as a run would (images decoded, nothing stored), and count."""
    columns, samples = read_spec_samples(spec, max_image_pixels)
    return summarise_check(spec, columns, samples)


def summarise_check(spec: BenchmarkSpec, columns: list[str], samples: list[Sample]) -> SpecCheck:
    usable = [s for s in samples if s.error is None]
    fields = spec.columns.model_dump()
    listed = [("id", fields["id"] or "index"), *[("image", c) for c in spec.columns.images],
              ("question", fields["question"]),
              *[("options", c) for c in SpecBenchmark(spec).option_columns(columns)],
              ("answer", fields["answer"]), ("category", fields["category"] or "category"),
              ("hint", fields["hint"] or "hint")]
    return SpecCheck(spec=spec, columns=columns, fields=[(f, c, c in columns) for f, c in listed],
                     rows=len(samples), usable=len(usable), images=sum(len(s.image_sha256) for s in usable),
                     answers=dict(Counter(_answer_kind_of(spec, s) for s in usable).most_common()),
                     categories=dict(Counter(s.category for s in usable).most_common()),
                     errors=[(s.sample_id, s.error) for s in samples if s.error is not None])


def _answer_kind_of(spec: BenchmarkSpec, sample: Sample) -> str:
    if spec.answer_kind in ("choice", "yes_no"):
        return sample.answer
    if spec.answer_kind == "number":
        return "number" if to_float(sample.answer) is not None else "not a number (string match)"
    return "several answers" if len(sample.references) > 1 else "one answer"
