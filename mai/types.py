"""Typed values that cross module boundaries. Pure data: no model, Prefect or DuckDB imports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

PromptKind = Literal["S", "E", "R", "S2", "RT"]
AnswerStyle = Literal["phrase", "letter"]
Role = Literal["small", "large"]
RunMode = Literal["cascade", "single", "full_rt"]
Route = Literal["MV1", "MV2", "RT", "SINGLE", "ERROR"]
# `select_rt` (sparse RT) is a step like the others, but its outputs are token selections, not generations
StageName = Literal["s_large", "s_small", "r_small", "s2_small", "select_rt", "rt_large", "single", "single_s2"]
# the stages whose answers and generation ids the routes table records
STAGE_NAMES: tuple[StageName, ...] = ("s_large", "s_small", "r_small", "s2_small", "rt_large", "single", "single_s2")
BenchmarkName = Literal["pope", "mmmu", "mmbench", "chartqa", "infovqa", "realworldqa", "demo", "shapes"]
Dtype = Literal["float32", "bfloat16", "float16"]
BackendName = Literal["transformers", "vllm"]
FinishReason = Literal["stop", "length"]

PROMPT_KINDS: tuple[PromptKind, ...] = ("S", "E", "R", "S2", "RT")
RUN_MODES: tuple[RunMode, ...] = ("cascade", "single", "full_rt")


@dataclass(frozen=True)
class Sample:
    """One benchmark question, after conversion from the benchmark's own row schema.

    `error` is set when the row could not be used (corrupt image, missing field); such a sample
    is kept and reported, never silently dropped, and no model ever sees it.
    """

    sample_id: str
    benchmark: str
    question: str
    options: tuple[str, ...]
    answer: str
    image_paths: tuple[str, ...]
    image_sha256: tuple[str, ...]
    category: str
    content_hash: str
    answer_style: AnswerStyle
    shard: int = 0
    error: str | None = None
    # every accepted reference answer (InfoVQA has several); `answer` is the first
    references: tuple[str, ...] = ()
    # benchmark-specific fields the prompt or the scorer needs (hint, question type, subject, split ...)
    meta: tuple[tuple[str, str], ...] = ()

    def get(self, key: str, default: str = "") -> str:
        return dict(self.meta).get(key, default)


@dataclass(frozen=True)
class ModelSpec:
    """A model as the user names it: a hub id or a local directory, plus a revision and dtype."""

    name_or_path: str
    revision: str = "main"
    dtype: str = "float32"
    # a local directory is identified by its content fingerprint (revision "sha256:..."), not its path,
    # so moving the store or the checkpoint never invalidates stored outputs
    local: bool = False

    @property
    def identity_name(self) -> str:
        return self.name_or_path.rstrip("/").replace("\\", "/").split("/")[-1] if self.local else self.name_or_path

    @property
    def slug(self) -> str:
        """A filesystem- and partition-safe name, unique per (model, revision, dtype)."""
        base = self.name_or_path.rstrip("/").replace("\\", "/").split("/")[-1]
        safe = "".join(ch if ch.isalnum() or ch in "-._" else "-" for ch in base)
        return f"{safe}@{self.revision[:12]}-{self.dtype}"


@dataclass(frozen=True)
class Decoding:
    """Every decoding parameter is part of a generation's identity. Greedy only (the paper's setting)."""

    max_new_tokens: int
    min_new_tokens: int = 0
    greedy: bool = True

    def as_dict(self) -> dict[str, int | bool]:
        return {"max_new_tokens": self.max_new_tokens, "min_new_tokens": self.min_new_tokens, "greedy": self.greedy}


@dataclass(frozen=True)
class ChatPrompt:
    """A single user turn: images first, then text (the layout shared by every prompt kind,
    so that image + question form a common prefix for KV/prefix caching)."""

    text: str
    image_paths: tuple[str, ...]


@dataclass(frozen=True)
class GenRequest:
    gen_id: str
    sample_id: str
    prompt: ChatPrompt
    decoding: Decoding
    template: str = ""
    upstream_gen_id: str | None = None


@dataclass(frozen=True)
class GenResult:
    """What an engine returns for one request: the text and how it was produced."""

    gen_id: str
    text: str
    prompt_tokens: int
    output_tokens: int
    finish_reason: FinishReason
    ttft_s: float
    decode_s: float
    wall_s: float
    batch_size: int
    token_ids: tuple[int, ...] = ()  # output token ids without the end-of-sequence token
    cached_prompt_tokens: int | None = None  # prompt tokens served from a prefix cache (None: not reported)
    # how the time was measured (None where an engine does not say): the device, the engine and its version, and
    # the machine's 1-minute load average when the call started and when it ended
    device: str | None = None
    engine: str | None = None
    load_start: float | None = None
    load_end: float | None = None


# marks where the upstream reasoning goes in an RT prompt, so a prefill can insert it as token ids
REASONING_MARK = "\x00MAI_REASONING\x00"


@dataclass(frozen=True)
class CaptureRequest:
    """A large-model prefill over image + question + the small model's reasoning (as its own token ids)
    + the RT instruction. `prompt.text` holds REASONING_MARK where the reasoning goes."""

    capture_id: str
    sample_id: str
    prompt: ChatPrompt
    reasoning_ids: tuple[int, ...]


@dataclass(frozen=True)
class LayerCapture:
    """What the last prompt position attends to on the reasoning span at one layer."""

    capture_id: str
    layer: int
    weights: tuple[float, ...]          # per reasoning token, mean over heads
    head_span_mass: tuple[float, ...]   # per head: total attention on the reasoning span
    head_tokens_for_80: tuple[int, ...]  # per head: tokens needed to cover 80 % of its span attention
    token_ids: tuple[int, ...]
    token_texts: tuple[str, ...]
    prompt_tokens: int


@dataclass(frozen=True)
class StageSpec:
    """One generation stage of a run: which model answers which prompt kind, consuming what.

    `upstream` names the stage whose output text is inserted into this prompt (R for S2 and RT). `label` is how
    reports, the policy lab and the trace browser name the stage's output ("small R+S2", "RT"): one name per kind
    of output, whatever run produced it.
    """

    name: StageName
    role: Role
    prompt_kind: PromptKind
    upstream: StageName | None = None
    label: str = ""

    def __post_init__(self) -> None:
        if not self.label:
            raise ValueError(f"stage {self.name} needs a label")

    @property
    def generates(self) -> bool:
        """False for the token-selection step of sparse RT (its outputs live in the selections table)."""
        return self.name != "select_rt"


@dataclass(frozen=True)
class StageAnswer:
    """The parsed result of one stored generation, as routing needs it."""

    gen_id: str
    text: str
    answer: str | None


@dataclass(frozen=True)
class RouteDecision:
    sample_id: str
    route: Route
    final_answer: str | None
    final_gen_id: str | None
    answers: dict[StageName, str | None] = field(default_factory=dict)
    gen_ids: dict[StageName, str] = field(default_factory=dict)
    agreement_rule: str = ""
