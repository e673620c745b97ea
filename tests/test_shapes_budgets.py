"""One place (mai.config.default_budgets) decides the shapes pair's output budgets: `mai run` with the shipped pair
computes what `mai demo`, `mai regress` and prefect.yaml's deployments compute (the same S 12 / R 160, so it reuses
their outputs instead of recomputing everything), and other models keep the general defaults."""

from __future__ import annotations

from pathlib import Path

import yaml

from mai.cli import _parser, runs
from mai.cli.options import run_config
from mai.config import DEFAULT_MAX_NEW_TOKENS, SHAPES_MAX_NEW_TOKENS, RunConfig, shapes_pair_config

PAIR = ["--benchmark", "shapes", "--small-model", "mai-shapes-small", "--large-model", "mai-shapes-large"]


def cli_config(*args: str) -> RunConfig:
    return run_config(_parser().parse_args(list(args)))


def regress_config(*args: str) -> RunConfig:
    return runs.regress_config(_parser().parse_args(["regress", *args]))


def test_mai_run_with_the_shipped_pair_is_the_demos_configuration() -> None:
    run = cli_config("run", *PAIR)
    assert run.max_new_tokens == SHAPES_MAX_NEW_TOKENS
    assert run.key() == shapes_pair_config(run_name="demo").key()  # what `mai demo` runs
    regress = regress_config()
    assert regress.key() == run.key()
    deployments = yaml.safe_load((Path(__file__).resolve().parents[1] / "prefect.yaml").read_text())["deployments"]
    cascade = next(d for d in deployments if d["name"] == "cascade")["parameters"]["config"]
    assert RunConfig(**cascade).key() == run.key()
    assert RunConfig(**{k: v for k, v in cascade.items() if k != "max_new_tokens"}).key() == run.key()


def test_given_budgets_override_the_pairs_kind_by_kind() -> None:
    assert cli_config("run", *PAIR, "--max-new-tokens", "R=200").max_new_tokens == {**SHAPES_MAX_NEW_TOKENS, "R": 200}
    single = cli_config("run", "--mode", "single", "--single-model", "large", "--large-model", "mai-shapes-large")
    assert single.max_new_tokens == SHAPES_MAX_NEW_TOKENS  # the one model it uses is the pair's
    assert cli_config("run", "--benchmark", "shapes").max_new_tokens == DEFAULT_MAX_NEW_TOKENS  # tiny models
    mixed = cli_config("run", "--small-model", "mai-shapes-small")
    assert mixed.max_new_tokens == DEFAULT_MAX_NEW_TOKENS
    assert RunConfig().max_new_tokens == DEFAULT_MAX_NEW_TOKENS
