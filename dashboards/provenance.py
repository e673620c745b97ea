"""What a run was made with (its provenance) and what an estimate prices, for the report and `mai compare`.

Provenance: the token budgets, dtype, backend, scorer profile, models (weights fingerprint, family, architecture),
data (fingerprint, split, limit, n), command, machine and its load, and code version a run recorded (the `runs`
view's config, versions and run-time provenance). Estimates: `mai estimate` names an estimate after the profiles it used
('h100-2b+h100-8b' for a pair, 'h100-8b' for the large model alone), so two runs' estimates are paired by the
models they price and the profile of each, never by name: they pair when they price their shared models with
the same profiles."""

from __future__ import annotations

import json
from dataclasses import dataclass

from mai.dashboards.rows import EstimatePriceRow
from mai.dashboards.views import USED_GENERATIONS, default_profile, fetch
from mai.storage.paths import Home
from mai.storage.rows import RunRow

# per (run, estimate): its total and 'model=profile' for every stage it priced (the model from the generations
# the stage used)
ESTIMATE_PRICES = f"""
    WITH stage_models AS (
        SELECT u.run_id, replace(u.stage, 'gen_', '') AS stage, any_value(g.model) AS model
        FROM ({USED_GENERATIONS}) u JOIN generations g USING (gen_id) WHERE list_contains(?, u.run_id) GROUP BY ALL
    )
    SELECT e.run_id, e.estimate_name, any_value(t.total_s) AS total_s,
           list_sort(list(DISTINCT m.model || '=' || e.profile_name)) AS prices
    FROM estimates e
    JOIN stage_models m ON m.run_id = e.run_id AND m.stage = e.stage
    JOIN estimates t ON t.run_id = e.run_id AND t.estimate_name = e.estimate_name AND t.stage = 'total'
    WHERE e.stage <> 'total'
    GROUP BY e.run_id, e.estimate_name ORDER BY e.run_id, e.estimate_name
"""


@dataclass(frozen=True)
class Priced:
    """One stored estimate of a run: its total seconds and the profile it priced each model with."""

    run_id: str
    name: str
    total_s: float
    prices: dict[str, str]  # model -> profile

    def pairs_with(self, other: Priced) -> bool:
        """Both price at least one model in common, and every shared model with the same profile."""
        shared = self.prices.keys() & other.prices.keys()
        return bool(shared) and all(self.prices[m] == other.prices[m] for m in shared)

    def shared_with(self, other: Priced) -> str:
        """The models both price, with their (common) profiles: 'model=profile, ...'."""
        return ", ".join(f"{m}={self.prices[m]}" for m in sorted(self.prices.keys() & other.prices.keys()))


def read_estimates(home: Home, run_ids: list[str]) -> list[Priced]:
    return [Priced(r["run_id"], r["estimate_name"], float(r["total_s"]),
                   dict(p.rsplit("=", 1) for p in r["prices"]))  # profile names hold no "="
            for r in fetch(home, EstimatePriceRow, ESTIMATE_PRICES, [run_ids])]


def pair_estimates(mine: list[Priced], theirs: list[Priced]) -> list[tuple[Priced, Priced]]:
    """Each of `mine` with the first of `theirs` that prices the same models the same way (one of the same name
    first)."""
    pairs = []
    for estimate in mine:
        matching = sorted((t for t in theirs if estimate.pairs_with(t)), key=lambda t: (t.name != estimate.name, t.name))
        if matching:
            pairs.append((estimate, matching[0]))
    return pairs


@dataclass(frozen=True)
class Provenance:
    """What a run was made with, as recorded with it. Runs stored before the run-time provenance
    (`provenance_json`, mai.provenance) show the configured revisions and '?' for what they did not record."""

    run_id: str
    budgets: str
    dtype: str
    backend: str
    scorer_profile: str
    revisions: str   # each model @ its revision (a local checkpoint's weights fingerprint 'sha256:...'), with a hub
                     # id's weights fingerprint, the snapshot commit it resolved to ('commit:<sha>')
    code: str
    packages: str
    data: str        # the dataset fingerprint, split, limit and n
    command: str
    machine: str     # host, hardware, load average at the start and the end

    @classmethod
    def of(cls, run: RunRow) -> Provenance:
        config = json.loads(run["config_json"] or "{}")
        versions = json.loads(run["versions_json"] or "{}")
        recorded = json.loads(run["provenance_json"] or "{}")
        budgets = " ".join(f"{k}={v}" for k, v in (config.get("max_new_tokens") or {}).items())
        models = recorded.get("models") or {}
        if models:
            revisions = ", ".join(f"{m['name']}@{m['revision']} ({_weights(m)}{m['family']}"
                                  + (f", {m['architecture']}" if m.get("architecture") else "") + ")"
                                  for _, m in sorted(models.items()))
        else:
            pairs = [(run["small_model"], config.get("small_revision")),
                     (run["large_model"], config.get("large_revision"))]
            revisions = ", ".join(f"{model}@{revision or '?'}" for model, revision in pairs if model)
        commit = run["git_commit"] or ""
        short_commit = commit[:12] + ("+dirty" if commit.endswith("+dirty") else "")
        code = f"mai {versions.get('mai', '?')}" + (f", commit {short_commit}" if commit else "")
        packages = ", ".join(f"{name} {versions[name]}" for name in ("torch", "transformers") if name in versions)
        data = recorded.get("data") or {}
        limit = recorded.get("limit", config.get("limit"))
        described = (f"{run['dataset_fingerprint']}, split {data.get('split') or config.get('split') or '?'}, "
                     f"limit {limit if limit is not None else 'none'}, n={run['n_samples']}")
        machine = recorded.get("machine") or {}
        where = (f"{machine['host']}: {machine['hardware']}; load {_load(machine['load_at_start'])} at the start, "
                 f"{_load(machine['load_at_end'])} at the end" if machine else "not recorded")
        return cls(run["run_id"], budgets, str(config.get("dtype", "?")), run["backend"],
                   default_profile(run["benchmark"]), revisions, code, packages, described,
                   recorded.get("command") or "not recorded", where)

    def line(self) -> str:
        return (f"budgets {self.budgets}; {self.dtype}, {self.backend}; scorer profile {self.scorer_profile}; "
                f"models {self.revisions}; data {self.data}; command {self.command}; machine {self.machine}; "
                f"{self.code}; {self.packages}")


def _weights(model: dict[str, str | None]) -> str:
    """A model's weights fingerprint, where the revision is not already it (a hub id's 'main' resolved to a
    commit), followed by '; '; a hub id whose snapshot was not found says so."""
    weights = model.get("weights")
    if weights == model["revision"]:
        return ""
    return f"weights {weights}; " if weights else ("weights not recorded; " if "weights" in model else "")


def _load(averages: list[float]) -> str:
    return "/".join(f"{a:g}" for a in averages) or "?"
