"""The paper's prompt templates (arXiv 2604.04929, appendix C), verbatim, and how a prompt is laid out.

Two wording variants per kind: "phrase" (answer with a single word or phrase: POPE, ChartQA, InfoVQA)
and "letter" (answer with the option's letter: multiple-choice benchmarks). The curly apostrophe of
the PDF is written as ASCII, as LMMs-Eval writes it. `\\n` in the paper's templates are real newlines.

A template's id and version are part of every generation identity: changing the text of a template
must bump PROMPTS_VERSION so that stored outputs made with the old text are never reused.
"""

from __future__ import annotations

from mai.types import AnswerStyle, ChatPrompt, PromptKind

PROMPTS_VERSION = "1"

INSTRUCTIONS: dict[tuple[PromptKind, AnswerStyle], str] = {
    ("S", "phrase"): "Without thinking, directly answer the question using a single word or phrase "
    "in the format: [[answer]]",
    ("S", "letter"): "Without thinking, directly answer with the option's letter from the given choices "
    "in the format: [[answer]].",
    ("E", "phrase"): "Provide a simple explanation, then answer the question using a single word or phrase "
    "in the format: [[answer]]",
    ("E", "letter"): "Provide a simple explanation, then answer with the option's letter from the given "
    "choices directly in the format: [[answer]]",
    ("R", "phrase"): "Please think step by step, provide a detailed explanation, then answer the question "
    "using a single word or phrase in the format: [[answer]]",
    ("R", "letter"): "Please think step by step, provide a detailed explanation, then answer with the "
    "option's letter from the given choices directly in the format: [[answer]]",
    ("S2", "phrase"): "According to previous thinking: {stage1_response}\n Answer the question using a "
    "single word or phrase.",
    ("S2", "letter"): "According to previous thinking: {stage1_response}\n Answer with the option's letter "
    "from the given choices directly.",
}

# Reasoning transfer: "Prompt 1" (S2-style) for POPE and ChartQA, "Prompt 2" for MMBench, MMMU,
# InfoVQA and RealWorldQA. Which one a benchmark uses is the benchmark's choice (`rt_template`).
RT_TEMPLATES: dict[str, str] = {
    "rt_s2_style": INSTRUCTIONS[("S2", "phrase")],
    "rt_reference": "The following is a reference answer from a smaller model (it might be wrong or "
    "incomplete): {stage1_response}\n\n\n\n Please answer the question yourself, using the reference only "
    "if it seems reasonable.\n Answer with the option's letter from the given choices directly in the "
    "format: [[answer]].",
}

CONSUMES_UPSTREAM: frozenset[PromptKind] = frozenset({"S2", "RT"})


def template_id(kind: PromptKind, style: AnswerStyle, rt_template: str) -> str:
    """The name under which a template is recorded with each generation."""
    return f"RT/{rt_template}@v{PROMPTS_VERSION}" if kind == "RT" else f"{kind}/{style}@v{PROMPTS_VERSION}"


def build_instruction(
    kind: PromptKind, style: AnswerStyle, rt_template: str, stage1_response: str | None = None
) -> str:
    """The instruction that follows the question, with the upstream reasoning filled in for S2/RT."""
    template = RT_TEMPLATES[rt_template] if kind == "RT" else INSTRUCTIONS[(kind, style)]
    if kind in CONSUMES_UPSTREAM:
        if stage1_response is None:
            raise ValueError(f"prompt kind {kind} needs the stage-1 response it builds on")
        return template.format(stage1_response=stage1_response)
    return template


def build_prompt(
    question_text: str,
    image_paths: tuple[str, ...],
    kind: PromptKind,
    style: AnswerStyle,
    rt_template: str,
    stage1_response: str | None = None,
) -> ChatPrompt:
    """Question (as the benchmark formats it) + newline + the paper's instruction, as LMMs-Eval
    appends its post-prompt. Images come first, so every prompt kind shares the image+question prefix."""
    instruction = build_instruction(kind, style, rt_template, stage1_response)
    return ChatPrompt(text=f"{question_text}\n{instruction}", image_paths=image_paths)
