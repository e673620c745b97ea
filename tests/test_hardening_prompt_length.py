"""A row whose prompt does not fit a model of the run (over `--max-prompt-tokens`, or over the model's context) is a
recorded per-sample error with its reason, decided before generation from the prompt's real tokens (text and image
tokens as the processor expands them): the run completes, the other samples are routed and scored as in a clean run,
and a re-run reports the same error without trying the sample again. Real tiny models of both families on the
in-process executor, real Parquet data through the loader."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image
from transformers import InternVLConfig, Qwen3VLConfig

from mai import api
from mai.backends.model_family import context_length
from mai.backends.prompt_length import PromptCounter
from mai.backends.transformers_inputs import encode_prompts
from mai.config import BUILTIN_MODELS, RunConfig, resolve_model
from mai.evals.loading import DEFAULT_MAX_IMAGE_PIXELS
from mai.plan import RunPlan
from mai.storage.paths import Home
from mai.storage.runs import read_routes
from mai.types import ChatPrompt, Decoding, GenRequest, Sample, StageSpec
from tests.helpers import BUDGET
from tests.test_hardening_rows import hostile_copy

LOG = logging.getLogger("mai")


def counter(assets_home: Path, name: str) -> PromptCounter:
    return PromptCounter(resolve_model(name, "main", "float32", Home.at(assets_home).models))


def image_file(directory: Path, width: int, height: int) -> str:
    path = directory / f"{width}x{height}.png"
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (200, 40, 90)).save(buffer, format="PNG")
    path.write_bytes(buffer.getvalue())
    return str(path)


@pytest.mark.parametrize("name", BUILTIN_MODELS)
def test_the_count_is_the_processors_encoding(assets_home: Path, tmp_path: Path, name: str) -> None:
    """Image tokens from the image's size alone (no pixel processed) add up to what the processor encodes, for
    Qwen-VL's merged patches and InternVL's tiles, on sizes that resize and tile differently."""
    model = counter(assets_home, name)
    images = [image_file(tmp_path, w, h) for w, h in ((64, 64), (301, 170), (90, 700), (1000, 450))]
    prompts = [ChatPrompt("How many shapes?", ()), ChatPrompt("Which colour is the square? " * 20, (images[0],)),
               ChatPrompt("Compare them.", tuple(images[1:])), ChatPrompt("é😀 <b>" * 30, (images[3], images[0]))]
    for prompt in prompts:
        encoded = encode_prompts([GenRequest("g", "s", prompt, Decoding(4))], model.processor, "cpu")
        size = model.count(prompt, limit=10**9)
        assert size.exact and size.tokens == int(encoded["input_ids"].shape[1]), (name, prompt.image_paths)


def test_the_context_length_is_the_text_configs(assets_home: Path) -> None:
    for name in BUILTIN_MODELS:
        assert counter(assets_home, name).context_length == 8192  # the tiny pairs' max_position_embeddings
    qwen = Qwen3VLConfig(text_config={"max_position_embeddings": 262144}, vision_config={})
    internvl = InternVLConfig(text_config={"model_type": "qwen3", "max_position_embeddings": 40960})
    assert context_length(qwen) == 262144 and context_length(internvl) == 40960


def test_a_megabyte_text_is_refused_from_its_length_without_tokenizing(assets_home: Path) -> None:
    model = counter(assets_home, "mai-tiny-small")
    calls: list[str] = []
    tokenizer = model.tokenizer

    class Counting:
        def __call__(self, text: str) -> object:
            calls.append(text)
            return tokenizer(text)

        def __getattr__(self, name: str) -> object:
            return getattr(tokenizer, name)

    model.tokenizer = Counting()
    size = model.count(ChatPrompt("x" * 1_000_000, ()), limit=8192)
    assert not size.exact and size.tokens > 8192 and calls == []  # a lower bound: nothing was tokenized
    assert model.count(ChatPrompt("x" * 1000, ()), limit=8192).exact and len(calls) == 1


def test_a_prompt_over_a_small_limit_is_counted_exactly(assets_home: Path) -> None:
    """A refusal gives the prompt's size: a text its length alone puts over the limit, but short enough to tokenize
    in milliseconds, is tokenized (it once gave a lower bound, "at least 19 tokens")."""
    model = counter(assets_home, "mai-tiny-small")
    prompt = ChatPrompt("Is there a red circle in the image? " * 20, ())
    size = model.count(prompt, limit=10)
    assert size.exact and size == model.count(prompt, limit=100_000) and size.tokens > 10


def long_question_copy(home: Path, words: int, rows: int = 10) -> Path:
    """The demo's first rows, row 3's question `words` words longer (valid text: only its length is hostile)."""
    source = Home.at(home).datasets / "demo" / "test-00000-of-00001.parquet"
    table = pq.read_table(source).slice(0, rows)
    questions = table.column("question").to_pylist()
    questions[3] = questions[3] + " Consider every shape carefully." * words
    table = table.set_column(table.schema.get_field_index("question"), table.schema.field("question"),
                             pa.array(questions, pa.string()))
    target = home / "long" / "test-00000-of-00001.parquet"
    target.parent.mkdir(parents=True)
    pq.write_table(table, target)
    return target.parent


def run(home: Path, **overrides: object) -> dict[str, object]:
    values: dict[str, object] = {"home": str(home), "limit": None, "shards": 2, "batch_size": 8,
                                 "max_new_tokens": BUDGET, **overrides}
    return dict(api.run(RunConfig(**values), progress=False, local=True))  # type: ignore[arg-type]


def test_a_prompt_over_max_prompt_tokens_is_an_error_and_the_run_goes_on(home: Path) -> None:
    data = str(long_question_copy(home, words=60))
    clean = run(home, data=data, limit=10)
    limited = run(home, data=data, max_prompt_tokens=200)
    routes = {r["sample_id"]: r for r in read_routes(Home.at(home), str(limited["run_id"]))}
    error = routes["demo-3"]["error"] or ""
    assert routes["demo-3"]["route"] == "ERROR" and "over --max-prompt-tokens 200" in error, error
    assert "image tokens included" in error and "tokens" in error
    assert [sid for sid, r in routes.items() if r["route"] == "ERROR"] == ["demo-3"]
    counts = limited["counts"]
    assert isinstance(counts, dict) and counts["errors"] == 1 and counts["valid"] == 9
    before = {r["sample_id"]: (r["route"], r["final_answer"], r["score"])
              for r in read_routes(Home.at(home), str(clean["run_id"]))}
    assert before["demo-3"][0] != "ERROR"  # the model's own context holds it: only the configured limit refuses it
    assert {sid: (r["route"], r["final_answer"], r["score"]) for sid, r in routes.items() if sid != "demo-3"} == {
        sid: value for sid, value in before.items() if sid != "demo-3"}
    again = run(home, data=data, max_prompt_tokens=200)
    assert isinstance(again["counts"], dict) and again["counts"]["generations_computed"] == 0
    rerouted = {r["sample_id"]: r for r in read_routes(Home.at(home), str(again["run_id"]))}
    assert rerouted["demo-3"]["error"] == error  # reported the same way, not tried again


def test_a_megabyte_question_is_refused_by_the_models_context_and_the_run_completes(home: Path) -> None:
    manifest = run(home, data=str(hostile_copy(home)))
    routes = {r["sample_id"]: r for r in read_routes(Home.at(home), str(manifest["run_id"]))}
    error = routes["demo-1"]["error"] or ""
    assert routes["demo-1"]["route"] == "ERROR", routes["demo-1"]
    assert "at least" in error and "characters" in error and "the model's context of 8192 tokens" in error, error
    assert routes["demo-2"]["route"] == "ERROR" and "UTF-8" in (routes["demo-2"]["error"] or "")
    assert sum(r["route"] == "ERROR" for r in routes.values()) == 2 and len(routes) == 12


@pytest.mark.vllm
def test_with_vllm_the_servers_max_model_len_is_the_context(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The vLLM backend counts with the same processor; its limit is the `--max-model-len` of the servers it starts
    (vLLM refuses a request past it), when that is below the model's context. Decided from the plan: no server runs."""
    from mai.run.plan import prepare_run
    from mai.run.prompt_limits import refused_samples
    from mai.storage.materialise import materialise_samples
    from mai.storage.samples import read_shard
    from tests.test_vllm_backend import model_overrides

    data = str(long_question_copy(home, words=60))
    refused: dict[str, dict[str, str]] = {}
    for backend in ("transformers", "vllm"):
        monkeypatch.setenv("MAI_VLLM_MAX_MODEL_LEN", "300")
        config = RunConfig(home=str(home), data=data, backend=backend, max_new_tokens=BUDGET, shards=1,
                           **model_overrides(home))
        plan = prepare_run(config, Home.at(home))
        (shard,) = materialise_samples(Home.at(home), plan.benchmark, plan.source, 1, None, DEFAULT_MAX_IMAGE_PIXELS,
                                   LOG).shard_paths
        refused[backend] = refused_samples(plan, read_shard(home / shard))
    assert refused["transformers"] == {}  # 8,192 tokens of context hold every prompt
    assert list(refused["vllm"]) == ["demo-3"], refused["vllm"]
    assert "over the vLLM server's --max-model-len of 300 tokens" in refused["vllm"]["demo-3"]


