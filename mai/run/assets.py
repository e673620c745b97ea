"""Built-in assets a fresh machine lacks: the random-weight tiny pair, the demo benchmark and the `shapes`
benchmark's splits. Built offline, on first use, by whoever needs them first (the CLI, or the flow on a
worker). The trained `shapes` pair is not built: its weights ship with the package."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from filelock import FileLock

from mai.config import BUILTIN_MODELS, RunConfig, models_used
from mai.evals.demo import DemoRow, generate_demo_rows
from mai.files import atomic_path
from mai.storage.paths import Home

DEMO_ROWS = 240
DEMO_SEED = 2604


def demo_data_dir(home: Home) -> Path:
    return home.datasets / "demo"


def build_demo_dataset(home: Home, n: int = DEMO_ROWS, seed: int = DEMO_SEED, force: bool = False) -> Path:
    target = demo_data_dir(home) / "test-00000-of-00001.parquet"
    if force or not target.exists():
        write_hub_parquet(generate_demo_rows(n, seed), target)
    return target.parent


def build_shapes_dataset(home: Home, sizes: dict[str, int] | None = None, force: bool = False) -> Path:
    """The `shapes` splits as `datasets/shapes/<split>-00000-of-00001.parquet`, no item in two splits. Splits
    written by another version of the world (or other sizes) are rewritten: `world.json` records the
    fingerprint of the world that wrote them, and is written last, so an interrupted build is redone."""
    from mai.evals.shapes_world import SPLIT_SIZES, split_items, to_row, world_fingerprint

    sizes = sizes or SPLIT_SIZES
    directory = home.datasets / "shapes"
    marker = directory / "world.json"
    fingerprint = world_fingerprint(sizes)
    stale = not marker.exists() or json.loads(marker.read_text()).get("world") != fingerprint
    for split in sizes:
        target = directory / f"{split}-00000-of-00001.parquet"
        if force or stale or not target.exists():
            write_hub_parquet([to_row(i, s, q) for i, (s, q) in enumerate(split_items(split, sizes))], target)
    if force or stale:
        marker.write_text(json.dumps({"world": fingerprint, "sizes": sizes}) + "\n")
    return directory


def write_hub_parquet(rows: Sequence[DemoRow], target: Path) -> None:
    """Rows as a hub-style Parquet file (with the `datasets` Image feature metadata, as files on the hub
    have), so they load through exactly the code path of a real benchmark's local copy. Atomic."""
    import datasets

    features = datasets.Features({
        "index": datasets.Value("int64"), "question": datasets.Value("string"), "hint": datasets.Value("string"),
        **{letter: datasets.Value("string") for letter in "ABCD"},
        "answer": datasets.Value("string"), "category": datasets.Value("string"), "image": datasets.Image(),
    })
    with atomic_path(target) as temp:  # its temp name matches no `*.parquet` glob: a loader never reads it
        datasets.Dataset.from_list([dict(row) for row in rows], features=features).to_parquet(str(temp))


def build_models(home: Home, force: bool = False, names: Sequence[str] = BUILTIN_MODELS) -> list[Path]:
    """The built-in tiny pairs (Qwen3-VL, InternVL) of which `names` names a model; each pair is a no-op when it
    is built by the current builder."""
    from mai.backends.tiny_internvl import BUILTIN_NAMES as INTERNVL_NAMES
    from mai.backends.tiny_internvl import build_builtin_internvl_models
    from mai.backends.tiny_models import BUILTIN_NAMES as QWEN_NAMES
    from mai.backends.tiny_models import build_builtin_models

    built = []
    if set(names) & set(QWEN_NAMES):
        built += build_builtin_models(home.models, force=force)
    if set(names) & set(INTERNVL_NAMES):
        built += build_builtin_internvl_models(home.models, force=force)
    return built


def ensure_builtin_assets(config: RunConfig, home: Home) -> None:
    """Build what the configuration refers to and is missing; touch nothing else. Under a lock of the store, so
    that runs starting together on a fresh store build each asset once and never read a half-built one."""
    home.locks.mkdir(parents=True, exist_ok=True)
    with FileLock(str(home.locks / "assets.lock")):
        if config.benchmark == "demo" and config.data is None:
            build_demo_dataset(home)  # a no-op when its file exists
        if config.benchmark == "shapes" and config.data is None:
            build_shapes_dataset(home)  # writes only missing splits, or all of them when the world changed
        # only the models the run uses: a single-model run of a shipped model builds no tiny pair (nor imports
        # transformers to do so while it plans)
        used = models_used(config.model_dump(include={"mode", "single_model", "small_model", "large_model"}))
        if set(used) & set(BUILTIN_MODELS):
            build_models(home, names=used)  # no-op when built by this builder
