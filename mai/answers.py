"""`[[answer]]` extraction and the normalisation shared by benchmark parsers."""

from __future__ import annotations


def extract_bracketed(text: str) -> str | None:
    r"""The content of the last `[[...]]` in the text, or None when the model did not use the format.

    Same result as the last match of `re.findall(r"\[\[(.*?)\]\]", text, re.DOTALL)` (non-overlapping,
    leftmost matches; each ends at the first `]]` after its `[[`), found in linear time: the regex restarts a
    lazy scan at every `[[` that has no closing `]]`, so `"[[" * 16_000` took seconds and 10^6 characters hung.
    Once one `[[` finds no `]]` after it, no later one can, so the scan stops there."""
    last = None
    position = 0
    while True:
        opening = text.find("[[", position)
        if opening == -1:
            break
        closing = text.find("]]", opening + 2)
        if closing == -1:
            break
        last = (opening + 2, closing)
        position = closing + 2
    return text[last[0]:last[1]].strip() if last is not None else None


def answer_span(text: str) -> str:
    """What a benchmark parser should look at: the last `[[...]]` if present, else the whole output
    (S2 and RT prompt 1 ask for a bare word or phrase, without brackets)."""
    bracketed = extract_bracketed(text)
    return bracketed if bracketed is not None else text.strip()


def normalize(text: str) -> str:
    """Lower case, collapse whitespace, strip surrounding punctuation and quotes."""
    # str.split() splits at the characters `\s` matches (str.isspace), so this is `re.sub(r"\s+", " ", text).strip()`,
    # without one regex replacement per word (a megabyte of short words took ~0.08 s)
    return " ".join(text.split()).strip(".,;:!?\"'`()").strip().lower()
