"""`mai parity RUN_A RUN_B`: do two runs of one configuration on two backends, two batch sizes or two stores give
the same outputs? Per stage, the share of token-identical outputs over the samples both runs generated for (the same
item: same content hash), then the share of equal final answers and the score difference (B - A).

Within one store, two runs whose generations share an identity share the output itself (identities leave out the
batch size, mai/identity.py): those pairs are counted as `shared_identity`, identical by construction. A real parity
check compares separately computed outputs: runs on two backends (every identity names its backend, so they never
share one), or runs in two stores (`home_b`), e.g. one per batch size.

Every pair that differs is listed with its first differing token and the cause the stored rows show: the upstream
output it carries differs, the prompts differ in length (image tokens, chat template), or the same prompt decoded
differently (the two backends' logits differ: image pixels or kernel numerics).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from mai.dashboards.rounding import fixed
from mai.dashboards.rows import RunIdRow, UsedRow
from mai.dashboards.views import USED_GENERATIONS, fetch, session
from mai.errors import ConfigError
from mai.storage.paths import Home
from mai.types import STAGE_NAMES, Route

ROUTES = """
    SELECT r.sample_id, r.route, r.final_answer, r.score, r.error, s.content_hash
    FROM routes r JOIN runs ru USING (run_id)
    LEFT JOIN samples s ON s.dataset_fingerprint = ru.dataset_fingerprint AND s.sample_id = r.sample_id
    WHERE r.run_id = ?