def test_a_rerun_answered_from_the_store_refuses_the_same_prompts(home: Path) -> None:
    """A run whose every output is stored is a store lookup without Prefect (mai/pipeline.py): that path reads
    the same prompt-length decisions, so a limit that refuses a sample whose outputs another run stored still makes
    it an error."""
    data = str(long_question_copy(home, words=60))
    values = {"home": str(home), "data": data, "shards": 2, "max_new_tokens": BUDGET}
    first = api.run(RunConfig(**values), progress=False, local=True)  # type: ignore[arg-type]
    limited = api.run(RunConfig(**values, max_prompt_tokens=200), progress=False)  # type: ignore[arg-type]
    assert limited["counts"]["generations_computed"] == 0 and first["counts"]["errors"] == 0
    routes = {r["sample_id"]: r for r in read_routes(Home.at(home), limited["run_id"])}
    assert routes["demo-3"]["route"] == "ERROR" and "over --max-prompt-tokens 200" in (routes["demo-3"]["error"] or "")
    assert limited["counts"]["errors"] == 1


def test_max_prompt_tokens_counts_the_reasoning_an_s2_or_rt_prompt_carries(home: Path) -> None:
    """S2 and RT prompts carry the small model's reasoning (counted at the R budget, as against the context): a limit
    that holds each prompt's own tokens but not the reasoning as well refuses the sample, naming the reasoning; a
    limit that holds both lets it run. Decided from the plan: no model generates."""
    from mai.backends.prompt_length import prompt_counter
    from mai.evals.registry import get_benchmark
    from mai.run.plan import prepare_run
    from mai.run.prompt_limits import prompt_refusal, refused_samples, upstream_budget
    from mai.stages import build_request
    from mai.storage.materialise import materialise_samples
    from mai.storage.samples import read_shard
    from mai.types import StageAnswer

    config = RunConfig(home=str(home), max_new_tokens=BUDGET, s2=True, shards=1)
    plan = prepare_run(config, Home.at(home))
    (shard,) = materialise_samples(Home.at(home), plan.benchmark, plan.source, 1, None, DEFAULT_MAX_IMAGE_PIXELS,
                                   LOG).shard_paths
    samples, benchmark = read_shard(home / shard)[:3], get_benchmark(plan.benchmark)

    def limited(tokens: int) -> RunPlan:
        return plan.model_copy(update={"config": config.model_copy(update={"max_prompt_tokens": tokens})})

    def own_tokens(stage: StageSpec, sample: Sample) -> int:  # the prompt with an empty reasoning in it
        request = build_request(stage, sample, benchmark, plan.models[stage.role], plan.decodings[stage.prompt_kind],
                                StageAnswer("", "", None) if stage.upstream else None,
                                plan.backend_ids.get(stage.role))
        return prompt_counter(plan.models[stage.role]).count(request.prompt, 10**9).tokens

    carrying = [stage for stage in plan.stages if stage.generates and stage.upstream]
    assert sorted(stage.prompt_kind for stage in carrying) == ["RT", "S2"]
    for stage in carrying:
        whole = own_tokens(stage, samples[0]) + upstream_budget(plan, stage)
        assert upstream_budget(plan, stage) == BUDGET["R"]
        assert prompt_refusal(limited(whole), stage, benchmark, samples[0]) is None
        reason = prompt_refusal(limited(whole - 1), stage, benchmark, samples[0]) or ""
        assert f"with the reasoning it reads, up to {BUDGET['R']}: {whole}), over --max-prompt-tokens {whole - 1}" \
            in reason, reason
    # a limit all of a sample's prompts fit by their own tokens: refused for the reasoning its S2 or RT prompt carries
    for sample in samples:
        longest = max(own_tokens(stage, sample) for stage in plan.stages if stage.generates)
        refused = refused_samples(limited(longest), [sample])
        assert list(refused) == [sample.sample_id] and "the reasoning it reads" in refused[sample.sample_id], refused
