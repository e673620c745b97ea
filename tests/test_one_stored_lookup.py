"""One function answers "which of these identities are stored?" (storage/stored.py `stored_among`). By behaviour:
during a run that computes and its re-run, every read of an identity index (the generation ids' index, the
captures' layers) happens inside `stored_among`. From the code itself (`ast`): no other module refers to those
index readers, and no other function is named for the question. Before, the question was asked at three levels in
three places (a whole run, whole shards, each output), and the sparse-RT step read the captures' layers itself."""

from __future__ import annotations

import ast
import re
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import run
from tests.test_import_graph import ROOT, module_files

THE_ONE = ("mai.storage.stored", "stored_among")
# names that ask the question: `stored_among`, `is_stored`, `stored_ids`, `run_from_store`, `missing_outputs`, ...
# (not any name with `missing`: a lost file, a shard set's missing file or a table cell's gap is another question)
ASKING = re.compile(r"^_?(stored_(among|ids|outputs|shards|set)|is_stored|.*answered_by_store.*|.*_from_store|"
                    r"(.*_)?missing_(outputs|identities|ids|generations|captures|selections)|"
                    r"(outputs|identities|ids|generations|captures|selections)_missing|lookup_stored.*)$")
# the readers of the identity indexes that answer it underneath (generation ids, captured layers), and the modules
# that define them: only the one function refers to them
INDEX_READERS = {"known_among", "captured_layers"}
DEFINING = {"mai.storage.generations", "mai.storage.attention"}


def _where(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def functions_asking(files: dict[str, Path]) -> list[str]:
    found = []
    for module, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and ASKING.match(node.name)
                    and (module, node.name) != THE_ONE):
                found.append(f"{_where(path)}:{node.lineno} {node.name}")
    return found


def index_readers_outside(files: dict[str, Path]) -> list[str]:
    """Every reference to an index reader (a call, an attribute, an import) outside the one function's module."""
    found = []
    for module, path in files.items():
        if module == THE_ONE[0] or module in DEFINING:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            named = (node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name)
                     else node.name if isinstance(node, ast.alias) else None)
            if named in INDEX_READERS:
                found.append(f"{_where(path)}:{getattr(node, 'lineno', 0)} {named}")
    return found


def test_one_function_answers_which_identities_are_stored() -> None:
    files = module_files()
    assert THE_ONE[0] in files
    assert functions_asking(files) == []
    assert index_readers_outside(files) == []


def test_the_scan_finds_a_second_lookup(tmp_path: Path) -> None:
    """The check itself: a second lookup function, and a direct read of the index, are found."""
    second = tmp_path / "second.py"
    second.write_text("def shards_answered_by_store(plan, shards):\n    return store.known_among(1, 2, shards)\n"
                      "def _missing_outputs(ids):\n    return ids\n")
    files = {"mai.tasks.second": second}
    assert [line.split(" ")[-1] for line in functions_asking(files)] == ["shards_answered_by_store",
                                                                          "_missing_outputs"]
    assert [line.split(" ")[-1] for line in index_readers_outside(files)] == ["known_among"]
    third = tmp_path / "third.py"
    third.write_text("from mai.storage.attention import captured_layers\n")
    assert [line.split(" ")[-1] for line in index_readers_outside({"mai.run.third": third})] == ["captured_layers"]


def test_every_lookup_of_a_sparse_rt_run_is_made_by_the_one_function(home: Path, monkeypatch: pytest.MonkeyPatch
                                                                      ) -> None:
    """A sparse-RT cascade that computes (generations, captures, selections), then its re-run from the store: each
    read of an identity index is made inside `stored_among`, and there are such reads (the watch sees them)."""
    from mai.storage import attention
    from mai.storage.generations import GenerationStore

    reads: list[bool] = []
    outside: list[str] = []

    def watched(real: Callable[..., Any]) -> Callable[..., Any]:
        def read(*args: Any, **kwargs: Any) -> Any:
            stack = traceback.extract_stack()
            inside = any(frame.name == THE_ONE[1] and frame.filename.endswith("stored.py") for frame in stack)
            reads.append(inside)
            if not inside:
                outside.append("".join(traceback.format_list(stack[-4:-1])))
            return real(*args, **kwargs)
        return read

    monkeypatch.setattr(GenerationStore, "known_among", watched(GenerationStore.known_among))
    monkeypatch.setattr(attention, "captured_layers", watched(attention.captured_layers))
    first = run(home, limit=6, shards=1, mode="full_rt", transfer="sparse", transfer_layer=1)
    again = run(home, limit=6, shards=1, mode="full_rt", transfer="sparse", transfer_layer=1)
    assert first["counts"]["selections_computed"] > 0 and again["counts"]["generations_computed"] == 0
    assert outside == []
    assert len(reads) >= 4  # each stage's lookup, the captures' layers, on both runs