"""
USED = f"SELECT * FROM ({USED_GENERATIONS}) WHERE run_id = ?"
OUTPUTS = """SELECT gen_id, output_token_ids, text, upstream_gen_id, prompt_tokens, backend
             FROM generations WHERE list_contains(?, gen_id)"""


class RouteRow(TypedDict):
    sample_id: str
    route: Route
    final_answer: str | None
    score: float | None
    error: str | None
    content_hash: str | None


class OutputRow(TypedDict):
    gen_id: str
    output_token_ids: list[int] | None
    text: str
    upstream_gen_id: str | None
    prompt_tokens: int | None
    backend: str | None


@dataclass(frozen=True)
class Outcome:
    """One sample of a run: its route row and the generation it used at each stage."""

    route: RouteRow
    gen_ids: dict[str, str]


@dataclass(frozen=True)
class Side:
    """One run of the comparison: its samples and the outputs they name."""

    outcomes: list[Outcome]
    outputs: dict[str, OutputRow]


# --- the result: JSON-ready records (`mai parity --json`, mai.api.parity) --------------------------------


class Divergence(TypedDict):
    """Where a pair of outputs first differs, and why."""

    sample_id: str
    token_index: int  # 0-based position of the first output token that differs
    token_a: int | None  # the token there; None where that output had already ended
    token_b: int | None
    output_tokens_a: int
    output_tokens_b: int
    cause: str


class StageParity(TypedDict):
    stage: str
    pairs: int
    identical: int
    identical_share: float | None
    shared_identity: int  # pairs that are one stored output (see `_stage`)
    divergences: list[Divergence]  # every pair that is not identical


class Parity(TypedDict):
    run_a: str
    run_b: str
    samples_paired: int
    only_in_a: int
    only_in_b: int
    stages: list[StageParity]
    outputs_paired: int
    outputs_identical: int
    identical_share: float | None
    shared_identity: int
    final_answer_agreement: float
    route_agreement: float
    scored_pairs: int
    score_a: float | None
    score_b: float | None
    score_difference: float | None


def parity(home_a: Home, run_a: str, run_b: str, home_b: Home | None = None) -> Parity:
    """Parity of run B against run A (`home_b`: B's store, default A's), as plain values (JSON-ready)."""
    side_a, side_b = _side(home_a, run_a), _side(home_b or home_a, run_b)
    one_store = home_b is None or home_b.root.resolve() == home_a.root.resolve()
    by_item_a, by_item_b = _by_item(side_a), _by_item(side_b)
    items = sorted(by_item_a.keys() & by_item_b.keys())
    if not items:
        raise ConfigError(f"runs {run_a} and {run_b} share no sample (same content): nothing to compare")
    pairs = [(by_item_a[i], by_item_b[i]) for i in items]
    stages = [s for s in (_stage(stage, pairs, side_a, side_b, one_store) for stage in STAGE_NAMES) if s["pairs"]]
    scored = [(a, b) for a, b in ((x.route["score"], y.route["score"]) for x, y in pairs)
              if a is not None and b is not None]
    pairs_total = sum(s["pairs"] for s in stages)
    identical = sum(s["identical"] for s in stages)
    return {
        "run_a": run_a, "run_b": run_b, "samples_paired": len(items),
        "only_in_a": len(by_item_a) - len(items), "only_in_b": len(by_item_b) - len(items),
        "stages": stages, "outputs_paired": pairs_total, "outputs_identical": identical,
        "identical_share": identical / pairs_total if pairs_total else None,
        "shared_identity": sum(s["shared_identity"] for s in stages),
        "final_answer_agreement": sum(a.route["final_answer"] == b.route["final_answer"]
                                      for a, b in pairs) / len(pairs),
        "route_agreement": sum(a.route["route"] == b.route["route"] for a, b in pairs) / len(pairs),
        "scored_pairs": len(scored),
        "score_a": sum(a for a, _ in scored) / len(scored) if scored else None,
        "score_b": sum(b for _, b in scored) / len(scored) if scored else None,
        "score_difference": sum(b - a for a, b in scored) / len(scored) if scored else None,
    }


def _side(home: Home, run_id: str) -> Side:
    """A run's routes (with content hashes) and the outputs they name."""
    with session(home):
        if not fetch(home, RunIdRow, "SELECT run_id FROM runs WHERE run_id = ?", [run_id]):
            raise ConfigError(f"no completed run '{run_id}' in {home.root}")
        gen_ids: dict[str, dict[str, str]] = {}
        for used in fetch(home, UsedRow, USED, [run_id]):
            gen_ids.setdefault(used["sample_id"], {})[used["stage"].removeprefix("gen_")] = used["gen_id"]
        outcomes = [Outcome(route, gen_ids.get(route["sample_id"], {}))
                    for route in fetch(home, RouteRow, ROUTES, [run_id])]
        wanted = sorted({g for found in gen_ids.values() for g in found.values()})
        outputs = {o["gen_id"]: o for o in fetch(home, OutputRow, OUTPUTS, [wanted])}
    return Side(outcomes, outputs)


def _by_item(side: Side) -> dict[str, Outcome]:
    """Usable samples by what they are (content hash; the sample id where the samples view lacks it)."""
    return {o.route["content_hash"] or f"id:{o.route['sample_id']}": o for o in side.outcomes
            if o.route["error"] is None}


def _stage(stage: str, pairs: list[tuple[Outcome, Outcome]], side_a: Side, side_b: Side, one_store: bool
           ) -> StageParity:
    """`shared_identity`: pairs that are one stored output (same identity in one store; two stores each computed
    their own, whatever the identities)."""
    both = [(a.gen_ids[stage], b.gen_ids[stage]) for a, b in pairs if stage in a.gen_ids and stage in b.gen_ids]
    found = [(side_a.outputs.get(x), side_b.outputs.get(y), one_store and x == y) for x, y in both]
    identical = sum(1 for x, y, _ in found if x is not None and y is not None and _same(x, y))
    samples = [a.route["sample_id"] for a, b in pairs if stage in a.gen_ids and stage in b.gen_ids]
    divergences = [_divergence(sample, x, y, side_a, side_b) for sample, (x, y, _) in zip(samples, found)
                   if x is not None and y is not None and not _same(x, y)]
    return {"stage": stage, "pairs": len(both), "identical": identical,
            "identical_share": identical / len(both) if both else None,
            "shared_identity": sum(1 for _, _, shared in found if shared), "divergences": divergences}


