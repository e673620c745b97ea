"""A run's setting as its tables name it: the paper's words (`run_label`: 'MAI', 'MAI +S2', 'Full RT'), and, where
runs of one comparison group share those words and models, what sets each apart, read from their stored
configurations ('MAI (prompt 2)', 'MAI (R=40)'). A hover tooltip alone would not do: the CSV and LaTeX exports
keep only the cell's text, so two variants would be two identical rows there."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping

from mai.dashboards.views import run_label, run_models
from mai.storage.rows import RunRow

# configuration keys that do not make a setting: where the data and store are, how the work is spread, the run's
# name (shown beside the label already); the benchmark, split, limit and data make the group itself
_NOT_A_SETTING = frozenset({"home", "run_name", "shards", "workers", "vllm_urls", "vllm_env", "benchmark", "data",
                            "split", "subset", "revision", "limit", "small_model", "large_model", "mode"})
# of a benchmark spec, the fields that change what a model is asked or how it is scored (its paths, name and
# description do not; its budgets reach the run's own `max_new_tokens`)
_SPEC_SETTINGS = ("prompt", "metric", "columns", "answer_kind")
# how a varying key reads in a label: budgets as the paper writes them (R=40), a spec's prompt by its order
_BUDGETS = {"max_new_tokens": "", "min_new_tokens": "min ", "batch_sizes": "batch "}


def _flat(config: Mapping[str, object], prefix: str = "") -> dict[str, str]:
    """Dotted key -> the value as JSON text (comparable whatever its type)."""
    flat: dict[str, str] = {}
    for key, value in config.items():
        if isinstance(value, dict) and key in ("max_new_tokens", "min_new_tokens", "batch_sizes", "columns"):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[prefix + key] = json.dumps(value, sort_keys=True)
    return flat


def _settings(run: RunRow) -> dict[str, str]:
    config = json.loads(run["config_json"] or "{}")
    spec = config.get("benchmark_spec") or {}
    mine = {k: v for k, v in _flat(config).items() if k.split(".")[0] not in _NOT_A_SETTING | {"benchmark_spec"}}
    mine.update({f"spec.{k}": v for k, v in _flat({k: spec.get(k) for k in _SPEC_SETTINGS}).items()})
    return mine


def _words(key: str, value: str, order: list[str]) -> str:
    head, _, kind = key.partition(".")
    plain = json.loads(value)
    if head == "spec" and kind == "prompt":
        return f"prompt {order.index(value) + 1}"
    if head in _BUDGETS and kind:
        return f"{_BUDGETS[head]}{kind}={plain if plain is not None else '-'}"
    return f"{key.split('.')[-1].replace('_', ' ')} {plain if plain is not None else '-'}"


def setting_labels(runs: Iterable[RunRow], groups: Mapping[str, object]) -> dict[str, str]:
    """Run id -> its setting: `run_label`, with the configuration values that differ among the runs of its
    comparison group (`groups`: run id -> its group) that share its label and models, each value in the runs'
    order (oldest first)."""
    peers: dict[tuple[object, str, str], list[RunRow]] = defaultdict(list)
    for run in runs:
        peers[(groups.get(run["run_id"]), run_label(run), run_models(run))].append(run)
    labels: dict[str, str] = {}
    for (_, label, _), mine in peers.items():
        settings = [_settings(r) for r in mine]
        varying = sorted({k for s in settings for k in s if len({t.get(k, "null") for t in settings}) > 1},
                         key=lambda k: (not k.startswith("spec."), k))  # what the model is asked first
        for run, values in zip(mine, settings):
            words = [_words(k, values.get(k, "null"), list(dict.fromkeys(s.get(k, "null") for s in settings)))
                     for k in varying]
            labels[run["run_id"]] = label + (f" ({', '.join(words)})" if words else "")
    return labels
