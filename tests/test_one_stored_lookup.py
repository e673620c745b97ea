"""One function answers "which of these identities are stored?" (storage/stored.py `stored_among`), read from the
code itself (`ast`): no other function of the project is named for that question, and no other module reads the
store's index of known generation ids (`GenerationStore.known_among`) or the capture and selection readers for
it. Before, the question was asked at three levels in three places (a whole run, whole shards, each output)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.test_import_graph import ROOT, module_files

THE_ONE = ("mai.storage.stored", "stored_among")
# names that ask the question: `stored_among`, `is_stored`, `stored_ids`, `run_from_store`, `missing_outputs`, ...
# (not any name with `missing`: a lost file, a shard set's missing file or a table cell's gap is another question)
ASKING = re.compile(r"^_?(stored_(among|ids|outputs|shards|set)|is_stored|.*answered_by_store.*|.*_from_store|"
                    r"(.*_)?missing_(outputs|identities|ids|generations|captures|selections)|"
                    r"(outputs|identities|ids|generations|captures|selections)_missing|lookup_stored.*)$")
# the readers that answer it underneath: only the one function calls them for that
INDEX_READERS = {"known_among"}


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
    found = []
    for module, path in files.items():
        if module in (THE_ONE[0], "mai.storage.generations"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in INDEX_READERS:
                found.append(f"{_where(path)}:{node.lineno} .{node.attr}")
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
    assert [line.split(" ")[-1] for line in index_readers_outside(files)] == [".known_among"]