def _divergence(sample_id: str, a: OutputRow, b: OutputRow, side_a: Side, side_b: Side) -> Divergence:
    tokens_a, tokens_b = _tokens(a), _tokens(b)
    index = next((i for i, (x, y) in enumerate(zip(tokens_a, tokens_b)) if x != y), min(len(tokens_a), len(tokens_b)))
    return {"sample_id": sample_id, "token_index": index,
            "token_a": tokens_a[index] if index < len(tokens_a) else None,
            "token_b": tokens_b[index] if index < len(tokens_b) else None,
            "output_tokens_a": len(tokens_a), "output_tokens_b": len(tokens_b),
            "cause": _cause(a, b, side_a, side_b)}


def _tokens(row: OutputRow) -> list[int]:
    """Token ids; a row from before they were stored compares by its characters' code points."""
    return list(row["output_token_ids"]) if row["output_token_ids"] is not None else [ord(c) for c in row["text"]]


def _cause(a: OutputRow, b: OutputRow, side_a: Side, side_b: Side) -> str:
    """The earliest difference the stored rows show: what the prompt carries, then its length, then decoding."""
    up_a = side_a.outputs.get(a["upstream_gen_id"] or "")
    up_b = side_b.outputs.get(b["upstream_gen_id"] or "")
    if up_a is not None and up_b is not None and not _same(up_a, up_b):
        return "upstream: the earlier stage's output this prompt carries differs"
    if a["prompt_tokens"] != b["prompt_tokens"]:
        return (f"prompt: {a['prompt_tokens']} vs {b['prompt_tokens']} tokens (image tokens or chat template "
                "differ)")
    backends = f"{a['backend']} vs {b['backend']}" if a["backend"] != b["backend"] else f"both {a['backend']}"
    return (f"decoding: the same {a['prompt_tokens']}-token prompt, other logits ({backends}: image pixels or "
            "kernel numerics)")


def _same(a: OutputRow, b: OutputRow) -> bool:
    """Token-identical where both rows hold token ids (every row written since they were recorded), else text."""
    if a["output_token_ids"] is not None and b["output_token_ids"] is not None:
        return list(a["output_token_ids"]) == list(b["output_token_ids"])
    return bool(a["text"] == b["text"])


def render_text(result: Parity) -> str:
    head = (f"parity of run {result['run_b']} against run {result['run_a']}: {result['samples_paired']} samples "
            f"paired ({result['only_in_a']} only in A, {result['only_in_b']} only in B)")
    lines = [head, f"{'stage':<10} {'pairs':>6} {'identical':>10} {'share':>7} {'shared id':>10}",
             *(f"{s['stage']:<10} {s['pairs']:>6} {s['identical']:>10} {s['identical_share']:>7.3f} "
               f"{s['shared_identity']:>10}" for s in result["stages"])]
    share = result["identical_share"]
    lines.append(f"identical outputs: {result['outputs_identical']}/{result['outputs_paired']}"
                 + (f" ({fixed(share, 3)})" if share is not None else ""))
    if result["shared_identity"]:
        lines.append(f"  {result['shared_identity']} of them are one stored output shared by both runs (same identity)")
    lines += [f"{s['stage']} {d['sample_id']}: first differs at output token {d['token_index']} "
              f"({d['token_a']} vs {d['token_b']}; {d['output_tokens_a']} vs {d['output_tokens_b']} tokens): "
              f"{d['cause']}" for s in result["stages"] for d in s["divergences"]]
    lines.append(f"final answers equal: {fixed(result['final_answer_agreement'], 3)}, routes equal: "
                 f"{fixed(result['route_agreement'], 3)}")
    score_a, score_b, difference = result["score_a"], result["score_b"], result["score_difference"]
    if difference is not None and score_a is not None and score_b is not None:
        lines.append(f"score: A {fixed(score_a, 4)}, B {fixed(score_b, 4)}, difference (B - A) "
                     f"{fixed(difference, 4, sign=True)} over {result['scored_pairs']} samples")
    return "\n".join(lines)
