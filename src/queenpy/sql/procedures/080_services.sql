-- Background services (migration 009 describes the tables): the triggers that keep the counters, retention
-- and eviction in bounded steps, partition cleanup, history trimming, the services' records. The stats job's
-- procedure is in 081_stats.sql.

-- Indexes for the deletes of retention and eviction. Deleting a message cascades to its traces and replays,
-- found by message_id, and deleting a trace to its names, found by trace_id; without these indexes every
-- deleted message scanned message_traces and replays whole (tests/integration/test_explain_services.py).
-- Here rather than in migration 009 (released before they were found); IF NOT EXISTS keeps it idempotent.
CREATE INDEX IF NOT EXISTS message_traces_message_id_idx ON queen.message_traces (message_id);
CREATE INDEX IF NOT EXISTS message_trace_names_trace_idx ON queen.message_trace_names (trace_id);
CREATE INDEX IF NOT EXISTS replays_message_idx ON queen.replays (message_id);

-- No foreign key from consumer_stats to partitions (migration 009 made one): the stats job inserts its rows, and
-- each insert's key check share-locked the partition row until the job's commit, in no particular order, while
-- pushes locked partition rows FOR UPDATE in id order: a push and the stats job deadlocked (soak run), and pushes
-- waited for the stats job. (Pushes now lock them FOR NO KEY UPDATE, which a key check does not wait for:
-- 020_push.sql.) The rows of a deleted partition go by the trigger below instead of a cascade.
ALTER TABLE queen.consumer_stats DROP CONSTRAINT IF EXISTS consumer_stats_partition_id_fkey;
-- Likewise partition_counters and partition_stats: PostgreSQL checks a foreign key again when a transaction
-- updates a row it already updated (a retention step moves a floor, then its delete trigger counts), and that
-- check share-locked the partition row: a retention step and a push deadlocked (soak run, server log).
ALTER TABLE queen.partition_counters DROP CONSTRAINT IF EXISTS partition_counters_partition_id_fkey;
ALTER TABLE queen.partition_stats DROP CONSTRAINT IF EXISTS partition_stats_partition_id_fkey;

-- The dead letters, traces and replays of a deleted message go with it, as before, but by one set-based delete
-- per deleting statement (queen.messages_deleted_v1) instead of the foreign keys' cascades, which ran three
-- queries per deleted row: a DELETE of messages cost 36-48 us per row with them, 2-3 us without (lab, under
-- load; retention deletes what producers push). Every writer of these tables reads the message first (ack,
-- DLQ replay, trace_record_v1) and every reader joins the message, so a row left by a writer racing a delete of
-- its message is never shown. Migration 009 was released before this was measured, hence here (idempotent).
ALTER TABLE queen.dead_letter_queue DROP CONSTRAINT IF EXISTS dead_letter_queue_message_id_fkey;
ALTER TABLE queen.message_traces DROP CONSTRAINT IF EXISTS message_traces_message_id_fkey;
ALTER TABLE queen.replays DROP CONSTRAINT IF EXISTS replays_message_id_fkey;

-- Counters -------------------------------------------------------------------------------------------------

-- A new partition gets its counters and stats rows in the creating statement (push, configure, SQL), so every
-- later writer updates a row that exists, and the stats job counts its messages from offset 0.
CREATE OR REPLACE FUNCTION queen.partitions_created_v1()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queen.partition_counters (partition_id)
    SELECT n.id FROM created n ORDER BY n.id
    ON CONFLICT (partition_id) DO NOTHING;
    INSERT INTO queen.partition_stats (partition_id, queue_id, last_seq, newest_at)
    SELECT n.id, n.queue_id, n.last_seq, n.last_message_at FROM created n ORDER BY n.id
    ON CONFLICT (partition_id) DO NOTHING;
    RETURN NULL;
END;
$$;

-- Every DELETE of messages, whoever runs it: their dead letters, traces and replays (through the message_id
-- indexes: enable_seqscan = off, as the plans of a trigger are made once per session; each table only when it
-- holds a row at all), the partitions' messages_deleted, the capped queues' stored count, and a
-- retention_history row per queue of type 'deleted' unless the deleting transaction set queen.deletion_kind
-- (the retention steps and partition cleanup write their own, typed history). A retention step (kind
-- retention, completed_retention or max_wait_time_eviction) counts messages_deleted itself, in the one update
-- that moves its floor (queen.retention_step_v1): a second update of the same partition_counters row here
-- doubled the step's WAL records and index entries (benchmarks/journal/2026-11.md, issue 44). Rows of a
-- partition deleted in the same transaction (a queue or partition deletion cascading) are not counted: their
-- counters go with them. Hash and merge joins are off: the transition table looks like 1,000 rows to the
-- planner, and a hash join read every partition_counters row for each deleting statement (100,000 at 100,000
-- partitions) where an index probe per touched partition is enough.
CREATE OR REPLACE FUNCTION queen.messages_deleted_v1()
RETURNS trigger
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    v_kind text := nullif(current_setting('queen.deletion_kind', true), '');
    v_counted boolean := coalesce(v_kind IN ('retention', 'completed_retention', 'max_wait_time_eviction'), false);
