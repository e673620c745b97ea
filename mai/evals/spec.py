"""A researcher's own benchmark, described by a spec file (YAML) instead of a module: where the data is, which
column holds what, and what kind of answer it asks for. Each answer kind is one of the paper's benchmarks' rules,
reused as they are (prompt, answer parser, agreement rule, scorer):

- choice:  as MMBench (options as lettered lines, the hint before the question, the paper's letter instruction;
           letters parsed by MMBench's `parse_option`; agreement: the same letter). Metric: accuracy.
- yes_no:  as POPE (the question; an exact yes / no; agreement: the same word). Metrics: accuracy, precision,
           recall, F1, yes ratio.
- number:  as ChartQA (relaxed accuracy: within 5 % of the target; agreement: a relaxed match either way), or
           exact_match.
- text:    as InfoVQA (ANLS over the reference answers; agreement: ANLS >= 0.5), or exact_match as RealWorldQA's
           open questions (lower case, surrounding dots stripped; `official`: punctuation ignored).

A spec may replace the kind's question layout with its own `prompt:` template (mai/evals/spec_prompt.py; the
stage instructions follow it unchanged), set output budgets per prompt kind (`max_new_tokens:`, the run's unless its
command sets them: mai/config.py), and choose a folder inside its own that its files must be in (`data_root:`,
default the spec's folder; only the command's `--data-root` widens it: mai/evals/spec_paths.py).

Formats: `vlmevalkit-tsv` (VLMEvalKit's custom dataset: `index`, base64 `image`, `question`, options `A`..`H`,
`answer`, optional `hint`, `category`; an `image` cell of at most 64 characters names the `index` of the row whose
image it shares, as VLMEvalKit writes repeated images), `parquet` and `jsonl` (an image cell holds bytes, the
hub's {bytes, path} layout, a path relative to the data file that stays in the benchmark's folder, or a list of
these), `hub` (a hub id with a pinned revision, read through the same code as the built-in benchmarks).

Identity: the benchmark's `version` is a hash of the spec's content, except where the data lies (a local copy is
identified by the hash of its files and of the images its rows read, a hub copy by its id and revision;
`data_root`), the metric (which changes
scores, never an output) and the budgets (each generation's decoding, in its own identity). So a moved spec is the
same benchmark, a changed one a new version, and an unchanged one reuses every stored sample and output. A spec
is checked completely when it is loaded, before any model loads; a row that cannot be used becomes a per-sample
error with its reason, as for the built-in benchmarks.
"""

from __future__ import annotations

import ast
import base64
import binascii
import math
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from mai.answers import answer_span
from mai.errors import ConfigError
from mai.evals.base import (
    BadRow,
    Benchmark,
    HubRow,
    Metric,
    RowFields,
    ScoredSample,
    image_bytes,
    row_id,
)
from mai.evals.chartqa import ChartQABenchmark
from mai.evals.common import (
    PROFILES,
    extract_mcq_answer,
    grouped_mean,
    mean_accuracy,
    optional_text,
    overall_mean,
    resolve_profile,
    text_field,
    unparsed_rate,
)
from mai.evals.files_read import read_input_file
from mai.evals.infovqa import InfoVQABenchmark
from mai.evals.loading import DataSource, load_dataset_rows, local_splits
from mai.evals.mmbench import MMBenchBenchmark, parse_option
from mai.evals.pope import PopeBenchmark
from mai.evals.realworldqa import _plain
from mai.evals.spec_data import ROW_ERROR, data_columns, read_jsonl, read_tsv
from mai.evals.spec_paths import OUTSIDE_HINT, image_file, inside, is_url
from mai.evals.spec_prompt import (
    COLUMN_META,
    PROMPT_FIELDS,
    option_lines,
    render_prompt,
    template_columns,
    template_names,
)
from mai.identity import canonical_hash
from mai.types import PROMPT_KINDS, AnswerStyle, BenchmarkName, Sample

