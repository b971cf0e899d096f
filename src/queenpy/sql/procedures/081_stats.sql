-- The stats job of the background services (migration 009 describes its tables; 080_services.sql keeps the
-- counters it reads).

DROP FUNCTION IF EXISTS queen.stats_refresh_v1(boolean);
DROP FUNCTION IF EXISTS queen.stats_refresh_v2(boolean, integer);
DROP FUNCTION IF EXISTS queen.stats_refresh_v3(boolean, integer, integer);
DROP FUNCTION IF EXISTS queen.stats_refresh_v3(boolean, integer, integer, boolean);

-- The offset lag of a cursor on a partition: its offsets after the cursor and after the trimmed seq (what
-- retention, completion and eviction removed), never below zero; 0 when last_seq is NULL. The one definition
-- the stats job's steps use: the (queue, group) sums hold it for every consumer row (migration 029). A SQL
-- function of one expression, inlined where it is called.
CREATE OR REPLACE FUNCTION queen.offset_lag_of(p_last_seq bigint, p_cursor bigint, p_trimmed bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT greatest(p_last_seq - greatest(p_cursor, p_trimmed), 0) $$;

-- One run of the stats job (migration 009 defines the numbers). Looks at the partitions that may have changed
-- since the previous run: pushed to (partitions.last_activity), counters changed (partition_counters.updated_at:
-- deletions, dead letters, retention), or with a consumer row that consumed, leased, was created, saw its lease
-- expire or a retry delay start since then. "Since" is the previous run's bound: no write transaction in flight
-- then had started before it (pg_stat_activity, as in queen.advance_scan_floor_v3), and every timestamp above
-- is taken inside its writing transaction, so nothing that commits later is missed. For those partitions it
-- recomputes the numbers from partitions, partition_consumers and partition_counters, rewrites the rows whose
-- numbers changed, probes messages only for the partitions and cursors that moved (oldest message; first
-- message after a cursor), adds what the consumer rows changed to their (queue, group) sums, re-aggregates the
-- queues they belong to from partition_stats, and adds what the offsets and totals grew by to the current
-- minute of queue_throughput. Cost: range scans of the timestamps' indexes (migrations 024 and 026) from the
-- bound, plus index work per changed partition; never a pass over messages or the unchanged partitions.
-- The reconcile catches what carries no timestamp (a seek, a failed or 'retry' ack of a queue without
-- retryDelay) and repairs missing rows. A consumer group's deletion marks its partitions (trigger on
-- partition_consumers). One transaction a run; a transaction-level advisory lock keeps two runs from
-- interleaving (a run's increases are computed from the rows it overwrites).
-- plan_cache_mode = force_custom_plan: each statement is planned with this run's candidate list (a handful of
-- partitions, or all of them), once per run (every few seconds).
--
-- Versions 2 and 3 are for a million partitions (issue 44; benchmarks/journal/2026-11.md). Version 1 (dropped)
-- re-aggregated every consumer row of a queue whenever one changed (10 million rows at a million partitions
-- and ten groups, every run), and its full reconcile was one transaction over every partition. Version 2
-- (dropped; version 3 keeps all of it):
-- - the (queue, group) sums follow the rows step 2 rewrites or removes (deltas), the oldest unconsumed time and
--   the largest lag come from index probes (migration 021), the consumer groups from queue_group_stats; the
--   queues' sums over partition_stats are re-aggregated (a tenth of the consumer rows);
-- - the reconcile is a pass over the partitions in id order, p_chunk of them per run (STATS_RECONCILE_CHUNK)
--   added to the run's candidates; p_full starts a pass when none is in progress, and the run that ends it
--   repairs missing rows and re-aggregates every queue and group from all their rows;
--   p_full with p_chunk NULL (POST /api/v1/stats/refresh {"full": true}) is the whole pass in this one run.
-- Version 3 bounds the partitions that changed which one run takes (p_limit, STATS_RUN_PARTITIONS): after a
-- retention pass had touched every one of a million partitions, each v2 run took all of them, hit the
-- statement timeout and rolled back, run after run (benchmarks/journal/2026-11.md, issue 44). The changed
-- partitions are taken in id order, p_limit a run: a sweep. Its first run fixes its bound; its runs look
-- "since" the previous sweep's bound and after the last id taken; the run that finds fewer than p_limit ends
-- it, and the next sweep looks since its bound (what changed meanwhile behind the sweep carries a time at or
-- after that bound, by the argument above). Offsets that grew during a sweep count in the minute of
-- queue_throughput of the run that took their partition.
-- Returns {"partitions", "consumers", "queues", "groups": rows rewritten, "candidates", "full": every
-- partition a candidate, "exact" (every queue and group re-aggregated), "pass" ('started', 'continued',
-- 'finished' or null), "passAfter" (where the pass continues; null when none is in progress),
-- "sweepAfter" (the last changed partition taken when the sweep goes on in the next run; null when it ended)
-- "aggregated" (step 4 ran) and "aggregateMs" (its time, when it ran).
-- p_wait false (the job's runs): when another run holds the lock (a full pass the operators' route started,
-- which may take minutes at a million partitions), answer {"skipped": ...} at once instead of waiting for it
-- until the statement timeout.
-- Version 4 makes the sweep's runs small steps. Version 3 found the changed partitions by the three scans in
-- every run; at a million partitions they took about 1.5 s, so a run had to take 10,000 partitions to be worth
-- it, and such a run kept a core busy for 5 to 10 s, which the hot path felt whole in a 10 s window (journal,
-- issue 44). Version 4 scans once, in the sweep's first run, into queen.stats_sweep (migration 022), and the
-- sweep's later runs take the next p_limit ids from there: what changes meanwhile is the next sweep's, by the
-- argument above. Step 4 (the queues' sums over partition_stats: a million rows for a queue of a million
-- partitions) runs when p_aggregate is true, or, when it is NULL, when the sweep ends; until then the queues to
-- re-aggregate are kept in the state ("queues"). The job (queenpy.services.jobs.StatsJob) calls it a step at a
-- time, paced, with p_aggregate NULL once a STATS_INTERVAL_MS, or less often when step 4 is slow (it reports
-- "aggregateMs"; about 0.6 s at a million partitions, benchmarks/journal/2026-11.md), true in a sweep overdue
-- by another period, false otherwise. Since migration 024 the sweep's first run finds the changed partitions
-- by range scans of indexes on the timestamps, not by scanning the three tables whole (about 1.1 s a sweep at
-- a million partitions, busy or idle).
-- Since migration 029 a push rewrites no consumer row: step 2 derives each row's lag from partition_stats and
-- adds how much it grew to the (queue, group) sums, and rewrites the row only when the consumer changed it or
-- the lag reached or left zero. Before, every push rewrote one row a group, and after a wide push window the
-- job's backlog of those rows took about half of what the pop lost at a million partitions (issue 44;
-- benchmarks/journal/2026-12.md).
CREATE OR REPLACE FUNCTION queen.stats_refresh_v4(p_full boolean DEFAULT false, p_chunk integer DEFAULT NULL,
                                                  p_limit integer DEFAULT NULL, p_wait boolean DEFAULT true,
                                                  p_aggregate boolean DEFAULT true)