BEGIN
    IF EXISTS (SELECT 1 FROM queen.dead_letter_queue) THEN
        DELETE FROM queen.dead_letter_queue d WHERE d.message_id IN (SELECT g.id FROM gone g);
    END IF;
    IF EXISTS (SELECT 1 FROM queen.message_traces) THEN
        DELETE FROM queen.message_traces t WHERE t.message_id IN (SELECT g.id FROM gone g);
    END IF;
    IF EXISTS (SELECT 1 FROM queen.replays) THEN
        DELETE FROM queen.replays r WHERE r.message_id IN (SELECT g.id FROM gone g);
    END IF;
    WITH per_partition AS MATERIALIZED (
        SELECT a.partition_id, p.queue_id, a.n
        FROM (SELECT g.partition_id, count(*) AS n FROM gone g GROUP BY g.partition_id) a
        JOIN queen.partitions p ON p.id = a.partition_id
    ), counted AS (
        UPDATE queen.partition_counters c
        SET messages_deleted = c.messages_deleted + pp.n, updated_at = now()
        FROM per_partition pp
        WHERE c.partition_id = pp.partition_id AND NOT v_counted
        RETURNING 1
    ), capacity AS (
        UPDATE queen.queue_capacity qc
        SET stored = greatest(qc.stored - s.n, 0)
        FROM (SELECT queue_id, sum(n) AS n FROM per_partition GROUP BY queue_id) s
        WHERE qc.queue_id = s.queue_id
        RETURNING 1
    )
    INSERT INTO queen.retention_history (partition_id, queue_id, queue_name, partitions, messages_deleted,
                                         retention_type)
    SELECT CASE WHEN count(*) = 1 THEN (array_agg(pp.partition_id))[1] END, pp.queue_id, q.name, count(*),
           sum(pp.n), 'deleted'
    FROM per_partition pp JOIN queen.queues q ON q.id = pp.queue_id
    WHERE v_kind IS NULL
    GROUP BY pp.queue_id, q.name;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION queen.dead_letters_added_v1()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE queen.partition_counters c
    SET dlq_messages = c.dlq_messages + a.n, dead_lettered = c.dead_lettered + a.n, updated_at = now()
    FROM (SELECT partition_id, count(*) AS n FROM added GROUP BY partition_id) a
    WHERE c.partition_id = a.partition_id;
    RETURN NULL;
END;
$$;

-- A dead letter leaving the DLQ (replayed, or deleted) while its message stays: completed retention spared
-- the message, so its floor goes back below it, and the message goes once every group has consumed it.
CREATE OR REPLACE FUNCTION queen.dead_letters_removed_v1()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE queen.partition_counters c
    SET dlq_messages = greatest(c.dlq_messages - r.n, 0),
        completed_seq = least(c.completed_seq, coalesce(r.first_kept - 1, c.completed_seq)),
        updated_at = now()
    FROM (SELECT d.partition_id, count(*) AS n, min(m.seq) AS first_kept
          FROM removed d LEFT JOIN queen.messages m ON m.id = d.message_id
          GROUP BY d.partition_id) r
    WHERE c.partition_id = r.partition_id;
    RETURN NULL;
END;
$$;