SPEC_SUFFIXES = (".yaml", ".yml")
# bump when the spec -> samples rules change what a spec's benchmark asks or parses (part of every spec's version)
SPEC_RULES_VERSION = "1"
SpecFormat = Literal["vlmevalkit-tsv", "parquet", "jsonl", "hub"]
AnswerKind = Literal["choice", "yes_no", "number", "text"]
SpecMetric = Literal["accuracy", "relaxed_accuracy", "anls", "exact_match"]
# the metrics each answer kind can be scored with; the first is the default
METRICS: dict[str, tuple[str, ...]] = {"choice": ("accuracy",), "yes_no": ("accuracy",),
                                       "number": ("relaxed_accuracy", "exact_match"), "text": ("anls", "exact_match")}
OPTION_LETTERS = tuple("ABCDEFGH")  # VLMEvalKit's option columns
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


def is_spec_path(benchmark: str) -> bool:
    """Whether `--benchmark` names a spec file rather than a built-in benchmark."""
    return benchmark.lower().endswith(SPEC_SUFFIXES)


class SpecColumns(BaseModel):
    """Which data column holds each field. Unset optional fields (id, category, hint) use the default column when
    the data has it; a column the spec names must exist."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str | None = None        # default `index`, else the row's position
    image: str | list[str] = "image"
    question: str = "question"
    options: list[str] | None = None  # choice only; default the columns A..H the data has
    answer: str = "answer"
    category: str | None = None  # default `category` when present: per-category metrics
    hint: str | None = None      # default `hint` when present: put before the question

    @property
    def images(self) -> tuple[str, ...]:
        return (self.image,) if isinstance(self.image, str) else tuple(self.image)


def per_prompt_kind(value: dict[str, int], field: str) -> dict[str, int]:
    """A {prompt kind: positive int} setting, checked: known kinds only, every value >= 1."""
    unknown = sorted(set(value) - set(PROMPT_KINDS))
    if unknown:
        raise ValueError(f"{field} has unknown prompt kinds {unknown}; use {list(PROMPT_KINDS)}")
    if any(v < 1 for v in value.values()):
        raise ValueError(f"{field} values must be >= 1")
    return value


class BenchmarkSpec(BaseModel):
    """A benchmark spec file's content, checked. `data` is absolute once loaded (`load_spec`), or a hub id."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=NAME_PATTERN)
    data: str
    format: SpecFormat
    answer_kind: AnswerKind
    metric: SpecMetric | None = None
    columns: SpecColumns = SpecColumns()
    split: str | None = None     # hub (default `test`), or a directory of Parquet files holding several
    subset: str | None = None    # the hub dataset's config name
    revision: str | None = None  # hub: the pinned revision (required)
    description: str = ""
    prompt: str | None = None    # the question's layout (mai/evals/spec_prompt.py); None: the answer kind's
    max_new_tokens: dict[str, int] = Field(default_factory=dict)  # output budgets per prompt kind, under the flags'
    # the folder the data and image files must be in (mai/evals/spec_paths.py): relative to the spec file, absolute
    # once loaded (`load_spec` sets it to the spec's folder when the spec does not)
    data_root: str | None = None

    @field_validator("name")
    @classmethod
    def _not_built_in(cls, name: str) -> str:
        if name in get_args(BenchmarkName):
            raise ValueError(f"'{name}' is a built-in benchmark's name: give the spec a name of its own")
        return name

    @field_validator("columns", mode="before")
    @classmethod
    def _columns_mapping(cls, value: object) -> object:
        return {} if value is None else value

    @field_validator("prompt")
    @classmethod
    def _prompt_template(cls, value: str | None) -> str | None:
        if value is not None:
            template_names(value)
        return value

    @field_validator("max_new_tokens")
    @classmethod
    def _budget_kinds(cls, value: dict[str, int]) -> dict[str, int]:
        return per_prompt_kind(value, "max_new_tokens")

    @model_validator(mode="after")
    def _consistent(self) -> BenchmarkSpec:
        allowed = METRICS[self.answer_kind]
        if self.metric is not None and self.metric not in allowed:
            raise ValueError(f"metric '{self.metric}' does not fit answer_kind '{self.answer_kind}': use "
                             + " or ".join(allowed) + " (or leave metric out)")
        if self.columns.options is not None:
            if self.answer_kind != "choice":
                raise ValueError(f"columns.options apply only to answer_kind choice (this spec's is "
                                 f"'{self.answer_kind}'): remove them, or set answer_kind: choice")
            if not 2 <= len(self.columns.options) <= len(OPTION_LETTERS):
                raise ValueError(f"columns.options must list 2 to {len(OPTION_LETTERS)} columns, got "
                                 f"{len(self.columns.options)}")
        if self.format == "hub":
            if self.data.count("/") != 1 or self.data.startswith((".", "/", "~")):
                raise ValueError(f"format hub needs data: owner/name (a hub id), got '{self.data}'")
            if not self.revision:
                raise ValueError("format hub needs revision: the dataset commit to read (a pinned revision)")
        elif self.revision or self.subset:
            raise ValueError(f"revision and subset apply only to format hub (this spec's format is '{self.format}')")
        self._check_prompt_names()
        return self

    def _check_prompt_names(self) -> None:
        """A template shows no reference answer and no image, and `{options}` only where there are options."""
        names = template_names(self.prompt) if self.prompt else ()
        hidden = {self.columns.answer, "answer", *self.columns.images}
        shown = [n for n in names if n in hidden]
        if shown:
            raise ValueError(f"prompt placeholder {{{shown[0]}}} names the answer or an image column: a prompt shows "
                             "the question, never the reference answer, and images come with every prompt anyway")
        if "options" in names and self.answer_kind != "choice":
            raise ValueError(f"prompt placeholder {{options}} applies only to answer_kind choice (this spec's is "
                             f"'{self.answer_kind}')")

    @property
    def chosen_metric(self) -> str:
        return self.metric or METRICS[self.answer_kind][0]

    @property
    def local(self) -> bool:
        return self.format != "hub"

    def identity(self) -> dict[str, object]:
        """What makes the benchmark's questions and parsing: the content without the data's location (its files'
        hash identifies local data) and without name, metric and description (no output depends on them). Output
        budgets are each generation's decoding (in its identity and the run's key), not the benchmark's; a prompt
        template is left out where there is none, so that specs written before it keep their versions."""
        content = self.model_dump(mode="json", exclude={"name", "metric", "description", "max_new_tokens",
                                                        "data_root"} | ({"data"} if self.local else set()))
        if content.get("prompt") is None:
            del content["prompt"]
        return {"rules": SPEC_RULES_VERSION, **content}

    @property
    def version(self) -> str:
        return "spec-" + canonical_hash(self.identity())[:12]