RETURNS jsonb
LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_bucket timestamptz := date_trunc('minute', now());
    v_partitions integer;
    v_consumers integer;
    v_queues integer;
    v_groups integer;
    v_changed_queues uuid[];
    v_consumer_queues uuid[];
    v_since timestamptz;
    v_bound timestamptz;
    v_full boolean;             -- every partition a candidate (the first run, or a whole pass at once)
    v_exact boolean;            -- queues and groups re-aggregated from every row (v1's full run)
    v_state jsonb;
    v_after uuid;               -- the reconcile pass: the last partition id it has covered (NULL: no pass)
    v_chunk uuid[] := '{}';
    v_pass text;                -- 'started', 'continued', 'finished' or NULL
    v_candidates uuid[];
    v_changed uuid[];           -- partitions that changed since v_since, after v_sweep_after, p_limit of them
    v_sweep_after uuid;         -- the sweep of changed partitions: the last id it took (NULL: none in progress)
    v_sweep_bound timestamptz;  -- the bound of the sweep's first run: the next sweep's "since"
    v_group_deltas jsonb;
    v_pending_queues uuid[];    -- queues whose step 4 a run without p_aggregate left for later
    v_aggregate boolean;
    v_aggregate_started timestamptz;
    v_aggregate_ms numeric;     -- step 4's time (NULL when it did not run)
    v_before_ids uuid[];        -- the partitions step 1 rewrote, with their last_seq and trimmed seq before it
    v_before_last_seq bigint[];
    v_before_trimmed bigint[];
BEGIN
    IF p_wait THEN
        PERFORM pg_advisory_xact_lock(737013);
    ELSIF NOT pg_try_advisory_xact_lock(737013) THEN
        RETURN jsonb_build_object('skipped', 'another run holds the stats lock');
    END IF;
    -- first the bound (before any write transaction in flight began), then, in later statements, the reads
    SELECT least(statement_timestamp(),
                 (SELECT min(a.xact_start) FROM pg_stat_activity a
                  WHERE a.backend_xid IS NOT NULL AND a.pid <> pg_backend_pid()))
    INTO v_bound;
    SELECT s.value INTO v_state FROM queen.system_state s WHERE s.key = 'stats_refresh';
    v_since := (v_state->>'since')::timestamptz;
    v_after := (v_state->>'passAfter')::uuid;
    v_sweep_after := (v_state->>'sweepAfter')::uuid;
    v_pending_queues := ARRAY(SELECT jsonb_array_elements_text(coalesce(v_state->'queues', '[]'))::uuid);
    v_sweep_bound := coalesce((v_state->>'sweepBound')::timestamptz, v_bound);
    IF v_sweep_after IS NULL THEN
        v_sweep_bound := v_bound;
    END IF;
    IF v_since IS NULL OR (p_full AND p_chunk IS NULL) THEN
        v_full := true;
        v_pass := CASE WHEN p_full THEN 'finished' END;
        v_after := NULL;
    ELSE
        v_full := false;
        IF p_full AND v_after IS NULL THEN
            v_after := '00000000-0000-0000-0000-000000000000';
            v_pass := 'started';
        END IF;
        IF v_after IS NOT NULL AND p_chunk IS NOT NULL THEN  -- the pass's next partitions, in id order
            v_pass := coalesce(v_pass, 'continued');
            v_chunk := ARRAY(SELECT p.id FROM queen.partitions p WHERE p.id > v_after ORDER BY p.id
                             LIMIT p_chunk);
            IF cardinality(v_chunk) < p_chunk THEN
                v_pass := 'finished';
                v_after := NULL;
            ELSE
                v_after := v_chunk[p_chunk];
            END IF;
        END IF;
    END IF;
    v_exact := v_full OR coalesce(v_pass = 'finished', false);
    IF v_exact THEN  -- repair: rows the creation trigger did not make (partitions created before it existed)
        -- (in id order, as pushes lock partitions: these inserts' key checks share-lock the partition rows)
        INSERT INTO queen.partition_counters (partition_id)
        SELECT p.id FROM queen.partitions p
        WHERE NOT EXISTS (SELECT 1 FROM queen.partition_counters c WHERE c.partition_id = p.id)
        ORDER BY p.id
        ON CONFLICT DO NOTHING;
        INSERT INTO queen.partition_stats (partition_id, queue_id)
        SELECT p.id, p.queue_id FROM queen.partitions p
        WHERE NOT EXISTS (SELECT 1 FROM queen.partition_stats s WHERE s.partition_id = p.id)
        ORDER BY p.id
        ON CONFLICT DO NOTHING;
        -- rows of partitions deleted before the trigger above existed
        DELETE FROM queen.consumer_stats s WHERE NOT EXISTS (SELECT 1 FROM queen.partitions p WHERE p.id = s.partition_id);
        DELETE FROM queen.partition_stats s WHERE NOT EXISTS (SELECT 1 FROM queen.partitions p WHERE p.id = s.partition_id);
        DELETE FROM queen.partition_counters c
        WHERE NOT EXISTS (SELECT 1 FROM queen.partitions p WHERE p.id = c.partition_id);
    END IF;
    IF v_full THEN
        SELECT coalesce(array_agg(p.id), '{}') INTO v_candidates FROM queen.partitions p;
        TRUNCATE queen.stats_sweep;
        v_sweep_after := NULL;
        v_sweep_bound := v_bound;
    ELSE
        IF v_sweep_after IS NULL THEN  -- a new sweep: the partitions that changed since the last one's bound
            TRUNCATE queen.stats_sweep;
            -- range scans of migration 024's indexes from v_since: the cost follows what changed, not the
            -- number of partitions
            INSERT INTO queen.stats_sweep (partition_id)
            SELECT DISTINCT x.id FROM (
                SELECT p.id FROM queen.partitions p WHERE p.last_activity >= v_since
                UNION ALL
                SELECT c.partition_id FROM queen.partition_counters c WHERE c.updated_at >= v_since
                UNION ALL  -- consumer rows (migration 026: their change times and leases)
                SELECT a.partition_id FROM queen.consumer_activity a WHERE a.changed_at >= v_since
                UNION ALL
                SELECT a.partition_id FROM queen.consumer_activity a
                WHERE a.lease_expires_at >= v_since AND a.lease_expires_at <= now()) x;
        END IF;
        v_changed := ARRAY(
            SELECT w.partition_id FROM queen.stats_sweep w
            WHERE w.partition_id > coalesce(v_sweep_after, '00000000-0000-0000-0000-000000000000')
            ORDER BY w.partition_id
            LIMIT p_limit);
        IF p_limit IS NOT NULL AND cardinality(v_changed) >= p_limit
           AND EXISTS (SELECT 1 FROM queen.stats_sweep w
                       WHERE w.partition_id > v_changed[cardinality(v_changed)]) THEN
            v_sweep_after := v_changed[cardinality(v_changed)];  -- the sweep goes on; "since" stays
        ELSE
            v_sweep_after := NULL;  -- the sweep ends: the next one looks since its bound
        END IF;
        SELECT coalesce(array_agg(DISTINCT x.id), '{}') INTO v_candidates FROM (
            SELECT k.id FROM unnest(v_changed) k(id)
            UNION ALL
            SELECT k.id FROM unnest(v_chunk) k(id)) x;
    END IF;

    -- 1. partitions
    WITH candidates AS (
        SELECT DISTINCT k.id FROM unnest(v_candidates) AS k(id)
    ), groups AS (
        SELECT pc.partition_id, count(*) AS groups, min(pc.last_consumed_seq) AS min_cursor,
               max(CASE WHEN pc.lease_expires_at > now() THEN greatest(pc.batch_size - pc.acked_count, 0)
                        ELSE 0 END) AS in_flight,
               sum(pc.total_messages_consumed) AS consumed
        FROM candidates k JOIN queen.partition_consumers pc ON pc.partition_id = k.id
        GROUP BY pc.partition_id
    ), cur AS (
        SELECT p.id, p.queue_id, p.last_seq, p.last_message_at,
               c.messages_deleted, c.dlq_messages, c.dead_lettered,
               greatest(c.head_seq, c.completed_seq, c.evicted_seq) AS trimmed,
               greatest(c.head_seq, c.completed_seq) AS gone_below,
               coalesce(g.groups, 0)::integer AS groups, coalesce(g.min_cursor, 0) AS min_cursor,
               coalesce(g.in_flight, 0) AS in_flight, coalesce(g.consumed, 0)::bigint AS consumed,
               greatest(p.last_seq - c.messages_deleted, 0) AS depth,
               s.last_seq AS s_last_seq, s.messages_deleted AS s_messages_deleted, s.dead_letter AS s_dead_letter,
               s.dead_lettered AS s_dead_lettered, s.consumer_groups AS s_groups, s.min_cursor_seq AS s_min_cursor,
               s.in_flight AS s_in_flight, s.consumed_total AS s_consumed, s.trimmed_seq AS s_trimmed,
               s.depth AS s_depth, s.unconsumed AS s_unconsumed, s.oldest_seq AS s_oldest_seq,
               s.oldest_at AS s_oldest_at, s.oldest_unconsumed_at AS s_oldest_unconsumed_at
        FROM candidates k
        JOIN queen.partitions p ON p.id = k.id
        JOIN queen.partition_counters c ON c.partition_id = p.id
        JOIN queen.partition_stats s ON s.partition_id = p.id
        LEFT JOIN groups g ON g.partition_id = p.id
    ), changed AS (
        SELECT cur.*, least(queen.offset_lag_of(cur.last_seq, cur.min_cursor, cur.trimmed), cur.depth) AS unconsumed
        FROM cur
        WHERE (cur.last_seq, cur.messages_deleted, cur.dlq_messages, cur.dead_lettered, cur.groups, cur.min_cursor,
               cur.in_flight, cur.consumed, cur.trimmed)
              IS DISTINCT FROM (cur.s_last_seq, cur.s_messages_deleted, cur.s_dead_letter, cur.s_dead_lettered,
                                cur.s_groups, cur.s_min_cursor, cur.s_in_flight, cur.s_consumed, cur.s_trimmed)
    ), probed AS (
        SELECT ch.*,
               CASE WHEN ch.depth = 0 THEN NULL WHEN o.seq IS NOT NULL THEN o.seq ELSE ch.s_oldest_seq END AS oldest_seq,
               CASE WHEN ch.depth = 0 THEN NULL WHEN o.seq IS NOT NULL THEN o.created_at ELSE ch.s_oldest_at END
                   AS oldest_at,
               CASE WHEN ch.unconsumed = 0 THEN NULL WHEN u.seq IS NOT NULL THEN u.created_at
                    ELSE ch.s_oldest_unconsumed_at END AS oldest_unconsumed_at
        FROM changed ch
        -- the oldest message: below the retention floors (head_seq, completed_seq) only dead letters that
        -- completed retention spared are left, found through the DLQ; above them, the first entry of the
        -- (partition_id, seq) index from the floor on, so the probe never walks the index entries of the
        -- messages retention deleted since the last vacuum (at 20,000 deletions a second, thousands a partition)
        LEFT JOIN LATERAL (
            SELECT x.seq, x.created_at FROM (
                (SELECT m.seq, m.created_at FROM queen.dead_letter_queue d
                 JOIN queen.messages m ON m.id = d.message_id
                 WHERE d.partition_id = ch.id AND ch.dlq_messages > 0 AND m.seq <= ch.gone_below
                 ORDER BY m.seq LIMIT 1)
                UNION ALL
                (SELECT m.seq, m.created_at FROM queen.messages m
                 WHERE m.partition_id = ch.id AND m.seq > ch.gone_below
                 ORDER BY m.seq LIMIT 1)) x
            WHERE ch.depth > 0
              AND (ch.s_oldest_seq IS NULL OR ch.s_depth = 0
                   OR ch.messages_deleted <> ch.s_messages_deleted)
            ORDER BY x.seq LIMIT 1) o ON true
        LEFT JOIN LATERAL (
            SELECT m.seq, m.created_at FROM queen.messages m
            WHERE m.partition_id = ch.id AND m.seq > greatest(ch.min_cursor, ch.trimmed)
              AND ch.unconsumed > 0
              AND (ch.s_oldest_unconsumed_at IS NULL OR ch.s_unconsumed = 0
                   OR ch.min_cursor <> ch.s_min_cursor OR ch.trimmed <> ch.s_trimmed
                   OR ch.messages_deleted <> ch.s_messages_deleted)
            ORDER BY m.seq LIMIT 1) u ON true
    ), written AS (
        UPDATE queen.partition_stats s
        SET last_seq = pr.last_seq, depth = pr.depth, unconsumed = pr.unconsumed,
            in_flight = least(pr.in_flight, pr.unconsumed),
            pending = greatest(pr.unconsumed - pr.in_flight, 0),
            dead_letter = pr.dlq_messages,
            completed = greatest(pr.depth - pr.unconsumed - pr.dlq_messages, 0),
            consumer_groups = pr.groups, min_cursor_seq = pr.min_cursor, trimmed_seq = pr.trimmed,
            consumed_total = pr.consumed, messages_deleted = pr.messages_deleted, dead_lettered = pr.dead_lettered,
            oldest_seq = pr.oldest_seq, oldest_at = pr.oldest_at, newest_at = pr.last_message_at,
            oldest_unconsumed_at = pr.oldest_unconsumed_at, computed_at = now()
        FROM probed pr
        WHERE s.partition_id = pr.id
        RETURNING s.queue_id
    ), throughput AS (
        INSERT INTO queen.queue_throughput AS t (queue_id, bucket, ingested, processed, dead_lettered, deleted)
        SELECT pr.queue_id, v_bucket, sum(greatest(pr.last_seq - pr.s_last_seq, 0)),
               sum(greatest(pr.consumed - pr.s_consumed, 0)), sum(greatest(pr.dead_lettered - pr.s_dead_lettered, 0)),
               sum(greatest(pr.messages_deleted - pr.s_messages_deleted, 0))
        FROM probed pr
        GROUP BY pr.queue_id
        HAVING sum(greatest(pr.last_seq - pr.s_last_seq, 0)) + sum(greatest(pr.consumed - pr.s_consumed, 0))
               + sum(greatest(pr.dead_lettered - pr.s_dead_lettered, 0))
               + sum(greatest(pr.messages_deleted - pr.s_messages_deleted, 0)) > 0
        ON CONFLICT (queue_id, bucket) DO UPDATE
        SET ingested = t.ingested + EXCLUDED.ingested, processed = t.processed + EXCLUDED.processed,
            dead_lettered = t.dead_lettered + EXCLUDED.dead_lettered, deleted = t.deleted + EXCLUDED.deleted
        RETURNING 1
    )
    SELECT w.n, w.queues, b.ids, b.last_seqs, b.trimmed
    INTO v_partitions, v_changed_queues, v_before_ids, v_before_last_seq, v_before_trimmed
    FROM (SELECT count(*) AS n, array_agg(DISTINCT queue_id) AS queues FROM written) w,
         (SELECT array_agg(pr.id ORDER BY pr.id) AS ids, array_agg(pr.s_last_seq ORDER BY pr.id) AS last_seqs,
                 array_agg(pr.s_trimmed ORDER BY pr.id) AS trimmed
          FROM probed pr) b;

    -- 2. consumer rows (one per partition and group) of the candidate partitions. A row's offset lag is not
    -- kept (migration 029): it is its partition's last_seq less the greater of the row's cursor and the
    -- partition's trimmed seq, taken from partition_stats as step 1 left it (so the lags added to the sums
    -- and the partition's numbers come from one reading of partitions), and, for the lag the sums hold, as
    -- the previous run left it (v_before_*: step 1's values before it rewrote them). A row is rewritten when
    -- the consumer changed it (cursor, lease, in flight, totals) or when its lag becomes zero or stops being
    -- zero (has_lag, and with it the oldest unconsumed time); a push alone changes no row, only the sums.
    WITH candidates AS (  -- each candidate's partition_stats numbers as step 1 left them, and before it
        SELECT k.id, ps.queue_id, ps.last_seq, ps.trimmed_seq,
               coalesce(b.last_seq, ps.last_seq) AS last_seq_before,
               coalesce(b.trimmed, ps.trimmed_seq) AS trimmed_before
        FROM (SELECT DISTINCT x.id FROM unnest(v_candidates) AS x(id)) k
        LEFT JOIN queen.partition_stats ps ON ps.partition_id = k.id
        LEFT JOIN unnest(v_before_ids, v_before_last_seq, v_before_trimmed) AS b(partition_id, last_seq, trimmed)
               ON b.partition_id = k.id
    ), cur AS (
        SELECT pc.partition_id, pc.consumer_group, k.queue_id, pc.last_consumed_seq AS cursor,
               queen.offset_lag_of(k.last_seq, pc.last_consumed_seq, k.trimmed_seq) AS offset_lag,
               k.trimmed_seq AS trimmed,
               CASE WHEN pc.lease_expires_at > now() THEN greatest(pc.batch_size - pc.acked_count, 0) ELSE 0 END
                   AS in_flight,
               CASE WHEN pc.lease_expires_at > now() THEN pc.lease_expires_at END AS lease_expires_at,
               pc.total_messages_consumed, pc.last_consumed_at
        FROM candidates k
        JOIN queen.partition_consumers pc ON pc.partition_id = k.id
        WHERE k.queue_id IS NOT NULL  -- a partition without its partition_stats row (the exact runs repair it)
    ), known AS (
        SELECT s.*, queen.offset_lag_of(k.last_seq_before, s.cursor_seq, k.trimmed_before) AS offset_lag
        FROM candidates k JOIN queen.consumer_stats s ON s.partition_id = k.id
    ), joined AS (
        SELECT cur.*, s.partition_id AS s_partition_id, s.consumer_group AS s_group, s.queue_id AS s_queue_id,
               s.cursor_seq AS s_cursor, coalesce(s.offset_lag, 0) AS s_offset_lag, s.has_lag AS s_has_lag,
               s.in_flight AS s_in_flight,
               s.lease_expires_at AS s_lease_expires_at, s.total_consumed AS s_total,
               s.last_consumed_at AS s_last_consumed_at, s.oldest_unconsumed_seq AS s_oldest_seq,
               s.oldest_unconsumed_at AS s_oldest_at
        FROM cur FULL JOIN known s
             ON s.partition_id = cur.partition_id AND s.consumer_group = cur.consumer_group
    ), removed AS (
        DELETE FROM queen.consumer_stats s USING joined j
        WHERE j.partition_id IS NULL AND s.partition_id = j.s_partition_id AND s.consumer_group = j.s_group
        RETURNING s.queue_id
    ), changed AS (  -- the rows to rewrite (a lag that grew, or shrank and stays above zero, is not a change)
        SELECT j.* FROM joined j
        WHERE j.partition_id IS NOT NULL
          AND (j.s_partition_id IS NULL
               OR (j.cursor, j.offset_lag > 0, least(j.in_flight, j.offset_lag), j.lease_expires_at,
                   j.total_messages_consumed, j.last_consumed_at)
                  IS DISTINCT FROM (j.s_cursor, j.s_has_lag, j.s_in_flight, j.s_lease_expires_at, j.s_total,
                                    j.s_last_consumed_at)
               -- the oldest unconsumed message is gone (trimmed), or was not found when the row was written
               OR (j.offset_lag > 0 AND (j.s_oldest_seq IS NULL OR j.s_oldest_seq <= j.trimmed)))
    ), probed AS (
        SELECT ch.*,
               CASE WHEN ch.offset_lag = 0 THEN NULL WHEN u.seq IS NOT NULL THEN u.seq ELSE ch.s_oldest_seq END
                   AS oldest_seq,
               CASE WHEN ch.offset_lag = 0 THEN NULL WHEN u.seq IS NOT NULL THEN u.created_at ELSE ch.s_oldest_at END
                   AS oldest_at
        FROM changed ch
        LEFT JOIN LATERAL (
            SELECT m.seq, m.created_at FROM queen.messages m
            WHERE m.partition_id = ch.partition_id AND m.seq > greatest(ch.cursor, ch.trimmed)
              AND ch.offset_lag > 0
              AND (ch.s_partition_id IS NULL OR ch.s_oldest_seq IS NULL OR NOT ch.s_has_lag
                   OR ch.cursor <> ch.s_cursor OR ch.s_oldest_seq <= ch.trimmed)
            ORDER BY m.seq LIMIT 1) u ON true
    ), written AS (
        INSERT INTO queen.consumer_stats AS s (partition_id, consumer_group, queue_id, cursor_seq, has_lag,
                                               in_flight, lease_expires_at, total_consumed, last_consumed_at,
                                               oldest_unconsumed_seq, oldest_unconsumed_at, computed_at)
        SELECT pr.partition_id, pr.consumer_group, pr.queue_id, pr.cursor, pr.offset_lag > 0,
               least(pr.in_flight, pr.offset_lag), pr.lease_expires_at, pr.total_messages_consumed,
               pr.last_consumed_at, pr.oldest_seq, pr.oldest_at, now()
        FROM probed pr
        ON CONFLICT (partition_id, consumer_group) DO UPDATE
        SET queue_id = EXCLUDED.queue_id, cursor_seq = EXCLUDED.cursor_seq, has_lag = EXCLUDED.has_lag,
            in_flight = EXCLUDED.in_flight, lease_expires_at = EXCLUDED.lease_expires_at,
            total_consumed = EXCLUDED.total_consumed, last_consumed_at = EXCLUDED.last_consumed_at,
            oldest_unconsumed_seq = EXCLUDED.oldest_unconsumed_seq,
            oldest_unconsumed_at = EXCLUDED.oldest_unconsumed_at, computed_at = EXCLUDED.computed_at
        RETURNING s.queue_id
    ), delta_rows AS (  -- what each row, rewritten or not, and each removed row adds to its (queue, group) sums
        SELECT j.queue_id, j.consumer_group, (j.s_partition_id IS NULL)::integer AS partitions,
               (j.offset_lag > 0)::integer - coalesce(j.s_has_lag, false)::integer AS with_lag,
               j.offset_lag - j.s_offset_lag AS lag,
               least(j.in_flight, j.offset_lag) - coalesce(j.s_in_flight, 0) AS in_flight,
               (j.lease_expires_at IS NOT NULL)::integer - (j.s_lease_expires_at IS NOT NULL)::integer AS leases,
               j.total_messages_consumed - coalesce(j.s_total, 0) AS total, j.last_consumed_at
        FROM joined j WHERE j.partition_id IS NOT NULL
        UNION ALL
        SELECT j.s_queue_id, j.s_group, -1, -j.s_has_lag::integer, -j.s_offset_lag, -j.s_in_flight,
               -(j.s_lease_expires_at IS NOT NULL)::integer, -j.s_total, NULL
        FROM joined j WHERE j.partition_id IS NULL
    ), deltas AS (
        SELECT d.queue_id, d.consumer_group, sum(d.partitions)::integer AS partitions,
               sum(d.with_lag)::integer AS with_lag, sum(d.lag)::bigint AS lag,
               sum(d.in_flight)::bigint AS in_flight, sum(d.leases)::integer AS leases,
               sum(d.total)::bigint AS total, max(d.last_consumed_at) AS last_consumed_at
        FROM delta_rows d GROUP BY d.queue_id, d.consumer_group
    )
    SELECT (SELECT count(*) FROM written),
           (SELECT array_agg(DISTINCT queue_id) FROM (SELECT queue_id FROM written UNION ALL
                                                      SELECT queue_id FROM removed) x),
           (SELECT jsonb_agg(d) FROM deltas d)
    INTO v_consumers, v_consumer_queues, v_group_deltas;

    -- 3. (queue, group) pairs. Exact runs re-aggregate every consumer row; the others add what step 2 changed
    -- to the sums (a pair's first row inserts it, its last removed row deletes it) and probe the oldest
    -- unconsumed time through consumer_stats_group_oldest_idx. Consumer rows a partition's deletion removed by
    -- cascade (partition cleanup: idle, no lag, no lease) leave their counts and totals in the sums until
    -- the pass ends. A lease counts as recorded by the run that last rewrote its row (a lease that expired
    -- since is a candidate of the next run).
    IF v_exact THEN
        WITH agg AS (
            SELECT cs.queue_id, cs.consumer_group, count(*)::integer AS partitions,
                   count(*) FILTER (WHERE cs.has_lag)::integer AS partitions_with_lag,
                   coalesce(sum(queen.offset_lag_of(ps.last_seq, cs.cursor_seq, ps.trimmed_seq)), 0)::bigint
                       AS offset_lag,
                   sum(cs.in_flight)::bigint AS in_flight,
                   count(cs.lease_expires_at)::integer AS leases,
                   sum(cs.total_consumed)::bigint AS total_consumed, max(cs.last_consumed_at) AS last_consumed_at,
                   min(cs.oldest_unconsumed_at) FILTER (WHERE cs.has_lag) AS oldest_unconsumed_at
            FROM queen.consumer_stats cs LEFT JOIN queen.partition_stats ps ON ps.partition_id = cs.partition_id
            GROUP BY cs.queue_id, cs.consumer_group
        ), written AS (
            INSERT INTO queen.queue_group_stats AS g (queue_id, consumer_group, partitions, partitions_with_lag,
                                                      offset_lag, in_flight, leases, total_consumed,
                                                      last_consumed_at, oldest_unconsumed_at, computed_at)
            SELECT a.queue_id, a.consumer_group, a.partitions, a.partitions_with_lag, a.offset_lag, a.in_flight,
                   a.leases, a.total_consumed, a.last_consumed_at, a.oldest_unconsumed_at, now()
            FROM agg a
            ON CONFLICT (queue_id, consumer_group) DO UPDATE
            SET partitions = EXCLUDED.partitions, partitions_with_lag = EXCLUDED.partitions_with_lag,
                offset_lag = EXCLUDED.offset_lag, in_flight = EXCLUDED.in_flight, leases = EXCLUDED.leases,
                total_consumed = EXCLUDED.total_consumed, last_consumed_at = EXCLUDED.last_consumed_at,
                oldest_unconsumed_at = EXCLUDED.oldest_unconsumed_at, computed_at = EXCLUDED.computed_at
            WHERE (g.partitions, g.partitions_with_lag, g.offset_lag, g.in_flight, g.leases, g.total_consumed,
                   g.last_consumed_at, g.oldest_unconsumed_at)
                  IS DISTINCT FROM
                  (EXCLUDED.partitions, EXCLUDED.partitions_with_lag, EXCLUDED.offset_lag, EXCLUDED.in_flight,
                   EXCLUDED.leases, EXCLUDED.total_consumed, EXCLUDED.last_consumed_at, EXCLUDED.oldest_unconsumed_at)
            RETURNING 1
        ), removed AS (
            DELETE FROM queen.queue_group_stats g
            WHERE NOT EXISTS (SELECT 1 FROM queen.consumer_stats cs
                              WHERE cs.queue_id = g.queue_id AND cs.consumer_group = g.consumer_group)
            RETURNING 1
        )
        SELECT (SELECT count(*) FROM written) + (SELECT count(*) FROM removed) INTO v_groups;
    ELSE
        WITH d AS (
            SELECT * FROM jsonb_to_recordset(coalesce(v_group_deltas, '[]'))
                AS x(queue_id uuid, consumer_group text, partitions integer, with_lag integer, lag bigint,
                     in_flight bigint, leases integer, total bigint, last_consumed_at timestamptz)
        ), probed AS (
            SELECT d.*, (SELECT cs.oldest_unconsumed_at FROM queen.consumer_stats cs
                         WHERE cs.queue_id = d.queue_id AND cs.consumer_group = d.consumer_group
                           AND cs.has_lag AND cs.oldest_unconsumed_at IS NOT NULL
                         ORDER BY cs.oldest_unconsumed_at LIMIT 1) AS oldest_unconsumed_at
            FROM d
        ), written AS (
            INSERT INTO queen.queue_group_stats AS g (queue_id, consumer_group, partitions, partitions_with_lag,
                                                      offset_lag, in_flight, leases, total_consumed,
                                                      last_consumed_at, oldest_unconsumed_at, computed_at)
            SELECT p.queue_id, p.consumer_group, p.partitions, p.with_lag, p.lag, p.in_flight, p.leases, p.total,
                   p.last_consumed_at, p.oldest_unconsumed_at, now()
            FROM probed p
            ON CONFLICT (queue_id, consumer_group) DO UPDATE
            SET partitions = g.partitions + EXCLUDED.partitions,
                partitions_with_lag = g.partitions_with_lag + EXCLUDED.partitions_with_lag,
                offset_lag = g.offset_lag + EXCLUDED.offset_lag, in_flight = g.in_flight + EXCLUDED.in_flight,
                leases = g.leases + EXCLUDED.leases, total_consumed = g.total_consumed + EXCLUDED.total_consumed,
                last_consumed_at = greatest(g.last_consumed_at, EXCLUDED.last_consumed_at),
                oldest_unconsumed_at = EXCLUDED.oldest_unconsumed_at, computed_at = EXCLUDED.computed_at
            WHERE (EXCLUDED.partitions, EXCLUDED.partitions_with_lag, EXCLUDED.offset_lag, EXCLUDED.in_flight,
                   EXCLUDED.leases, EXCLUDED.total_consumed) <> (0, 0, 0, 0, 0, 0)
               OR EXCLUDED.last_consumed_at > g.last_consumed_at
               OR (g.last_consumed_at IS NULL AND EXCLUDED.last_consumed_at IS NOT NULL)
               OR g.oldest_unconsumed_at IS DISTINCT FROM EXCLUDED.oldest_unconsumed_at
            RETURNING 1
        )
        SELECT count(*) INTO v_groups FROM written;
        DELETE FROM queen.queue_group_stats g
        USING jsonb_to_recordset(coalesce(v_group_deltas, '[]')) AS x(queue_id uuid, consumer_group text)
        WHERE g.queue_id = x.queue_id AND g.consumer_group = x.consumer_group AND g.partitions <= 0;
    END IF;

    -- 4. queues whose partitions or consumer rows changed (every queue when v_exact; new queues always), when
    -- p_aggregate is true, or NULL and the sweep ends (else they wait in the state's "queues"): their
    -- partition_stats summed; the consumer groups counted from queue_group_stats (step 3). The largest lag of
    -- the queue's consumer rows is the largest of its partitions' (those with a consumer row): a partition's
    -- largest offset_lag is its last_seq less the greater of its smallest cursor and its trimmed seq (step 2's
    -- offset_lag is monotone in the cursor), and steps 1 and 2 rewrite a partition's rows in the same run
    -- (migration 025).
    v_pending_queues := ARRAY(SELECT DISTINCT x FROM unnest(v_pending_queues || coalesce(v_changed_queues, '{}')
                                                        || coalesce(v_consumer_queues, '{}')) x);
    v_aggregate := coalesce(p_aggregate, v_sweep_after IS NULL) OR v_exact;
    IF NOT v_aggregate THEN
        v_queues := 0;
    ELSE
    v_aggregate_started := clock_timestamp();
    WITH targets AS (
        SELECT q.id FROM queen.queues q
        WHERE v_exact OR q.id = ANY (v_pending_queues)
           OR NOT EXISTS (SELECT 1 FROM queen.queue_stats x WHERE x.queue_id = q.id)
    ), agg AS (
        SELECT t.id AS queue_id, count(ps.partition_id)::integer AS partitions,
               coalesce(sum(ps.depth), 0)::bigint AS depth, coalesce(sum(ps.unconsumed), 0)::bigint AS unconsumed,
               coalesce(sum(ps.pending), 0)::bigint AS pending, coalesce(sum(ps.in_flight), 0)::bigint AS in_flight,
               coalesce(sum(ps.completed), 0)::bigint AS completed,
               coalesce(sum(ps.dead_letter), 0)::bigint AS dead_letter,
               coalesce(sum(ps.last_seq), 0)::bigint AS ingested_total,
               coalesce(sum(ps.consumed_total), 0)::bigint AS consumed_total,
               coalesce(sum(ps.messages_deleted), 0)::bigint AS deleted_total,
               coalesce(sum(ps.dead_lettered), 0)::bigint AS dead_lettered_total,
               min(ps.oldest_at) AS oldest_at, max(ps.newest_at) AS newest_at,
               min(ps.oldest_unconsumed_at) AS oldest_unconsumed_at,
               coalesce(max(queen.offset_lag_of(ps.last_seq, ps.min_cursor_seq, ps.trimmed_seq))
                            FILTER (WHERE ps.consumer_groups > 0), 0)::bigint AS max_offset_lag
        FROM targets t LEFT JOIN queen.partition_stats ps ON ps.queue_id = t.id
        GROUP BY t.id
    ), with_groups AS (
        SELECT a.*,
               (SELECT count(*) FROM queen.queue_group_stats g WHERE g.queue_id = a.queue_id)::integer
                   AS consumer_groups
        FROM agg a
    ), written AS (
        INSERT INTO queen.queue_stats AS qs (queue_id, partitions, depth, unconsumed, pending, in_flight, completed,
                                             dead_letter, consumer_groups, ingested_total, consumed_total,
                                             deleted_total, dead_lettered_total, max_offset_lag, oldest_at,
                                             newest_at, oldest_unconsumed_at, computed_at)
        SELECT w.queue_id, w.partitions, w.depth, w.unconsumed, w.pending, w.in_flight, w.completed, w.dead_letter,
               w.consumer_groups, w.ingested_total, w.consumed_total, w.deleted_total, w.dead_lettered_total,
               w.max_offset_lag, w.oldest_at, w.newest_at, w.oldest_unconsumed_at, now()
        FROM with_groups w
        ON CONFLICT (queue_id) DO UPDATE
        SET partitions = EXCLUDED.partitions, depth = EXCLUDED.depth, unconsumed = EXCLUDED.unconsumed,
            pending = EXCLUDED.pending, in_flight = EXCLUDED.in_flight, completed = EXCLUDED.completed,
            dead_letter = EXCLUDED.dead_letter, consumer_groups = EXCLUDED.consumer_groups,
            ingested_total = EXCLUDED.ingested_total, consumed_total = EXCLUDED.consumed_total,
            deleted_total = EXCLUDED.deleted_total, dead_lettered_total = EXCLUDED.dead_lettered_total,
            max_offset_lag = EXCLUDED.max_offset_lag, oldest_at = EXCLUDED.oldest_at,
            newest_at = EXCLUDED.newest_at, oldest_unconsumed_at = EXCLUDED.oldest_unconsumed_at,
            computed_at = EXCLUDED.computed_at
        WHERE (qs.partitions, qs.depth, qs.unconsumed, qs.pending, qs.in_flight, qs.completed, qs.dead_letter,
               qs.consumer_groups, qs.ingested_total, qs.consumed_total, qs.deleted_total, qs.dead_lettered_total,
               qs.max_offset_lag, qs.oldest_at, qs.newest_at, qs.oldest_unconsumed_at)
              IS DISTINCT FROM
              (EXCLUDED.partitions, EXCLUDED.depth, EXCLUDED.unconsumed, EXCLUDED.pending, EXCLUDED.in_flight,
               EXCLUDED.completed, EXCLUDED.dead_letter, EXCLUDED.consumer_groups, EXCLUDED.ingested_total,
               EXCLUDED.consumed_total, EXCLUDED.deleted_total, EXCLUDED.dead_lettered_total,
               EXCLUDED.max_offset_lag, EXCLUDED.oldest_at, EXCLUDED.newest_at, EXCLUDED.oldest_unconsumed_at)
        RETURNING 1
    )
    SELECT count(*) INTO v_queues FROM written;
    v_pending_queues := '{}';
    v_aggregate_ms := round((extract(epoch FROM clock_timestamp() - v_aggregate_started) * 1000)::numeric, 3);
    END IF;

    INSERT INTO queen.system_state (key, value, updated_at)
    VALUES ('stats_refresh',
            jsonb_strip_nulls(jsonb_build_object(
                'since', CASE WHEN v_sweep_after IS NULL THEN v_sweep_bound ELSE v_since END,
                'passAfter', v_after, 'sweepAfter', v_sweep_after,
                'sweepBound', CASE WHEN v_sweep_after IS NOT NULL THEN v_sweep_bound END,
                'queues', CASE WHEN cardinality(v_pending_queues) > 0 THEN to_jsonb(v_pending_queues) END)),
            now())
    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at;
    RETURN jsonb_build_object('partitions', v_partitions, 'consumers', v_consumers, 'queues', v_queues,
                              'groups', v_groups, 'candidates', cardinality(v_candidates), 'full', v_full,
                              'exact', v_exact, 'pass', v_pass, 'passAfter', v_after,
                              'sweepAfter', v_sweep_after, 'aggregated', v_aggregate,
                              'aggregateMs', v_aggregate_ms);
END;
$$;

-- Rows of queen.consumer_activity (migration 026) no one needs any more: no lease held (worker_id NULL) and
-- changed before the stats job's "since", so every sweep that had to see the change has taken it (the bound's
-- argument in stats_refresh_v4's header). Without this the table would grow to one row per consumer row ever
-- changed, and its indexes back to the size whose updates the migration took off the hot path. Oldest first,
-- p_limit rows at most (NULL: all); rows a pop or an ack holds locked are skipped, never waited for (they are
-- changing again). Its own short transaction (the stats job calls it after a sweep ends): the deleted rows
-- stay locked only for it. Returns the rows deleted.
CREATE OR REPLACE FUNCTION queen.consumer_activity_drain_v1(p_limit integer DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_since timestamptz;
    v_deleted integer;
BEGIN
    SELECT (s.value->>'since')::timestamptz INTO v_since FROM queen.system_state s WHERE s.key = 'stats_refresh';
    IF v_since IS NULL THEN
        RETURN 0;
    END IF;
    DELETE FROM queen.consumer_activity a
    WHERE a.consumer_id IN (SELECT x.consumer_id FROM queen.consumer_activity x
                            WHERE x.changed_at < v_since AND x.worker_id IS NULL
                            ORDER BY x.changed_at
                            LIMIT p_limit
                            FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    RETURN v_deleted;
END;
$$;