-- Consumer rows deleted (a consumer group's deletion; not on any hot path): their partitions become candidates
-- of the next stats run, which drops the group's stats rows.
-- Their consumer_activity rows go with them.
CREATE OR REPLACE FUNCTION queen.consumers_removed_v1()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE queen.partition_counters c SET updated_at = now()
    WHERE c.partition_id IN (SELECT DISTINCT r.partition_id FROM removed r);
    DELETE FROM queen.consumer_activity a WHERE a.consumer_id IN (SELECT r.id FROM removed r);
    RETURN NULL;
END;
$$;

-- queen.consumer_activity (migration 026): a consumer row's lease and change time, written whenever rows are
-- created or updated, so that the rows' own updates touch no indexed column and can be HOT. Per statement
-- (transition table "changed"): a pop or an ack changes one row, the bench's bulk seed creates millions in one.
CREATE OR REPLACE FUNCTION queen.consumers_changed_v1()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queen.consumer_activity AS a (consumer_id, partition_id, worker_id, lease_expires_at, changed_at)
    SELECT n.id, n.partition_id, n.worker_id, n.lease_expires_at,
           greatest(n.last_consumed_at, n.lease_acquired_at, n.created_at, n.retry_available_at)
    FROM changed n
    ON CONFLICT (consumer_id) DO UPDATE
    SET worker_id = EXCLUDED.worker_id, lease_expires_at = EXCLUDED.lease_expires_at,
        changed_at = EXCLUDED.changed_at;
    RETURN NULL;
END;
$$;

-- TRUNCATE of the consumer rows (a TRUNCATE ... CASCADE of the partitions) empties it too.
CREATE OR REPLACE FUNCTION queen.consumers_truncated_v1()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE queen.consumer_activity;
    RETURN NULL;
END;
$$;

-- Partitions deleted (partition cleanup, a queue's deletion; never on a hot path): their counters and stats
-- rows go (no foreign key cascades them, see above).
CREATE OR REPLACE FUNCTION queen.partitions_removed_v1()
RETURNS trigger
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
BEGIN
    DELETE FROM queen.consumer_stats s WHERE s.partition_id IN (SELECT r.id FROM removed r);
    DELETE FROM queen.partition_stats s WHERE s.partition_id IN (SELECT r.id FROM removed r);
    DELETE FROM queen.partition_counters c WHERE c.partition_id IN (SELECT r.id FROM removed r);
    RETURN NULL;
END;
$$;

-- maxSize: the stored count of one queue, recomputed exactly: its partitions are share-locked first (a push in
-- flight commits before, the next waits), then the count row (a deleter in flight commits before), and the sum
-- is read by a later statement, which sees both. Lock order as in push_items_v2: partitions, then the count.
-- Costs one row per partition of the queue; run when a cap is set and by the stats job's reconcile.
CREATE OR REPLACE FUNCTION queen.recount_queue_capacity_v1(p_queue_id uuid)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_stored bigint;
BEGIN
    PERFORM 1 FROM queen.partitions p WHERE p.queue_id = p_queue_id ORDER BY p.id FOR SHARE;
    INSERT INTO queen.queue_capacity (queue_id) VALUES (p_queue_id) ON CONFLICT (queue_id) DO NOTHING;
    PERFORM 1 FROM queen.queue_capacity WHERE queue_id = p_queue_id FOR UPDATE;
    UPDATE queen.queue_capacity
    SET stored = (SELECT coalesce(sum(greatest(p.last_seq - c.messages_deleted, 0)), 0)
                  FROM queen.partitions p JOIN queen.partition_counters c ON c.partition_id = p.id
                  WHERE p.queue_id = p_queue_id),
        recounted_at = now()
    WHERE queue_id = p_queue_id
    RETURNING stored INTO v_stored;
    RETURN v_stored;
END;
$$;

CREATE OR REPLACE FUNCTION queen.queue_capacity_changed_v1()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.max_queue_size > 0 THEN
        IF TG_OP = 'INSERT' OR OLD.max_queue_size <= 0
           OR NOT EXISTS (SELECT 1 FROM queen.queue_capacity WHERE queue_id = NEW.id) THEN
            PERFORM queen.recount_queue_capacity_v1(NEW.id);
        END IF;
    ELSE
        DELETE FROM queen.queue_capacity WHERE queue_id = NEW.id;
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS partitions_created ON queen.partitions;
CREATE TRIGGER partitions_created AFTER INSERT ON queen.partitions
    REFERENCING NEW TABLE AS created FOR EACH STATEMENT EXECUTE FUNCTION queen.partitions_created_v1();
DROP TRIGGER IF EXISTS partitions_removed ON queen.partitions;
CREATE TRIGGER partitions_removed AFTER DELETE ON queen.partitions
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION queen.partitions_removed_v1();
DROP TRIGGER IF EXISTS messages_deleted ON queen.messages;
CREATE TRIGGER messages_deleted AFTER DELETE ON queen.messages
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION queen.messages_deleted_v1();
DROP TRIGGER IF EXISTS dead_letters_added ON queen.dead_letter_queue;
CREATE TRIGGER dead_letters_added AFTER INSERT ON queen.dead_letter_queue
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION queen.dead_letters_added_v1();
DROP TRIGGER IF EXISTS dead_letters_removed ON queen.dead_letter_queue;
CREATE TRIGGER dead_letters_removed AFTER DELETE ON queen.dead_letter_queue
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION queen.dead_letters_removed_v1();
DROP TRIGGER IF EXISTS consumers_removed ON queen.partition_consumers;
CREATE TRIGGER consumers_removed AFTER DELETE ON queen.partition_consumers
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION queen.consumers_removed_v1();
DROP TRIGGER IF EXISTS consumers_created ON queen.partition_consumers;
CREATE TRIGGER consumers_created AFTER INSERT ON queen.partition_consumers
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION queen.consumers_changed_v1();
DROP TRIGGER IF EXISTS consumers_updated ON queen.partition_consumers;
CREATE TRIGGER consumers_updated AFTER UPDATE ON queen.partition_consumers
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION queen.consumers_changed_v1();
DROP TRIGGER IF EXISTS consumers_truncated ON queen.partition_consumers;
CREATE TRIGGER consumers_truncated AFTER TRUNCATE ON queen.partition_consumers
    FOR EACH STATEMENT EXECUTE FUNCTION queen.consumers_truncated_v1();
DROP TRIGGER IF EXISTS queue_capacity_created ON queen.queues;
CREATE TRIGGER queue_capacity_created AFTER INSERT ON queen.queues
    FOR EACH ROW WHEN (NEW.max_queue_size > 0) EXECUTE FUNCTION queen.queue_capacity_changed_v1();
DROP TRIGGER IF EXISTS queue_capacity_changed ON queen.queues;
CREATE TRIGGER queue_capacity_changed AFTER UPDATE OF max_queue_size ON queen.queues
    FOR EACH ROW WHEN (OLD.max_queue_size IS DISTINCT FROM NEW.max_queue_size)
    EXECUTE FUNCTION queen.queue_capacity_changed_v1();

-- Retention and eviction ------------------------------------------------------------------------------------

-- Queues with work for one kind, each with the consumer groups that have a cursor on any of its partitions
-- (only for the kinds that read cursors). Kinds: 'retention' (retentionEnabled and retentionSeconds > 0),
-- 'completed_retention' (retentionEnabled and completedRetentionSeconds > 0), 'max_wait_time_eviction'
-- (maxWaitTimeSeconds > 0). Output [{"queueId", "queue", "groups": [...]}].
CREATE OR REPLACE FUNCTION queen.retention_queues_v1(p_kind text)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object(
        'queueId', q.id, 'queue', q.name,
        'groups', CASE WHEN p_kind = 'retention' THEN '[]'::jsonb ELSE coalesce((
            SELECT jsonb_agg(DISTINCT pc.consumer_group)
            FROM queen.partitions p JOIN queen.partition_consumers pc ON pc.partition_id = p.id
            WHERE p.queue_id = q.id), '[]'::jsonb) END) ORDER BY q.name), '[]'::jsonb)
    FROM queen.queues q
    WHERE CASE p_kind
              WHEN 'retention' THEN q.retention_enabled AND q.retention_seconds > 0
              WHEN 'completed_retention' THEN q.retention_enabled AND q.completed_retention_seconds > 0
              WHEN 'max_wait_time_eviction' THEN q.max_wait_time_seconds > 0
              ELSE false END
$$;

