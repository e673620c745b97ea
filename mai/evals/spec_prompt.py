"""A spec's `prompt:`: a template over a row's fields that replaces its answer kind's question layout
(mai/evals/spec.py).

The cascade's stage instructions (S, R, S2, RT: mai/prompts.py) follow the rendered text unchanged, as they follow a
built-in benchmark's question. Placeholders are Python's `{name}` (a literal brace is written twice):

- `{question}`, `{hint}` (empty when the row has none), `{category}`;
- `{options}`: a choice row's present options as the kind lays them out, one `A. text` line each;
- any other name: the data column of that name, as text (empty when the row's cell is).

Every value the template shows is part of the sample's content hash (a hint and the options already are; a category
or another column is added when the template names it), and the template is part of the benchmark's version: a
changed prompt computes anew, an unchanged one reuses. A reference answer never reaches a prompt, so the answer and
image columns cannot be placeholders.
"""

from __future__ import annotations

from string import Formatter

# the row's fields a template can name; any other name is a data column
PROMPT_FIELDS = ("question", "hint", "options", "category")
# where a named data column's value is kept in a sample's meta (apart from the fields a benchmark keeps there)
COLUMN_META = "column:"


def template_names(template: str) -> tuple[str, ...]:
    """The names a template's placeholders use, in order, each once; ValueError says what is wrong with it."""
    try:
        parsed = list(Formatter().parse(template))
    except ValueError as error:
        raise ValueError(f"prompt is not a valid template ({error}; write a literal brace as '{{{{' or '}}}}')") \
            from error
    names: list[str] = []
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name.isidentifier() or spec or conversion:
            shown = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise ValueError(f"prompt placeholder {shown} must be a plain name such as {{question}} (a field: "
                             f"{', '.join(PROMPT_FIELDS)}, or a data column)")
        if name not in names:
            names.append(name)
    if "question" not in names:
        raise ValueError("prompt must show the row's question: put {question} in it")
    return tuple(names)


def template_columns(template: str | None) -> tuple[str, ...]:
    """The data columns (not fields) a template names."""
    return tuple(n for n in template_names(template) if n not in PROMPT_FIELDS) if template else ()


def render_prompt(template: str, values: dict[str, str]) -> str:
    """The template with each placeholder's value (`values` holds every name the template uses)."""
    return template.format_map(values)


def option_lines(letters: str, options: tuple[str, ...]) -> str:
    """A choice row's options as the kinds lay them out: one `A. text` line each."""
    return "\n".join(f"{letter}. {text}" for letter, text in zip(letters, options, strict=False))
