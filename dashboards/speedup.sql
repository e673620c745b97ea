-- Speed-up table (paper tables 11-12): each run's estimated time (equation 27, per estimate name) and measured time (stored per-call wall time, batch-amortised), with the speed-up against the large model's R run over the same set of sample contents, with the same large model, dtype, backend and token budgets (large_r_run_id; the latest such run).
WITH used AS (
    UNPIVOT (SELECT run_id, sample_id, gen_s_large, gen_s_small, gen_r_small, gen_s2_small, gen_rt_large, gen_single,
                    gen_single_s2 FROM routes)
    ON gen_s_large, gen_s_small, gen_r_small, gen_s2_small, gen_rt_large, gen_single, gen_single_s2
    INTO NAME stage VALUE gen_id
), measured AS (
    SELECT u.run_id, sum(g.wall_s / g.batch_size) AS measured_s, sum(g.output_tokens) AS output_tokens
    FROM used u JOIN generations g USING (gen_id) GROUP BY u.run_id
), sample_sets AS (  -- a run's exact set of sample contents
    SELECT r.run_id, md5(string_agg(s.content_hash, ',' ORDER BY s.content_hash)) AS sample_set,
           count(*) AS n_samples
    FROM routes r
    JOIN runs ru USING (run_id)
    JOIN samples s ON s.dataset_fingerprint = ru.dataset_fingerprint AND s.sample_id = r.sample_id
    WHERE r.error IS NULL
    GROUP BY r.run_id
), setting AS (
    SELECT ru.run_id, ru.benchmark, ru.started_at, ru.large_model, ss.sample_set, ss.n_samples,
           ru.config_json ->> 'large_revision' AS large_revision, ru.config_json ->> 'dtype' AS dtype,
           ru.config_json ->> 'backend' AS backend, (ru.config_json -> 'max_new_tokens')::VARCHAR AS budgets,
           CASE WHEN mode = 'cascade' THEN 'MAI' || CASE WHEN s2 THEN ' +S2' ELSE '' END
                    || CASE WHEN transfer = 'sparse' THEN ' sparse L' || transfer_layer ELSE '' END
                WHEN mode = 'full_rt' THEN 'Full RT'
                ELSE single_model || ' ' || single_prompt || CASE WHEN s2 THEN ' +S2' ELSE '' END END AS setting
    FROM runs ru JOIN sample_sets ss USING (run_id)
), reference AS (  -- per run, the large-R run it is compared with (a run without a large model: any large model)
    SELECT s.run_id, arg_max(r.run_id, r.started_at) AS large_r_run_id
    FROM setting s JOIN setting r
      ON r.setting = 'large R' AND r.sample_set = s.sample_set AND r.dtype = s.dtype AND r.backend = s.backend
     AND r.budgets = s.budgets
     AND (s.large_model IS NULL OR (r.large_model = s.large_model AND r.large_revision = s.large_revision))
    GROUP BY s.run_id
), estimated AS (
    SELECT run_id, estimate_name, total_s FROM estimates WHERE stage = 'total'
)
SELECT s.benchmark, e.estimate_name, s.setting, m.output_tokens, e.total_s AS estimated_s, m.measured_s,
       re.total_s / e.total_s AS estimated_speedup_vs_large_r,
       rm.measured_s / m.measured_s AS measured_speedup_vs_large_r,
       s.run_id, ref.large_r_run_id, s.n_samples
FROM setting s
JOIN measured m USING (run_id)
LEFT JOIN estimated e USING (run_id)
LEFT JOIN reference ref USING (run_id)
LEFT JOIN measured rm ON rm.run_id = ref.large_r_run_id
LEFT JOIN estimated re ON re.run_id = ref.large_r_run_id AND re.estimate_name = e.estimate_name
ORDER BY s.benchmark, e.estimate_name, estimated_s;