-- The end of the old run at the front of one partition's offsets (p_lo, p_hi]: the offset just before the first
-- message created at or after p_cutoff, or p_hi when there is none. Creation times grow with the offsets of a
-- partition (created_at is taken after the partition lock, queen.push_items_v3), so this is a search over
-- offsets: one probe of the newest message of the range (the common case of a backlog wholly past its
-- period: done), then a gallop from the front and a binary search (below), probes of the (partition_id, seq)
-- index each reading one message, instead of reading every message of the range (a step read each
-- partition's young messages on every run: five times what it deleted in the soak, with
-- completedRetentionSeconds 5 and a run a second).
-- Offsets without a message (deleted one by one) are skipped by the probes. If the clock stepped back, a young
-- message may sit before an old one; the caller's delete checks every message's time again and never deletes a
-- young one (queen.retention_step_v1).
-- Version 2: p_hi_at, the creation time of the message at p_hi when the caller knows it (the partition's
-- last_message_at, which a push writes with its messages' created_at, when p_hi is its last offset), stands
-- in for the probe of the newest: a heap page read per partition, a third of a step's time at a million
-- partitions (benchmarks/journal/2026-11.md, issue 44). NULL: probed, as version 1 (dropped) always did. A
-- wrong hint costs nothing but time: a message thought young stays for the next run, and one thought old is
-- checked again by the delete.
DROP FUNCTION IF EXISTS queen.retention_run_end_v1(uuid, bigint, bigint, timestamptz);
CREATE OR REPLACE FUNCTION queen.retention_run_end_v2(p_partition_id uuid, p_lo bigint, p_hi bigint,
                                                      p_cutoff timestamptz, p_hi_at timestamptz)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_old bigint := p_lo;  -- every message in (p_lo, v_old] is old
    v_young bigint;        -- a message at v_young is young; the answer is below it
    v_probe bigint;        -- the offset probed next
    v_galloping boolean := true;
    v_step bigint := 1;    -- the gallop's distance from p_lo
    v_seq bigint;
    v_at timestamptz;
BEGIN
    IF p_hi <= p_lo THEN
        RETURN p_lo;
    END IF;
    IF p_hi_at IS NOT NULL THEN
        v_seq := p_hi;
        v_at := p_hi_at;
    ELSE
        SELECT m.seq, m.created_at INTO v_seq, v_at FROM queen.messages m
        WHERE m.partition_id = p_partition_id AND m.seq > p_lo AND m.seq <= p_hi
        ORDER BY m.seq DESC LIMIT 1;
    END IF;
    IF v_seq IS NULL OR v_at < p_cutoff THEN
        RETURN p_hi;
    END IF;
    v_young := v_seq;
    -- gallop from the front (exponential search, Bentley and Yao 1976): the first message at or after p_lo + 1,
    -- 2, 4, ... until a young one (or none before v_young), then the binary search between the last two
    -- probes. After the probe of the newest, a run of k old messages takes about 2 log2(k) + 2 probes: two
    -- when one message aged past the period since the last run (the steady case), where the binary search
    -- alone took about log2(p_hi - p_lo), 3.6 on average over ten (benchmarks/journal/2026-11.md, issue 44)
    WHILE v_young - v_old > 1 LOOP
        -- galloping: the next power of two from p_lo, past v_old; else (or once that reaches v_young) halving
        v_probe := CASE WHEN v_galloping THEN greatest(p_lo + v_step, v_old + 1) END;
        IF v_probe IS NULL OR v_probe >= v_young THEN
            v_galloping := false;
            v_probe := v_old + (v_young - v_old) / 2;
        END IF;
        v_seq := NULL;
        SELECT m.seq, m.created_at INTO v_seq, v_at FROM queen.messages m
        WHERE m.partition_id = p_partition_id AND m.seq >= v_probe AND m.seq < v_young
        ORDER BY m.seq LIMIT 1;
        IF v_seq IS NULL THEN
            v_young := v_probe;  -- no message in [v_probe, v_young): the old run ends before v_probe all the same
            v_galloping := false;
        ELSIF v_at < p_cutoff THEN
            v_old := v_seq;
            v_step := v_step * 2;
        ELSE
            v_young := v_seq;
            v_galloping := false;
        END IF;
    END LOOP;
    RETURN v_young - 1;
END;
$$;

-- One bounded step of retention or eviction over the partitions of one queue: at most p_partitions
-- partitions looked at (in name order, from p_after) and at most p_batch offsets deleted, in one short
-- transaction. Only messages created before p_run_at minus the queue's period are deleted.
--
-- Per partition, the offsets that may go, (lo, hi]:
--   retention            (head_seq, hi], hi = the newest offset, or below any group's live lease
--   completed_retention  (max(head_seq, completed_seq), hi], hi also at most the slowest group's cursor;
--                        dead-lettered messages stay (the DLQ shows them until retentionSeconds removes them)
--   max_wait_time_eviction  (max(the floors, the slowest group's cursor), hi]: what some group has not
--                        consumed (every message when the partition has no cursor), never under a live lease
-- where a group's cursor is its offset minus any dead letter replayed to it (queen.replays), and the slowest
-- cursor counts every group of p_groups without a cursor on the partition at 0 (p_groups: the queue's
-- groups, queen.retention_queues_v1). A group holding a live lease keeps everything after its cursor.
-- Partition by partition, queen.retention_run_end_v2 finds where the run of old messages at the front ends
-- (a binary search: creation times grow with offsets), capped by what is left of p_batch; then one DELETE
-- reads those ranges through the (partition_id, seq) index and deletes their messages by row address (no
-- second index lookup per message), checking each message's time again: a young one in a range (possible only
-- if the clock stepped back) is kept, and its partition's floor stays below it. The floor of the kind
-- (head_seq, completed_seq, evicted_seq) moves to the end of the run, so the next step starts there without
-- walking the deleted entries again. No partition row is locked: pushes go on.
--
-- Returns {"deleted", "partitions" (touched), "next": partition name to go on from or null when the queue is
-- done, "inclusive": whether "next" itself still has work}. The caller writes nothing: this step writes
-- retention_history (one row per call with deletions) and the counters.
CREATE OR REPLACE FUNCTION queen.retention_step_v1(p_kind text, p_queue_id uuid, p_groups text[], p_after text,
                                                   p_inclusive boolean, p_partitions integer, p_batch integer,
                                                   p_run_at timestamptz)
RETURNS jsonb
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    v_queue queen.queues%ROWTYPE;
    v_seconds integer;
    v_cutoff timestamptz;
    v_left bigint := greatest(p_batch, 1);
    v_cap bigint;
    v_end bigint;
    v_looked integer := 0;
    v_last_name text;
    v_next text;
    v_inclusive boolean := false;
    v_ids uuid[] := '{}';
    v_los bigint[] := '{}';
    v_ends bigint[] := '{}';
    v_deleted integer := 0;
    v_touched integer := 0;
    v_dlq boolean;
    v_gone_ids uuid[];
    v_gone_counts bigint[];
    v_reached bigint[];  -- per range (v_ids' order): where its partition's floor moves to
    v_counts bigint[];   -- per range: the messages it deleted (its length until the lookup says otherwise)
    v_offsets bigint;    -- the offsets the ranges hold
    r record;
BEGIN
    IF p_kind NOT IN ('retention', 'completed_retention', 'max_wait_time_eviction') THEN
        RAISE EXCEPTION 'unknown retention kind %', p_kind USING ERRCODE = 'QN400';
    END IF;
    SELECT * INTO v_queue FROM queen.queues WHERE id = p_queue_id;
    v_seconds := CASE p_kind
        WHEN 'retention' THEN CASE WHEN v_queue.retention_enabled THEN v_queue.retention_seconds END
        WHEN 'completed_retention' THEN CASE WHEN v_queue.retention_enabled THEN v_queue.completed_retention_seconds END
        ELSE v_queue.max_wait_time_seconds END;
    IF coalesce(v_seconds, 0) <= 0 THEN
        RETURN jsonb_build_object('deleted', 0, 'partitions', 0, 'next', NULL, 'inclusive', false);
    END IF;
    v_cutoff := p_run_at - make_interval(secs => v_seconds);

    -- read as the loop goes (a cursor, 10 rows a fetch): partitions in name order from the index on (queue_id,
    -- name), each with its counters and cursors, so a step that spends its budget on the first partition
    -- reads no more than those (no CTE, no sort: nothing makes the whole window first)
    FOR r IN
        SELECT parts.id, parts.name, parts.last_seq, parts.last_message_at,
               CASE p_kind WHEN 'retention' THEN parts.head_seq
                           WHEN 'completed_retention' THEN greatest(parts.head_seq, parts.completed_seq)
                           ELSE greatest(parts.head_seq, parts.completed_seq, parts.evicted_seq, k.slowest) END AS lo,
               least(parts.last_seq, coalesce(k.leased, parts.last_seq),
                     CASE WHEN p_kind = 'completed_retention' THEN k.slowest ELSE parts.last_seq END) AS hi
        FROM (
            SELECT p.id, p.name, p.last_seq, p.last_message_at, c.head_seq, c.completed_seq, c.evicted_seq
            FROM queen.partitions p
            JOIN queen.partition_counters c ON c.partition_id = p.id
            WHERE p.queue_id = p_queue_id AND p.name >= p_after AND (p_inclusive OR p.name <> p_after)
            ORDER BY p.name
            LIMIT p_partitions
        ) parts
        CROSS JOIN LATERAL (
            SELECT CASE WHEN count(*) = 0
                             OR count(*) FILTER (WHERE pc.consumer_group = ANY (p_groups)) < cardinality(p_groups)
                        THEN 0 ELSE min(e.cursor) END AS slowest,
                   min(e.cursor) FILTER (WHERE pc.lease_expires_at > now()) AS leased
            FROM queen.partition_consumers pc
            CROSS JOIN LATERAL (
                SELECT least(pc.last_consumed_seq,
                             coalesce((SELECT min(rp.seq) - 1 FROM queen.replays rp
                                       WHERE rp.partition_id = pc.partition_id
                                         AND rp.consumer_group = pc.consumer_group), pc.last_consumed_seq)) AS cursor
            ) e
            WHERE pc.partition_id = parts.id) k
        ORDER BY parts.name
    LOOP
        IF v_left <= 0 THEN  -- the budget is spent: this partition may still hold work
            v_next := r.name;
            v_inclusive := true;
            EXIT;
        END IF;
        v_looked := v_looked + 1;
        v_last_name := r.name;
        CONTINUE WHEN r.lo >= r.hi;
        v_cap := least(r.hi, r.lo + v_left);
        v_end := queen.retention_run_end_v2(r.id, r.lo, v_cap, v_cutoff,
                                            CASE WHEN v_cap = r.last_seq THEN r.last_message_at END);
        IF v_end > r.lo THEN
            v_ids := v_ids || r.id;
            v_los := v_los || r.lo;
            v_ends := v_ends || v_end;
            v_left := v_left - (v_end - r.lo);
        END IF;
        IF v_end = v_cap AND v_cap < r.hi THEN  -- cut by the budget, not by a young message
            v_next := r.name;
            v_inclusive := true;
            EXIT;
        END IF;
    END LOOP;
    IF v_next IS NULL AND v_looked >= p_partitions THEN
        v_next := v_last_name;
    END IF;

    IF cardinality(v_ids) > 0 THEN
        PERFORM set_config('queen.deletion_kind', p_kind, true);  -- the delete trigger leaves the history to us
        v_dlq := p_kind = 'completed_retention' AND EXISTS (SELECT 1 FROM queen.dead_letter_queue);
        -- the old messages of each range: one index range scan per range finds them (OFFSET 0: never pulled
        -- up into a join that could scan the whole index instead), the delete goes by row address; a young
        -- one (the clock stepped back) stays, and under completed retention so does a dead letter's message
        -- (the DLQ is probed only when it holds a row at all; OFFSET 0: one probe per message, never a hash
        -- of the whole DLQ)
        WITH gone AS (
            DELETE FROM queen.messages m WHERE m.ctid = ANY (ARRAY(
                SELECT s.row_id
                FROM unnest(v_ids, v_los, v_ends) AS rg(partition_id, lo, run_end)
                CROSS JOIN LATERAL (
                    SELECT o.ctid AS row_id FROM queen.messages o
                    WHERE o.partition_id = rg.partition_id AND o.seq > rg.lo AND o.seq <= rg.run_end
                      AND o.created_at < v_cutoff
                      AND NOT (v_dlq AND EXISTS (SELECT 1 FROM queen.dead_letter_queue d
                                                 WHERE d.message_id = o.id OFFSET 0))
                    OFFSET 0) s))
            RETURNING m.partition_id
        )
        SELECT coalesce(array_agg(c.partition_id), '{}'), coalesce(array_agg(c.n), '{}'), coalesce(sum(c.n), 0),
               count(*)
        INTO v_gone_ids, v_gone_counts, v_deleted, v_touched
        FROM (SELECT g.partition_id, count(*) AS n FROM gone g GROUP BY g.partition_id) c;
        -- a range whose every offset was deleted ends the run at its end; otherwise (offsets deleted before,
        -- dead letters kept, a young message) the floor stays below its first young message, if any. Each
        -- range deletes at most one message an offset, so when the step deleted as many messages as its
        -- ranges hold offsets, every range was deleted whole (the common case) and its count is its length;
        -- only otherwise is each range's count looked up in the deleted ones (a nested loop over the step's
        -- partitions, as the function's joins are)
        SELECT array_agg(z.run_end - z.lo ORDER BY z.i), sum(z.run_end - z.lo) INTO v_counts, v_offsets
        FROM unnest(v_los, v_ends) WITH ORDINALITY AS z(lo, run_end, i);
        IF v_deleted = v_offsets THEN
            v_reached := v_ends;
        ELSE
            SELECT array_agg(x.reached ORDER BY x.i), array_agg(x.n ORDER BY x.i) INTO v_reached, v_counts
            FROM (
                SELECT rg.i, k.n,
                       CASE WHEN k.n = rg.run_end - rg.lo THEN rg.run_end
                            ELSE coalesce((SELECT min(m.seq) - 1 FROM queen.messages m
                                           WHERE m.partition_id = rg.partition_id AND m.seq > rg.lo
                                             AND m.seq <= rg.run_end AND m.created_at >= v_cutoff), rg.run_end)
                       END AS reached
                FROM unnest(v_ids, v_los, v_ends) WITH ORDINALITY AS rg(partition_id, lo, run_end, i)
                CROSS JOIN LATERAL (
                    SELECT coalesce((SELECT y.n FROM unnest(v_gone_ids, v_gone_counts) AS y(partition_id, n)
                                     WHERE y.partition_id = rg.partition_id), 0) AS n) k
            ) x;
        END IF;
        -- one update a partition: the floor of the kind moves to the end of its run, and messages_deleted
        -- counts what went (the delete trigger leaves it to this step: queen.messages_deleted_v1)
        UPDATE queen.partition_counters c
        SET head_seq = CASE WHEN p_kind = 'retention' THEN greatest(c.head_seq, u.reached) ELSE c.head_seq END,
            completed_seq = CASE WHEN p_kind = 'completed_retention' THEN greatest(c.completed_seq, u.reached)
                                 ELSE c.completed_seq END,
            evicted_seq = CASE WHEN p_kind = 'max_wait_time_eviction' THEN greatest(c.evicted_seq, u.reached)
                               ELSE c.evicted_seq END,
            messages_deleted = c.messages_deleted + u.n,
            updated_at = now()
        FROM unnest(v_ids, v_reached, v_counts) AS u(partition_id, reached, n)
        WHERE c.partition_id = u.partition_id;
        INSERT INTO queen.retention_history (partition_id, queue_id, queue_name, partitions, messages_deleted,
                                             retention_type)
        SELECT CASE WHEN count(*) = 1 THEN (array_agg(c.partition_id))[1] END,
               p_queue_id, v_queue.name, count(*), sum(c.n), p_kind
        FROM unnest(v_gone_ids, v_gone_counts) AS c(partition_id, n)
        HAVING count(*) > 0;
        PERFORM set_config('queen.deletion_kind', '', true);
    END IF;
    RETURN jsonb_build_object('deleted', v_deleted, 'partitions', v_touched, 'next', v_next,
                              'inclusive', v_inclusive);
END;
$$;

-- Partition cleanup: at most p_limit partitions with no message, created and last pushed to before the idle
-- cutoff, whose consumer rows (if any) hold no live lease and saw no activity since then, are deleted with
-- their consumer rows (cascade). Candidates are found through indexes (below); each is checked by an index
-- probe of messages, and locked with SKIP LOCKED, so a partition a push is writing to is left alone; a push that finds its partition gone when it locks creates it again
-- (push_items_v2). One retention_history row per queue.
-- Known limit: a pop that creates a group's first consumer row on a partition at the moment this deletes it
-- (the partition idle and empty for PARTITION_CLEANUP_DAYS) waits for the delete and then fails its foreign
-- key check; that pop call answers a database error and the client retries (pop_v2 is not changed here).
-- enable_seqscan = off also holds for the cascades of the deletes (the foreign keys' own queries, planned
-- once per session): planned while dead_letter_queue or replays was small, they scanned the whole table for
-- every deleted partition (tests/integration/test_explain_services.py).
-- The deleted partitions' counters and stats rows go with them (queen.partitions_removed_v1), so what the
-- stats job has not yet recorded into queue_throughput is recorded here first, in the same statement: the
-- growth of their offsets, dead letters and deletions since their partition_stats rows (the deletions of the
-- retention step that just emptied a partition, above all). Their consumed totals are not read again: the
-- consumer rows saw no consumption since the cutoff, so a stats run since then recorded it. The stats job's
-- lock (stats_refresh_v4) is taken first: a run in flight commits its rows before they are read, and none
-- starts until this commits, so nothing is recorded twice or lost.
-- Version 2: the candidates are read through indexes. Version 1 (dropped) walked every partition of every
-- queue in each step (no index on last_activity), so a step's cost grew with the partitions stored: about 2 s
-- a step at a million (benchmarks/journal/2026-11.md, issue 44). Every push sets last_message_at and
-- last_activity to the same time, so an idle partition that held messages has its newest before the cutoff
-- (partitions_queue_last_message_idx, per queue), and one that never held any is in partitions_never_pushed_idx
-- (migration 020). A step reads the old partitions, not all of them: partitions whose newest message is old
-- but that still hold messages are probed again by each step (one index probe each).
-- Version 3: each candidate is looked up by its id from the candidates (a LATERAL subquery that also locks).
-- Version 2 (dropped) joined the candidates to partitions, and when the statistics predated the idle
-- partitions (a bulk of them created since the last ANALYZE) the planner drove the join from
-- partitions_activity_idx instead: every partition idle since the cutoff, each probed, for each candidate.
-- One step took 24 s at 100,000 idle partitions and hit the statement timeout
-- (tests/integration/test_explain_services.py; benchmarks/journal/2026-11.md, issue 44).
DROP FUNCTION IF EXISTS queen.partition_cleanup_v1(double precision, integer);
DROP FUNCTION IF EXISTS queen.partition_cleanup_v2(double precision, integer);
CREATE OR REPLACE FUNCTION queen.partition_cleanup_v3(p_idle_seconds double precision, p_limit integer)
RETURNS jsonb
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
    v_cutoff timestamptz := now() - make_interval(secs => p_idle_seconds);
    v_deleted integer;
BEGIN
    PERFORM set_config('queen.deletion_kind', 'partition_cleanup', true);
    PERFORM pg_advisory_xact_lock(737013);  -- the stats job's (081_stats.sql)
    WITH candidates AS (
        -- partitions that held messages, the newest before the cutoff (per queue, by its scan index)
        SELECT o.id FROM queen.queues q
        CROSS JOIN LATERAL (SELECT p.id FROM queen.partitions p
                            WHERE p.queue_id = q.id AND p.last_message_at < v_cutoff) o
        UNION ALL
        -- partitions that never held one (partitions_never_pushed_idx)
        SELECT p.id FROM queen.partitions p WHERE p.last_message_at IS NULL AND p.last_activity < v_cutoff
    ), doomed AS (
        -- each candidate's row by its id (LATERAL: the candidates drive, whatever the statistics say), checked
        -- and locked, until p_limit are taken
        SELECT l.id FROM candidates c
        CROSS JOIN LATERAL (
            SELECT p.id FROM queen.partitions p
            WHERE p.id = c.id AND p.last_activity < v_cutoff AND p.created_at < v_cutoff
              -- scalar subqueries, not NOT EXISTS: probes per candidate, never an anti-join over a whole table
              AND (SELECT m.seq FROM queen.messages m WHERE m.partition_id = p.id LIMIT 1) IS NULL
              AND (SELECT true FROM queen.partition_consumers pc
                   WHERE pc.partition_id = p.id
                     AND (pc.lease_expires_at > now() OR pc.created_at >= v_cutoff
                          OR pc.last_consumed_at >= v_cutoff OR pc.lease_acquired_at >= v_cutoff)
                   LIMIT 1) IS NULL
            FOR UPDATE OF p SKIP LOCKED) l
        LIMIT p_limit
    ), unrecorded AS (
        SELECT p.queue_id, greatest(p.last_seq - coalesce(s.last_seq, 0), 0) AS ingested,
               greatest(coalesce(c.dead_lettered, 0) - coalesce(s.dead_lettered, 0), 0) AS dead_lettered,
               greatest(coalesce(c.messages_deleted, 0) - coalesce(s.messages_deleted, 0), 0) AS deleted
        FROM doomed d
        JOIN queen.partitions p ON p.id = d.id
        LEFT JOIN queen.partition_counters c ON c.partition_id = d.id
        LEFT JOIN queen.partition_stats s ON s.partition_id = d.id
    ), recorded AS (
        INSERT INTO queen.queue_throughput AS t (queue_id, bucket, ingested, processed, dead_lettered, deleted)
        SELECT u.queue_id, date_trunc('minute', now()), sum(u.ingested), 0, sum(u.dead_lettered), sum(u.deleted)
        FROM unrecorded u
        GROUP BY u.queue_id
        HAVING sum(u.ingested) + sum(u.dead_lettered) + sum(u.deleted) > 0
        ON CONFLICT (queue_id, bucket) DO UPDATE
        SET ingested = t.ingested + EXCLUDED.ingested, dead_lettered = t.dead_lettered + EXCLUDED.dead_lettered,
            deleted = t.deleted + EXCLUDED.deleted
        RETURNING 1
    ), gone AS (
        DELETE FROM queen.partitions p USING doomed d WHERE p.id = d.id
        RETURNING p.id, p.queue_id
    ), history AS (
        INSERT INTO queen.retention_history (partition_id, queue_id, queue_name, partitions, messages_deleted,
                                             retention_type)
        SELECT CASE WHEN count(*) = 1 THEN (array_agg(g.id))[1] END, g.queue_id, q.name, count(*), 0,
               'partition_cleanup'
        FROM gone g JOIN queen.queues q ON q.id = g.queue_id
        GROUP BY g.queue_id, q.name
        RETURNING 1
    )
    SELECT count(*) INTO v_deleted FROM gone;
    PERFORM set_config('queen.deletion_kind', '', true);
    RETURN jsonb_build_object('partitions', v_deleted);
END;
$$;

-- History trimming: at most p_limit rows of each table, older than its cutoff, through each table's time index
-- (then by row address). METRICS_RETENTION_DAYS: retention_history, messages_consumed, system_metrics,
-- worker_metrics, queue_lag_metrics, service_runs; STATS_HISTORY_RETENTION_DAYS: queue_throughput.
-- Returns {"<table>": rows deleted}; the caller repeats while any table reached p_limit.
-- enable_seqscan = off: with half a table older than the cutoff, "LIMIT n" looked cheap by a sequential scan,
-- which then read the young half first (rows are stored in time order).
CREATE OR REPLACE FUNCTION queen.trim_history_v1(p_metrics_before timestamptz, p_stats_before timestamptz,
                                                 p_limit integer)
RETURNS jsonb
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
    v_result jsonb := '{}'::jsonb;
    v_n integer;
BEGIN
    DELETE FROM queen.retention_history WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM queen.retention_history WHERE executed_at < p_metrics_before LIMIT p_limit));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_result := v_result || jsonb_build_object('retention_history', v_n);
    DELETE FROM queen.messages_consumed WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM queen.messages_consumed WHERE acked_at < p_metrics_before LIMIT p_limit));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_result := v_result || jsonb_build_object('messages_consumed', v_n);
    DELETE FROM queen.system_metrics WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM queen.system_metrics WHERE sampled_at < p_metrics_before LIMIT p_limit));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_result := v_result || jsonb_build_object('system_metrics', v_n);
    DELETE FROM queen.worker_metrics WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM queen.worker_metrics WHERE sampled_at < p_metrics_before LIMIT p_limit));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_result := v_result || jsonb_build_object('worker_metrics', v_n);
    DELETE FROM queen.queue_lag_metrics WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM queen.queue_lag_metrics WHERE bucket_time < p_metrics_before LIMIT p_limit));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_result := v_result || jsonb_build_object('queue_lag_metrics', v_n);
    DELETE FROM queen.service_runs WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM queen.service_runs WHERE started_at < p_metrics_before LIMIT p_limit));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_result := v_result || jsonb_build_object('service_runs', v_n);
    DELETE FROM queen.queue_throughput WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM queen.queue_throughput WHERE bucket < p_stats_before LIMIT p_limit));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_result := v_result || jsonb_build_object('queue_throughput', v_n);
    RETURN v_result;
