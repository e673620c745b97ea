-- Speed-up table (paper tables 11-12): each run's estimated time (equation 27, per estimate) and measured time (stored per-call wall time, batch-amortised, plus sparse RT's attention-capture prefills, each the pass that captured the layer its selection read), the runs that computed those times (`timed_runs`: a run reuses generations and captures other runs computed, on their machines and under their loads), with the speed-up against the large model's R run and, for a pair's runs, against Full RT (measured: only when both times were taken in one regime, docs/latency.md; else `*_mixed` says why), each over the same set of sample contents, with the same models, dtype, backend and token budgets (the latest such run). Estimates pair by the models they price and the profile of each (`prices`: 'model=profile', sorted), not by name: a cascade's estimate 'h100-2b+h100-8b' pairs with the large R run's 'h100-8b' when both price the large model with h100-8b.
WITH used AS (
    UNPIVOT (SELECT run_id, sample_id, gen_s_large, gen_s_small, gen_r_small, gen_s2_small, gen_rt_large, gen_single,
                    gen_single_s2 FROM routes)
    ON gen_s_large, gen_s_small, gen_r_small, gen_s2_small, gen_rt_large, gen_single, gen_single_s2
    INTO NAME stage VALUE gen_id
), timed AS (  -- each used generation with how its time was measured (rows stored before the columns existed:
              -- the computing run's recorded machine; device and engine unknown)
    SELECT u.run_id, replace(u.stage, 'gen_', '') AS stage, g.model, g.wall_s, g.batch_size, g.output_tokens,
           g.run_id AS computed_by,
           coalesce(g.host, m.machine ->> 'host', '?') || ' (' || coalesce(g.hardware, m.machine ->> 'hardware', '?')
               || '); ' || coalesce(g.device, 'device ?') || '; ' || coalesce(g.timing_engine, g.backend || ' (version ?)')
               AS regime,
           least(g.load_start, g.load_end, m.start_load, m.end_load) AS load_lo,
           greatest(g.load_start, g.load_end, m.start_load, m.end_load) AS load_hi
    FROM used u JOIN generations g USING (gen_id)
    LEFT JOIN (SELECT run_id, provenance_json -> 'machine' AS machine,
                      (provenance_json -> 'machine' -> 'load_at_start' ->> 0)::DOUBLE AS start_load,
                      (provenance_json -> 'machine' -> 'load_at_end' ->> 0)::DOUBLE AS end_load FROM runs) m
      ON m.run_id = g.run_id
), per_stage AS (
    SELECT run_id, stage, any_value(model) AS model, sum(wall_s / batch_size) AS measured_s,
           sum(output_tokens) AS output_tokens, list(DISTINCT computed_by) AS computed_by,
           list_sort(list(DISTINCT batch_size)) AS batch_sizes, list(DISTINCT regime) AS regimes,
           min(load_lo) AS load_lo, max(load_hi) AS load_hi
    FROM timed GROUP BY run_id, stage
), captured AS (  -- sparse RT's attention-capture prefills: per capture the run's selections read, the pass that
                  -- captured the selection's layer (a later pass adding a layer to a capture has its own capture_s)
    SELECT run_id, sum(capture_s) AS capture_s, list(DISTINCT captured_by) AS computed_by FROM (
        SELECT DISTINCT r.run_id, s.capture_id, a.capture_s, a.run_id AS captured_by
        FROM routes r
        JOIN generations g ON g.gen_id = r.gen_rt_large
        JOIN selections s ON s.selection_id = g.upstream_gen_id
        JOIN attention a ON a.capture_id = s.capture_id AND a.layer = s.layer)
    GROUP BY run_id
), measured AS (
    SELECT p.run_id, sum(p.measured_s) + coalesce(any_value(c.capture_s), 0) AS measured_s,
           sum(p.output_tokens)::BIGINT AS output_tokens, any_value(c.run_id) IS NOT NULL AS captured,
           list_sort(list_distinct(flatten(list(p.computed_by)) || coalesce(any_value(c.computed_by), []))) AS timed_runs,
           list_sort(list_distinct(flatten(list(p.regimes)))) AS regimes, min(p.load_lo) AS load_lo,
           max(p.load_hi) AS load_hi,
           string_agg(p.stage || ' ' || array_to_string(p.batch_sizes, '/'), ', ' ORDER BY p.stage) AS realised_batches
    FROM per_stage p LEFT JOIN captured c USING (run_id) GROUP BY p.run_id
), regime AS (  -- what a measured time is comparable with: the run's own timing (every output computed by itself,
                -- as a fresh run batches it), the machine, device, backend and engine, the batch sizes per prompt
                -- kind, and the load the run saw (its start, end, and each call's start and end)
    SELECT m.*, m.timed_runs = [m.run_id] AS own_timing,
           'S=' || coalesce(ru.config_json -> 'batch_sizes' ->> 'S', ru.config_json ->> 'batch_size')
               || ' R=' || coalesce(ru.config_json -> 'batch_sizes' ->> 'R', ru.config_json ->> 'batch_size')
               || ' S2=' || coalesce(ru.config_json -> 'batch_sizes' ->> 'S2', ru.config_json ->> 'batch_size')
               || ' RT=' || coalesce(ru.config_json -> 'batch_sizes' ->> 'RT', ru.config_json ->> 'batch_size')
               AS batch_limits,
           (ru.provenance_json -> 'machine' -> 'load_at_start' ->> 0)::DOUBLE AS load_start,
           (ru.provenance_json -> 'machine' -> 'load_at_end' ->> 0)::DOUBLE AS load_end,
           greatest(1, coalesce((ru.provenance_json -> 'machine' ->> 'cpu_count')::DOUBLE, 1)) AS cores
    FROM measured m JOIN runs ru USING (run_id)
), pairs AS (  -- why a run's and a reference's measured times are not comparable (NULL: one regime). The load band:
               -- every load both saw lies within [lo, lo + max(lo, cores)], i.e. the load at most doubled, or grew by
               -- no more than the machine's cores
    SELECT a.run_id, b.run_id AS ref_run_id,
           CASE WHEN NOT a.own_timing OR NOT b.own_timing THEN 'times reused from other runs ('
                    || array_to_string(list_distinct(list_filter(a.timed_runs, lambda x: x <> a.run_id)
                                       || list_filter(b.timed_runs, lambda x: x <> b.run_id)), ', ') || ')'
                WHEN len(a.regimes) <> 1 OR a.regimes <> b.regimes THEN 'timed on different machines, devices or '
                    || 'engines (' || array_to_string(list_distinct(a.regimes || b.regimes), ' | ') || ')'
                WHEN a.batch_limits <> b.batch_limits THEN 'different batch sizes (' || a.batch_limits || ' vs '
                    || b.batch_limits || ')'
                WHEN greatest(a.load_hi, b.load_hi) - least(a.load_lo, b.load_lo)
                     > greatest(least(a.load_lo, b.load_lo), least(a.cores, b.cores))
                    THEN 'load ' || least(a.load_lo, b.load_lo) || '-' || greatest(a.load_hi, b.load_hi)
                         || ' beyond one band (' || least(a.load_lo, b.load_lo) || '-'
                         || (least(a.load_lo, b.load_lo) + greatest(least(a.load_lo, b.load_lo), least(a.cores, b.cores)))
                         || ')'
           END AS mixed
    FROM regime a JOIN regime b ON true
), sample_sets AS (  -- a run's exact set of sample contents
    SELECT r.run_id, md5(string_agg(s.content_hash, ',' ORDER BY s.content_hash)) AS sample_set,
           count(*) AS n_samples
    FROM routes r
    JOIN runs ru USING (run_id)
    JOIN samples s ON s.dataset_fingerprint = ru.dataset_fingerprint AND s.sample_id = r.sample_id
    WHERE r.error IS NULL
    GROUP BY r.run_id
), setting AS (
    SELECT ru.run_id, ru.benchmark, ru.started_at, ru.small_model, ru.large_model, ss.sample_set, ss.n_samples,
           ru.config_json ->> 'small_revision' AS small_revision,
           ru.config_json ->> 'large_revision' AS large_revision, ru.config_json ->> 'dtype' AS dtype,
           ru.config_json ->> 'backend' AS backend, (ru.config_json -> 'max_new_tokens')::VARCHAR AS budgets,
           CASE WHEN mode = 'cascade' THEN 'MAI' || CASE WHEN s2 THEN ' +S2' ELSE '' END
                    || CASE WHEN transfer = 'sparse' THEN ' sparse L' || transfer_layer ELSE '' END
                WHEN mode = 'full_rt' THEN 'Full RT'
                    || CASE WHEN transfer = 'sparse' THEN ' sparse L' || transfer_layer ELSE '' END
                ELSE single_model || ' ' || single_prompt || CASE WHEN s2 THEN ' +S2' ELSE '' END END AS setting
    FROM runs ru JOIN sample_sets ss USING (run_id)
), same_data AS (  -- candidate reference runs: same samples, dtype, backend and budgets
    SELECT s.run_id, r.run_id AS ref_run_id, r.setting AS ref_setting, r.started_at AS ref_started_at,
           r.large_model = s.large_model AND r.large_revision = s.large_revision AS same_large,
           r.small_model = s.small_model AND r.small_revision = s.small_revision AS same_small
    FROM setting s JOIN setting r
      ON r.sample_set = s.sample_set AND r.dtype = s.dtype AND r.backend = s.backend AND r.budgets = s.budgets
), reference AS (  -- the large-R run (a run without a large model: any large model) and the Full RT run
    SELECT s.run_id,
           arg_max(d.ref_run_id, d.ref_started_at) FILTER (
               WHERE d.ref_setting = 'large R' AND (s.large_model IS NULL OR d.same_large)) AS large_r_run_id,
           arg_max(d.ref_run_id, d.ref_started_at) FILTER (
               WHERE d.ref_setting = 'Full RT' AND d.same_large AND d.same_small) AS full_rt_run_id
    FROM setting s LEFT JOIN same_data d USING (run_id)
    GROUP BY s.run_id
), estimated AS (  -- an estimate's total, what it prices, and whether it prices sparse RT's capture prefills
    SELECT e.run_id, e.estimate_name, any_value(t.total_s) AS total_s,
           list_sort(list(DISTINCT p.model || '=' || e.profile_name) FILTER (WHERE p.model IS NOT NULL)) AS prices,
           bool_or(e.stage = 'capture') AS prices_capture  -- estimates made before captures were priced lack it
    FROM estimates e
    LEFT JOIN per_stage p ON p.run_id = e.run_id AND p.stage = e.stage
    JOIN estimates t ON t.run_id = e.run_id AND t.estimate_name = e.estimate_name AND t.stage = 'total'
    WHERE e.stage <> 'total'
    GROUP BY ALL
), paired AS (  -- per run and estimate, the reference runs' estimates that price their models as it does
    SELECT s.run_id, e.estimate_name, e.total_s, e.prices, e.prices_capture,
           ref.large_r_run_id, ref.full_rt_run_id,
           re.estimate_name AS large_r_estimate, re.total_s AS large_r_s,
           fe.estimate_name AS full_rt_estimate, fe.total_s AS full_rt_s
    FROM setting s
    JOIN estimated e USING (run_id)
    JOIN reference ref USING (run_id)
    LEFT JOIN estimated re ON re.run_id = ref.large_r_run_id AND list_has_all(e.prices, re.prices)
    LEFT JOIN estimated fe ON fe.run_id = ref.full_rt_run_id AND list_has_all(e.prices, fe.prices)
    QUALIFY row_number() OVER (PARTITION BY s.run_id, e.estimate_name
                               ORDER BY re.estimate_name = e.estimate_name DESC NULLS LAST, re.estimate_name,
                                        fe.estimate_name = e.estimate_name DESC NULLS LAST, fe.estimate_name) = 1
)
SELECT s.benchmark, p.estimate_name, array_to_string(p.prices, ', ') AS prices, s.setting, m.output_tokens,
       p.total_s AS estimated_s, m.measured_s,
       p.large_r_s / p.total_s AS estimated_speedup_vs_large_r,
       CASE WHEN lp.mixed IS NULL THEN rm.measured_s / m.measured_s END AS measured_speedup_vs_large_r,
       p.full_rt_s / p.total_s AS estimated_speedup_vs_full_rt,
       CASE WHEN fp.mixed IS NULL THEN fm.measured_s / m.measured_s END AS measured_speedup_vs_full_rt,
       s.run_id, ref.large_r_run_id, p.large_r_estimate, ref.full_rt_run_id, p.full_rt_estimate, s.n_samples,
       m.timed_runs, m.captured AND NOT p.prices_capture AS estimate_excludes_capture,
       lp.mixed AS large_r_mixed, fp.mixed AS full_rt_mixed, m.realised_batches, m.batch_limits,
       m.load_start, m.load_end, m.load_hi AS load_max, m.load_lo AS load_min,
       greatest(m.load_lo, m.cores) AS load_band, array_to_string(m.regimes, ' | ') AS regime
FROM setting s
JOIN regime m USING (run_id)
JOIN reference ref USING (run_id)
LEFT JOIN paired p USING (run_id)
LEFT JOIN measured rm ON rm.run_id = ref.large_r_run_id
LEFT JOIN measured fm ON fm.run_id = ref.full_rt_run_id
LEFT JOIN pairs lp ON lp.run_id = s.run_id AND lp.ref_run_id = ref.large_r_run_id
LEFT JOIN pairs fp ON fp.run_id = s.run_id AND fp.ref_run_id = ref.full_rt_run_id
ORDER BY s.benchmark, p.estimate_name, estimated_s;
