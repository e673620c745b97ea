-- Timing sets (`mai time RUN ...`): per set and run, the outputs the run uses recomputed in one regime (one process, machine, device, engine and batch sizes), its measured time (wall time, batch-amortised), how many recomputed outputs are identical to the stored ones, the realised batch sizes per stage, where, and the load (1-minute average) its calls saw, with the width of the load band from the lowest (docs/latency.md: max(lowest, cores)).
WITH per_stage AS (
    SELECT timing_set, run_id, stage, list_sort(list(DISTINCT batch_size)) AS batch_sizes
    FROM timings GROUP BY ALL
)
SELECT t.timing_set, t.run_id, sum(t.wall_s / t.batch_size) AS measured_s, count(*) AS outputs,
       count(*) FILTER (WHERE t.identical) AS identical,
       any_value(b.realised_batches) AS realised_batches, any_value(t.batch_limits) AS batch_limits,
       array_to_string(list_sort(list(DISTINCT t.host || ' (' || t.hardware || '); ' || coalesce(t.device, 'device ?')
                                     || '; ' || coalesce(t.engine, t.backend))), ' | ') AS regime,
       min(least(t.load_start, t.load_end)) AS load_min, max(greatest(t.load_start, t.load_end)) AS load_max,
       greatest(min(least(t.load_start, t.load_end)), min(t.cpu_count)) AS load_band, min(t.cpu_count) AS cpu_count,
       min(t.created_at) AS created_at
FROM timings t
JOIN (SELECT timing_set, run_id, string_agg(stage || ' ' || array_to_string(batch_sizes, '/'), ', ' ORDER BY stage)
             AS realised_batches FROM per_stage GROUP BY ALL) b USING (timing_set, run_id)
GROUP BY t.timing_set, t.run_id
ORDER BY created_at, t.timing_set, t.run_id;
