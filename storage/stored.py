"""Which of these output identities does the store hold? Asked in one place, for every kind of output: a run's
lookup of its shards (the pipeline's "resolve identities" step, mai/run/identities.py) and each step before it
computes (mai/run/generate.py, mai/run/transfer.py, through storage/claims.py `compute_once`). A test
(tests/test_one_stored_lookup.py) fails if a second function answers it."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Literal

from mai.storage.generations import shared_store
from mai.storage.paths import Home
from mai.types import ModelSpec, PromptKind

# a generation (by the prompt kind of its stage), sparse RT's token selection, or its attention capture
OutputKind = PromptKind | Literal["selection", "capture"]


def stored_among(home: str | Path, model: ModelSpec, kind: OutputKind, ids: Collection[str],
                 layers: Collection[int] = ()) -> set[str]:
    """The ids of `ids` whose outputs of `model` the store holds. A capture counts as stored when it holds every
    layer of `layers`. Reads only identity columns (generations: only files it has not seen before)."""
    if not ids:
        return set()
    if kind == "selection":  # its reader imports pyarrow.dataset: only here
        from mai.storage.attention import read_selections

        return set(read_selections(Home.at(home), model, ids))
    if kind == "capture":
        from mai.storage.attention import captured_layers

        return {cid for cid, found in captured_layers(Home.at(home), model, ids).items() if set(layers) <= found}
    return shared_store(str(home)).known_among(model, kind, ids)