END;
$$;

-- Services --------------------------------------------------------------------------------------------------

-- A process took a job's advisory lock (src/queenpy/services): it is the job's holder from now on.
CREATE OR REPLACE FUNCTION queen.service_acquired_v1(p_job text, p_holder text)
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO queen.service_status (job, holder, holder_since, updated_at)
    VALUES (p_job, p_holder, now(), now())
    ON CONFLICT (job) DO UPDATE SET holder = EXCLUDED.holder, holder_since = now(), updated_at = now()
$$;

-- One finished run of a job: its status row and the run log.
CREATE OR REPLACE FUNCTION queen.service_record_v1(p_job text, p_holder text, p_started_at timestamptz,
                                                   p_finished_at timestamptz, p_rows bigint, p_error text,
                                                   p_details jsonb)
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO queen.service_runs (job, holder, started_at, finished_at, rows, error, details)
    VALUES (p_job, p_holder, p_started_at, p_finished_at, p_rows, p_error, p_details);
    INSERT INTO queen.service_status AS s (job, holder, holder_since, last_started_at, last_finished_at,
                                           last_duration_ms, last_rows, last_error, last_details, runs, errors,
                                           rows_total, updated_at)
    VALUES (p_job, p_holder, p_started_at, p_started_at, p_finished_at,
            extract(epoch FROM p_finished_at - p_started_at) * 1000, p_rows, p_error, p_details, 1,
            CASE WHEN p_error IS NULL THEN 0 ELSE 1 END, p_rows, now())
    ON CONFLICT (job) DO UPDATE
    SET holder = EXCLUDED.holder,
        holder_since = CASE WHEN s.holder IS DISTINCT FROM EXCLUDED.holder THEN EXCLUDED.holder_since
                            ELSE s.holder_since END,
        last_started_at = EXCLUDED.last_started_at, last_finished_at = EXCLUDED.last_finished_at,
        last_duration_ms = EXCLUDED.last_duration_ms, last_rows = EXCLUDED.last_rows,
        last_error = EXCLUDED.last_error, last_details = EXCLUDED.last_details, runs = s.runs + 1,
        errors = s.errors + EXCLUDED.errors, rows_total = s.rows_total + EXCLUDED.rows_total, updated_at = now()