def load_spec(path: str | Path, data_root: str | Path | None = None) -> BenchmarkSpec:
    """The spec file at `path`, checked, with its local data made absolute (a relative `data` is relative to the
    spec file, so the spec works from any working directory). `data_root`: a folder the user allows the spec to
    read (the command's `--data-root`); a spec alone reads only inside its own folder. ConfigError says what to
    change."""
    file = Path(path).expanduser()
    where = f"benchmark spec {path}"
    if not file.is_file():
        raise ConfigError(f"{where}: no such file (looked at {file.resolve()})")
    import yaml  # type: ignore[import-untyped]  # PyYAML ships no annotations (types-PyYAML is not installed)

    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{where}: cannot be read ({type(error).__name__}: {error})") from error
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"{where}: not valid YAML{at}: {getattr(error, 'problem', None) or error}") from error
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must hold a mapping of fields (name, data, format, answer_kind, ...), "
                          f"not {type(raw).__name__}")
    try:
        spec = BenchmarkSpec.model_validate(raw)
    except ValidationError as error:
        raise ConfigError(f"{where}: " + "; ".join(_problem(e) for e in error.errors())) from error
    if not spec.local:
        return spec
    folder = file.resolve().parent
    root = _data_root(spec, folder, where, None if data_root is None else Path(data_root).expanduser().resolve())
    if is_url(spec.data):
        raise ConfigError(f"{where}: data '{spec.data}' is a URL: URLs are not read; download the file into the "
                          "spec's folder and give its path")
    data = (folder / Path(spec.data).expanduser()).resolve()
    if not data.exists():
        raise ConfigError(f"{where}: data '{spec.data}' does not exist (relative to the spec: {data}); fix the path")
    if not inside(data, root):
        raise ConfigError(f"{where}: data '{spec.data}' is outside the benchmark's folder {root} ({OUTSIDE_HINT})")
    if spec.format in ("vlmevalkit-tsv", "jsonl") and not data.is_file():
        raise ConfigError(f"{where}: format {spec.format} reads one file, but data '{spec.data}' is a directory")
    return spec.model_copy(update={"data": str(data), "data_root": str(root)})


