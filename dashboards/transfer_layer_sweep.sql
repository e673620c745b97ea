-- Transfer-layer sweep (paper table 9): per sparse-RT layer and delta, mean selected tokens and the metric, next to full RT (its reasoning tokens: all transferred) and the large model's S baseline on the same data.
WITH headline AS (
    SELECT run_id, metric, value FROM metrics
    WHERE subset = 'overall' AND metric NOT IN ('unparsed_rate', 'yes_ratio', 'precision', 'recall', 'row_accuracy')
    QUALIFY row_number() OVER (PARTITION BY run_id, scorer_profile ORDER BY metric = 'f1' DESC, metric) = 1
),
transferred AS (
    SELECT r.run_id, avg(s.transferred_tokens) AS mean_transferred_tokens,
           -- full transfer: every stored token of the small R (its token ids, no end-of-sequence token), as a
           -- sparse selection counts them (n_reasoning_tokens)
           coalesce(avg(s.n_reasoning_tokens), avg(len(rg.output_token_ids))) AS mean_reasoning_tokens,
           avg(s.share_selected) AS mean_share_selected, count(*) AS rt_samples
    FROM routes r
    JOIN generations g ON g.gen_id = r.gen_rt_large
    LEFT JOIN selections s ON s.selection_id = g.upstream_gen_id
    LEFT JOIN generations rg ON rg.gen_id = r.gen_r_small
    WHERE r.route = 'RT'
    GROUP BY ALL
)
SELECT CASE WHEN ru.mode = 'single' THEN 'large S' WHEN ru.transfer = 'sparse' THEN 'sparse RT' ELSE 'full RT' END
           AS setting,
       ru.transfer_layer AS layer, ru.transfer_delta AS delta, ru.mode, ru.benchmark, ru.large_model,
       t.rt_samples, t.mean_reasoning_tokens, t.mean_transferred_tokens, t.mean_share_selected,
       h.metric, h.value, ru.run_id
FROM runs ru
JOIN headline h USING (run_id)
LEFT JOIN transferred t USING (run_id)
WHERE ru.mode IN ('cascade', 'full_rt') OR (ru.mode = 'single' AND ru.single_model = 'large' AND ru.single_prompt = 'S')
ORDER BY ru.benchmark, ru.dataset_fingerprint, setting, layer NULLS FIRST, delta;