$$;

-- {"<job>": {holder, holderSince, lastStartedAt, lastFinishedAt, lastDurationMs, lastRows, lastError,
-- lastDetails, runs, errors, rowsTotal}} for /health and the operators' API.
CREATE OR REPLACE FUNCTION queen.services_status_v1()
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_object_agg(s.job, jsonb_build_object(
        'holder', s.holder, 'holderSince', queen.iso_ms(s.holder_since),
        'lastStartedAt', queen.iso_ms(s.last_started_at), 'lastFinishedAt', queen.iso_ms(s.last_finished_at),
        'lastDurationMs', round(s.last_duration_ms::numeric, 3), 'lastRows', s.last_rows,
        'lastError', s.last_error, 'lastDetails', s.last_details, 'runs', s.runs, 'errors', s.errors,
        'rowsTotal', s.rows_total)), '{}'::jsonb)
    FROM queen.service_status s
$$;

-- Ids of the queues with a maxSize (the stats job's reconcile recounts their stored counts one by one).
CREATE OR REPLACE FUNCTION queen.capped_queues_v1()
RETURNS uuid[]
LANGUAGE sql STABLE AS $$
    SELECT coalesce(array_agg(q.id ORDER BY q.id), '{}') FROM queen.queues q WHERE q.max_queue_size > 0
$$;

-- Whether an operator paused the services everywhere: system_state 'services' = {"paused": true}. Kept for
-- brokers of an earlier version during a rolling upgrade; services_paused_v2 reads a list of jobs too.
CREATE OR REPLACE FUNCTION queen.services_paused_v1()
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT (s.value->>'paused')::boolean FROM queen.system_state s WHERE s.key = 'services'),
                    false)
$$;

-- Whether an operator paused the job p_job everywhere: system_state 'services' = {"paused": true} pauses every
-- job, {"paused": ["retention", ...]} the jobs named. A paused job skips its runs (the process keeps its lock),
-- and a run under way holds before its next step; the soak and scale benchmarks compare the hot path with and
-- without a job this way.
CREATE OR REPLACE FUNCTION queen.services_paused_v2(p_job text)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT CASE jsonb_typeof(s.value->'paused')
                                WHEN 'boolean' THEN (s.value->>'paused')::boolean
                                WHEN 'array' THEN (s.value->'paused') ? p_job
                                ELSE false
                            END
                     FROM queen.system_state s WHERE s.key = 'services'), false)
$$;