def _data_root(spec: BenchmarkSpec, folder: Path, where: str, allowed: Path | None) -> Path:
    """The folder the spec's files must be in: its `data_root` (relative to the spec's folder), else the folder the
    user allowed (`allowed`, the command's `--data-root`), else the spec's folder. Widening is the user's choice,
    never the spec's: a `data_root` outside the spec's folder is refused unless `allowed` holds it (a spec someone
    else wrote cannot make a worker read its files)."""
    if spec.data_root is None:
        return allowed or folder
    root = (folder / Path(spec.data_root).expanduser()).resolve()
    if not root.is_dir():
        raise ConfigError(f"{where}: data_root '{spec.data_root}' is not a folder (relative to the spec: {root})")
    if not inside(root, folder) and (allowed is None or not inside(root, allowed)):
        raise ConfigError(f"{where}: data_root '{spec.data_root}' is {root}, outside the spec's folder {folder}: a "
                          f"spec cannot widen where it reads; allow it on the command line with --data-root {root}")
    return root


def spec_split(spec: BenchmarkSpec) -> str:
    """The split a spec reads: its own; else a local Parquet folder's one split, when it names exactly one; else
    `test`."""
    if spec.split:
        return spec.split
    path = Path(spec.data)
    splits = local_splits(path) if spec.local and path.is_dir() else None
    return splits[0] if splits and len(splits) == 1 else "test"


def _problem(error: object) -> str:
    """One pydantic error as `field: what is wrong` (the spec's field names, not pydantic's)."""
    assert isinstance(error, dict)
    place = ".".join(str(part) for part in error.get("loc", ()) if not isinstance(part, int)) or "spec"
    message = str(error.get("msg", "")).removeprefix("Value error, ")
    if error.get("type") == "missing":
        message = "is required"
    elif error.get("type") == "extra_forbidden":
        message = "is not a spec field (see `mai benchmarks`)"
    elif error.get("type") == "literal_error":
        message = f"must be {message.removeprefix('Input should be ')}, got {error.get('input')!r}"
    elif error.get("type") in ("model_type", "dict_type"):
        given = error.get("input")
        message = f"must be a mapping (`field: value` lines under it), got {type(given).__name__} {given!r:.60}"
    return f"{place} {message}" if message.startswith(("is ", "must ")) else f"{place}: {message}"


