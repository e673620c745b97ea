-- Speed-up table (paper tables 11-12): each run's estimated time (equation 27, per estimate) and measured time (stored per-call wall time, batch-amortised, plus sparse RT's attention-capture prefills, each the pass that captured the layer its selection read), the runs that computed those times (`timed_runs`: a run reuses generations and captures other runs computed, on their machines and under their loads), with the speed-up against the large model's R run and, for a pair's runs, against Full RT, each over the same set of sample contents, with the same models, dtype, backend and token budgets (the latest such run). Estimates pair by the models they price and the profile of each (`prices`: 'model=profile', sorted), not by name: a cascade's estimate 'h100-2b+h100-8b' pairs with the large R run's 'h100-8b' when both price the large model with h100-8b.
WITH used AS (
    UNPIVOT (SELECT run_id, sample_id, gen_s_large, gen_s_small, gen_r_small, gen_s2_small, gen_rt_large, gen_single,
                    gen_single_s2 FROM routes)
    ON gen_s_large, gen_s_small, gen_r_small, gen_s2_small, gen_rt_large, gen_single, gen_single_s2
    INTO NAME stage VALUE gen_id
), per_stage AS (
    SELECT u.run_id, replace(u.stage, 'gen_', '') AS stage, any_value(g.model) AS model,
           sum(g.wall_s / g.batch_size) AS measured_s, sum(g.output_tokens) AS output_tokens,
           list(DISTINCT g.run_id) AS computed_by
    FROM used u JOIN generations g USING (gen_id) GROUP BY ALL
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
           list_sort(list_distinct(flatten(list(p.computed_by)) || coalesce(any_value(c.computed_by), []))) AS timed_runs
    FROM per_stage p LEFT JOIN captured c USING (run_id) GROUP BY p.run_id
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
       rm.measured_s / m.measured_s AS measured_speedup_vs_large_r,
       p.full_rt_s / p.total_s AS estimated_speedup_vs_full_rt,
       fm.measured_s / m.measured_s AS measured_speedup_vs_full_rt,
       s.run_id, ref.large_r_run_id, p.large_r_estimate, ref.full_rt_run_id, p.full_rt_estimate, s.n_samples,
       m.timed_runs, m.captured AND NOT p.prices_capture AS estimate_excludes_capture
FROM setting s
JOIN measured m USING (run_id)
JOIN reference ref USING (run_id)
LEFT JOIN paired p USING (run_id)
LEFT JOIN measured rm ON rm.run_id = ref.large_r_run_id
LEFT JOIN measured fm ON fm.run_id = ref.full_rt_run_id
ORDER BY s.benchmark, p.estimate_name, estimated_s;
