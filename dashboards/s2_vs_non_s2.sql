-- S2 vs non-S2 on the same samples: pairs of runs that differ only in S2 (the same set of sample contents, the same models and every other setting: mode, transfer, token budgets, dtype, backend).
WITH run_samples AS (
    SELECT r.run_id, r.sample_id, s.content_hash
    FROM routes r
    JOIN runs ru USING (run_id)
    JOIN samples s ON s.dataset_fingerprint = ru.dataset_fingerprint AND s.sample_id = r.sample_id
    WHERE r.error IS NULL
), sample_sets AS (  -- a run's exact set of sample contents
    SELECT run_id, md5(string_agg(content_hash, ',' ORDER BY content_hash)) AS sample_set
    FROM run_samples GROUP BY run_id
), settings AS (  -- every setting that can change an output, but S2 and the ones the sample set or models cover
    SELECT ru.run_id, ru.s2, ru.mode, ru.small_model, ru.large_model, ss.sample_set,
           json_merge_patch(ru.config_json, '{"s2": null, "run_name": null, "home": null, "batch_size": null,
               "shards": null, "workers": null, "capture_layers": null, "vllm_urls": null, "vllm_env": null,
               "data": null, "split": null, "subset": null, "revision": null, "limit": null,
               "max_image_pixels": null, "small_model": null, "large_model": null}')::VARCHAR AS other_settings
    FROM runs ru JOIN sample_sets ss USING (run_id)
), pairs AS (
    SELECT a.run_id AS run_without_s2, b.run_id AS run_with_s2, a.mode, a.small_model, a.large_model
    FROM settings a JOIN settings b
      ON a.sample_set = b.sample_set AND a.other_settings = b.other_settings
     AND a.small_model IS NOT DISTINCT FROM b.small_model AND a.large_model IS NOT DISTINCT FROM b.large_model
     AND NOT a.s2 AND b.s2
)
SELECT p.mode, p.small_model, p.large_model, p.run_without_s2, p.run_with_s2,
       count(*) AS common_samples,
       avg(x.score) AS accuracy_without_s2,
       avg(y.score) AS accuracy_with_s2,
       count(*) FILTER (WHERE x.route = 'MV2') AS mv2_without_s2,
       count(*) FILTER (WHERE y.route = 'MV2') AS mv2_with_s2,
       count(*) FILTER (WHERE x.route = 'RT') AS rt_without_s2,
       count(*) FILTER (WHERE y.route = 'RT') AS rt_with_s2,
       count(*) FILTER (WHERE x.final_answer IS DISTINCT FROM y.final_answer) AS answers_changed
FROM pairs p
JOIN run_samples xs ON xs.run_id = p.run_without_s2
JOIN run_samples ys ON ys.run_id = p.run_with_s2 AND ys.sample_id = xs.sample_id AND ys.content_hash = xs.content_hash
JOIN routes x ON x.run_id = xs.run_id AND x.sample_id = xs.sample_id
JOIN routes y ON y.run_id = ys.run_id AND y.sample_id = ys.sample_id
GROUP BY ALL
ORDER BY p.run_with_s2, p.run_without_s2;