class SpecBenchmark:
    """The Benchmark a spec describes: the built-in rules of its answer kind over the spec's columns."""

    def __init__(self, spec: BenchmarkSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.version = spec.version
        kind, metric, columns = spec.answer_kind, spec.chosen_metric, spec.columns
        self.image_columns = columns.images
        self.id_column = columns.id or "index"
        named = [c for c in (columns.id, columns.category, columns.hint) if c]
        default_options = ("A", "B") if kind == "choice" else ()  # VLMEvalKit's: A and B at least
        self.prompt_columns = template_columns(spec.prompt)  # data columns the prompt shows
        self.required_columns = (columns.question, columns.answer, *self.image_columns, *named,
                                 *(columns.options or default_options), *self.prompt_columns)
        self.profiles: tuple[str, ...] = _RULES["text"].profiles if metric == "anls" else PROFILES
        self.agreement_rule = "normalized_exact" if metric == "exact_match" else _RULES[kind].agreement_rule
        self._base = Path(spec.data) if spec.local else None
        self._root = self._files_root(self._base)

    def _files_root(self, data: Path | None) -> Path | None:
        """The folder image paths must stay in: the spec's `data_root` when the data read is inside it; else (data
        given by the command, `--data`, or a spec not read from a file) the data's own folder."""
        if data is None:
            return None
        root = self.spec.data_root
        if root is not None and inside(data, Path(root)):
            return Path(root)
        return data.parent if data.is_file() else data

    # --- rows ----------------------------------------------------------------------------------------------

    def read_rows(self, source: DataSource) -> tuple[list[str], Iterator[HubRow]]:
        """The column names and rows of the data (`source.location`: the spec's data or `--data`)."""
        if self.spec.local:  # image paths in the rows are relative to the data read, which `--data` may change
            self._base = Path(source.location)
            self._root = self._files_root(self._base)
        if self.spec.format == "vlmevalkit-tsv":
            return read_tsv(Path(source.location))
        if self.spec.format == "jsonl":
            return read_jsonl(Path(source.location))
        return load_dataset_rows(source, self.image_columns)

    def check_data(self, source: DataSource) -> None:
        """The data's columns against the spec's, from the header alone (no rows, no images): a spec whose columns
        the data lacks fails before any model loads, saying which `columns.<field>` to change."""
        found = data_columns(self.spec.format, source)
        if found is None:
            return  # a hub copy: its columns are checked when its rows are read
        fields = self.spec.columns.model_dump()
        wanted = [(name, c) for name, value in fields.items() if value is not None
                  for c in ([value] if isinstance(value, str) else value)]
        if self.spec.answer_kind == "choice" and self.spec.columns.options is None:
            wanted += [("options", c) for c in ("A", "B")]
        wanted += [("prompt", c) for c in self.prompt_columns]
        missing = [f"{'columns.' if name != 'prompt' else ''}{name} names '{column}'" for name, column in wanted
                   if column not in found]
        if missing:
            raise ConfigError(f"benchmark '{self.name}': " + ", ".join(missing) + f", which the data lacks; it has "
                              f"{found}. Change those fields in the spec (or the data's header)")

    def option_columns(self, columns: list[str] | tuple[str, ...] | None = None) -> tuple[str, ...]:
        """The option columns: the spec's, else VLMEvalKit's A..H that the data has (all of them without data)."""
        if self.spec.columns.options is not None:
            return tuple(self.spec.columns.options)
        return tuple(c for c in OPTION_LETTERS if columns is None or c in columns)

    def parse_row(self, row: HubRow, index: int, with_images: bool = True) -> RowFields:
        if ROW_ERROR in row:
            raise BadRow(str(row[ROW_ERROR]))
        columns = self.spec.columns
        hint = optional_text(row, columns.hint or "hint").strip()
        category = optional_text(row, columns.category or "category").strip() or "none"
        meta: list[tuple[str, str]] = [("hint", hint)] if hint else []
        options: tuple[str, ...] = ()
        references: tuple[str, ...] = ()
        answer = text_field(row, columns.answer).strip()
        kind = self.spec.answer_kind
        if kind == "choice":
            letters, options = self._options(row)
            if len(options) < 2:
                raise BadRow(f"a choice row needs at least 2 options, got {len(options)} (columns "
                             f"{list(self.option_columns(list(row)))})")
            if answer.upper() not in letters:
                raise BadRow(f"answer '{answer[:40]}' is not one of the present options {list(letters)}")
            answer = answer.upper()
            meta.append(("letters", "".join(letters)))
        elif kind == "yes_no":
            answer = answer.lower().rstrip(".")
            if answer not in ("yes", "no"):
                raise BadRow(f"column '{columns.answer}' must be yes or no for answer_kind yes_no, got '{answer[:40]}'")
        elif kind == "text":
            references = _answer_list(row.get(columns.answer), columns.answer)
            answer = references[0]
        return RowFields(sample_id=row_id(self.name, self.id_column, row, index), question=text_field(row, columns.question),
                         options=options, answer=answer, references=references, category=category,
                         images=self._images(row) if with_images else (), meta=(*meta, *self._shown(row, category)))

    def _shown(self, row: HubRow, category: str) -> tuple[tuple[str, str], ...]:
        """What the prompt template shows beyond the question, hint and options, kept with the sample (so in its
        content hash): the category and the named data columns."""
        names = template_names(self.spec.prompt) if self.spec.prompt else ()
        shown = [("category", category)] if "category" in names else []
        return (*shown, *((COLUMN_META + c, optional_text(row, c).strip()) for c in self.prompt_columns))

    def _options(self, row: HubRow) -> tuple[str, tuple[str, ...]]:
        """(letters, texts) of the row's present options: a column named A..H keeps its letter; other columns are
        lettered A, B, ... in the spec's order."""
        named = self.option_columns(list(row))
        lettered = [(c if c in OPTION_LETTERS and self.spec.columns.options is None else OPTION_LETTERS[i], c)
                    for i, c in enumerate(named)]
        present = [(letter, optional_text(row, c).strip()) for letter, c in lettered if optional_text(row, c).strip()]
        return "".join(letter for letter, _ in present), tuple(text for _, text in present)

    def _images(self, row: HubRow) -> tuple[bytes, ...]:
        """The images of the row's present image columns, in the spec's order (at least one); a cell may hold a list
        of images."""
        cells = [(row[c], c) for c in self.image_columns if row.get(c) not in (None, "", {}, b"", [])]
        found = tuple(self._image(value, c) for cell, c in cells
                      for value in (cell if isinstance(cell, (list, tuple)) else [cell]))
        if not found:
            raise BadRow(f"column '{self.image_columns[0]}' holds no image")
        return found

    def _image(self, value: object, column: str) -> bytes:
        if isinstance(value, dict) and not value.get("bytes") and isinstance(value.get("path"), str):
            value = value["path"]  # the hub's Image layout with a path and no bytes: the file it names
        if not isinstance(value, str):
            return image_bytes(value, column)
        if self.spec.format == "vlmevalkit-tsv" and not is_url(value):
            try:
                return base64.b64decode("".join(value.split()), validate=True)
            except (binascii.Error, ValueError) as error:
                raise BadRow(f"column '{column}' is not a base64 image ({error})") from error
        if self._base is None or self._root is None:
            raise BadRow(f"column '{column}' holds a path, but the data has no local folder to read it from")
        path = image_file(value, self._base.parent if self._base.is_file() else self._base, self._root, column)
        try:
            return read_input_file(path)  # recorded: the file is part of the samples' identity
        except OSError as error:
            raise BadRow(f"column '{column}': image file {value!r} cannot be read ({error.strerror})") from error

    # --- prompts, parsing, agreement, scoring: the built-in benchmark of the answer kind -------------------

    def answer_style(self, sample: Sample) -> AnswerStyle:
        return _RULES[self.spec.answer_kind].answer_style(sample)

    def rt_template(self, sample: Sample) -> str:
        return _RULES[self.spec.answer_kind].rt_template(sample)

    def format_question(self, sample: Sample) -> str:
        if self.spec.prompt is not None:
            return self._templated(self.spec.prompt, sample)
        if self.spec.answer_kind == "choice":
            return _RULES["choice"].format_question(sample)
        hint = sample.get("hint")
        question = sample.question.strip()
        return f"{hint} {question}" if hint else question

    def _templated(self, template: str, sample: Sample) -> str:
        values = {"question": sample.question.strip(), "hint": sample.get("hint"), "category": sample.get("category"),
                  "options": option_lines(sample.get("letters"), sample.options)}
        names = template_names(template)
        return render_prompt(template, {name: values[name] if name in PROMPT_FIELDS else
                                        sample.get(COLUMN_META + name) for name in names})

    def parse_answer(self, text: str, sample: Sample, profile: str | None = None) -> str | None:
        chosen = resolve_profile(profile, self.profiles)
        if self.spec.answer_kind != "choice":
            return _RULES[self.spec.answer_kind].parse_answer(text, sample, chosen)
        choices = dict(zip(sample.get("letters"), sample.options))
        span = answer_span(text)
        letter = parse_option(span, choices, chosen)
        if letter is None and chosen == "lmms-eval" and any(c not in "ABCDE" for c in choices):
            # MMBench's parser knows letters A-E only; VLMEvalKit's options go to H
            letter = extract_mcq_answer(span, sorted(choices)) or None
        return letter

    def agree(self, a: str | None, b: str | None, sample: Sample) -> bool:
        if self.spec.chosen_metric == "exact_match":
            return a is not None and b is not None and _plain(a) == _plain(b)
        return _RULES[self.spec.answer_kind].agree(a, b, sample)

    def score(self, parsed: str | None, sample: Sample, profile: str | None = None) -> float:
        if parsed is None:
            return 0.0
        chosen = resolve_profile(profile, self.profiles)
        if self.spec.chosen_metric == "exact_match":
            return float(any(_exact(parsed, reference, chosen) for reference in sample.references or (sample.answer,)))
        return _RULES[self.spec.answer_kind].score(parsed, sample, chosen)

    def aggregate(self, scored: list[ScoredSample], profile: str | None = None) -> list[Metric]:
        if self.spec.answer_kind == "choice":
            return mean_accuracy(scored)
        if self.spec.answer_kind == "yes_no":
            return _RULES["yes_no"].aggregate(scored, profile)
        metric = self.spec.chosen_metric
        return (overall_mean(scored, metric) + grouped_mean(scored, metric, lambda s: s.sample.category, "category")
                + unparsed_rate(scored))


# the built-in benchmark whose rules each answer kind reuses
_RULES: dict[AnswerKind, MMBenchBenchmark | PopeBenchmark | ChartQABenchmark | InfoVQABenchmark] = {
    "choice": MMBenchBenchmark(), "yes_no": PopeBenchmark(), "number": ChartQABenchmark(), "text": InfoVQABenchmark()}


def _exact(parsed: str, reference: str, profile: str) -> bool:
    """RealWorldQA's open-answer rules: lmms-eval lower-cases and strips a trailing dot; official also ignores
    punctuation."""
    if profile == "lmms-eval":
        return parsed.lower().strip().rstrip(".") == reference.lower().strip()
    return _plain(parsed) == _plain(reference)


def _answer_list(value: object, column: str) -> tuple[str, ...]:
    """A text answer's references: a list cell, a cell written as a list (`['a', 'b']`, as VLMEvalKit's VQA files
    keep several answers), or one answer."""
    if isinstance(value, str) and value.strip().startswith("[") and value.strip().endswith("]"):
        with suppress(ValueError, SyntaxError):  # an answer that merely looks like a list is that answer
            value = ast.literal_eval(value.strip())
    if isinstance(value, (list, tuple)):
        answers = tuple(str(a).strip() for a in value if a is not None and str(a).strip())
        if not answers:
            raise BadRow(f"column '{column}' holds an empty list of answers")
        return answers
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise BadRow(f"column '{column}' is missing")
    text = str(value).strip()
    if not text:
        raise BadRow(f"column '{column}' is empty")
    return (text,)


def benchmark_rows(benchmark: Benchmark, source: DataSource) -> tuple[list[str], Iterator[HubRow]]:
    """The column names and rows of a benchmark's data: a spec benchmark reads its own format, the others through
    `datasets`."""
    if isinstance(benchmark, SpecBenchmark):
        return benchmark.read_rows(source)
    return load_dataset_rows(source, benchmark.image_columns)
