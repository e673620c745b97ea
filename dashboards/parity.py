"""`mai parity RUN_A RUN_B`: do two runs of one configuration on two backends, two batch sizes or two stores give
the same outputs? Per stage, the share of token-identical outputs over the samples both runs generated for (the same
item: same content hash), then the share of equal final answers and the score difference (B - A).

Within one store, two runs whose generations share an identity share the output itself (float32 identities leave
out the backend and batch size, mai/identity.py): those pairs are counted as `shared_identity`, identical by
construction. A real parity check compares separately computed outputs: runs outside float32 on two backends (their
identities differ), or runs in two stores (`home_b`), e.g. one per batch size.
"""

from __future__ import annotations

from typing import Any

from mai.dashboards.views import Row, fetch, session
from mai.storage.paths import Home

from mai.errors import ConfigError
from mai.types import STAGE_NAMES

ROUTES = """
    SELECT r.*, s.content_hash
    FROM routes r JOIN runs ru USING (run_id)
    LEFT JOIN samples s ON s.dataset_fingerprint = ru.dataset_fingerprint AND s.sample_id = r.sample_id
    WHERE r.run_id = ?
"""
OUTPUTS = "SELECT gen_id, output_token_ids, text FROM generations WHERE list_contains(?, gen_id)"


def parity(home_a: Home, run_a: str, run_b: str, home_b: Home | None = None) -> dict[str, Any]:
    """Parity of run B against run A (`home_b`: B's store, default A's), as plain values (JSON-ready)."""
    side_a, side_b = _side(home_a, run_a), _side(home_b or home_a, run_b)
    one_store = home_b is None or home_b.root.resolve() == home_a.root.resolve()
    by_item_a, by_item_b = _by_item(side_a[0]), _by_item(side_b[0])
    items = sorted(by_item_a.keys() & by_item_b.keys())
    if not items:
        raise ConfigError(f"runs {run_a} and {run_b} share no sample (same content): nothing to compare")
    pairs = [(by_item_a[i], by_item_b[i]) for i in items]
    stages = [_stage(stage, pairs, side_a[1], side_b[1], one_store) for stage in STAGE_NAMES]
    stages = [s for s in stages if s["pairs"]]
    scored = [(a["score"], b["score"]) for a, b in pairs if a["score"] is not None and b["score"] is not None]
    pairs_total = sum(s["pairs"] for s in stages)
    identical = sum(s["identical"] for s in stages)
    return {
        "run_a": run_a, "run_b": run_b, "samples_paired": len(items),
        "only_in_a": len(by_item_a) - len(items), "only_in_b": len(by_item_b) - len(items),
        "stages": stages, "outputs_paired": pairs_total, "outputs_identical": identical,
        "identical_share": identical / pairs_total if pairs_total else None,
        "shared_identity": sum(s["shared_identity"] for s in stages),
        "final_answer_agreement": sum(a["final_answer"] == b["final_answer"] for a, b in pairs) / len(pairs),
        "route_agreement": sum(a["route"] == b["route"] for a, b in pairs) / len(pairs),
        "scored_pairs": len(scored),
        "score_a": sum(a for a, _ in scored) / len(scored) if scored else None,
        "score_b": sum(b for _, b in scored) / len(scored) if scored else None,
        "score_difference": sum(b - a for a, b in scored) / len(scored) if scored else None,
    }


def _side(home: Home, run_id: str) -> tuple[list[Row], dict[str, Row]]:
    """A run's routes (with content hashes) and the outputs they name."""
    with session(home):
        if not fetch(home, "SELECT run_id FROM runs WHERE run_id = ?", [run_id]):
            raise ConfigError(f"no completed run '{run_id}' in {home.root}")
        routes = fetch(home, ROUTES, [run_id])
        gen_ids = sorted({g for r in routes for stage in STAGE_NAMES if (g := r.get(f"gen_{stage}"))})
        outputs = {o["gen_id"]: o for o in fetch(home, OUTPUTS, [gen_ids])}
    return routes, outputs


def _by_item(routes: list[Row]) -> dict[str, Row]:
    """Usable samples by what they are (content hash; the sample id where the samples view lacks it)."""
    return {r["content_hash"] or f"id:{r['sample_id']}": r for r in routes if r["error"] is None}


def _stage(stage: str, pairs: list[tuple[Row, Row]], outputs_a: dict[str, Row], outputs_b: dict[str, Row],
           one_store: bool) -> dict[str, Any]:
    """`shared_identity`: pairs that are one stored output (same identity in one store; two stores each computed
    their own, whatever the identities)."""
    both = [(a[f"gen_{stage}"], b[f"gen_{stage}"]) for a, b in pairs if a[f"gen_{stage}"] and b[f"gen_{stage}"]]
    found = [(outputs_a.get(x), outputs_b.get(y), one_store and x == y) for x, y in both]
    identical = sum(1 for x, y, _ in found if x is not None and y is not None and _same(x, y))
    return {"stage": stage, "pairs": len(both), "identical": identical,
            "identical_share": identical / len(both) if both else None,
            "shared_identity": sum(1 for _, _, shared in found if shared)}


def _same(a: Row, b: Row) -> bool:
    """Token-identical where both rows hold token ids (every row written since they were recorded), else text."""
    if a["output_token_ids"] is not None and b["output_token_ids"] is not None:
        return list(a["output_token_ids"]) == list(b["output_token_ids"])
    return bool(a["text"] == b["text"])


def render_text(result: dict[str, Any]) -> str:
    head = (f"parity of run {result['run_b']} against run {result['run_a']}: {result['samples_paired']} samples "
            f"paired ({result['only_in_a']} only in A, {result['only_in_b']} only in B)")
    lines = [head, f"{'stage':<10} {'pairs':>6} {'identical':>10} {'share':>7} {'shared id':>10}"]
    for s in result["stages"]:
        lines.append(f"{s['stage']:<10} {s['pairs']:>6} {s['identical']:>10} {s['identical_share']:>7.3f} "
                     f"{s['shared_identity']:>10}")
    share = result["identical_share"]
    lines.append(f"identical outputs: {result['outputs_identical']}/{result['outputs_paired']}"
                 + (f" ({share:.3f})" if share is not None else ""))
    if result["shared_identity"]:
        lines.append(f"  {result['shared_identity']} of them are one stored output shared by both runs (same identity)")
    lines.append(f"final answers equal: {result['final_answer_agreement']:.3f}, routes equal: "
                 f"{result['route_agreement']:.3f}")
    if result["score_difference"] is not None:
        lines.append(f"score: A {result['score_a']:.4f}, B {result['score_b']:.4f}, "
                     f"difference (B - A) {result['score_difference']:+.4f} over {result['scored_pairs']} samples")
    return "\n".join(lines)
