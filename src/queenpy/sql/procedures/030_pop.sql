-- Pop: leases on (partition, consumer group), cursors by offset, subscription modes (API.md sections 5 and 8.2).
--
-- queen.pop_v2(requests jsonb) -> json: one result per request, in request order. A request is
--   {"index", "queue", "partition": str|null (null = wildcard), "consumerGroup", "batch", "autoAck",
--    "partitions" (max partitions claimed by a wildcard pop), "subscriptionMode", "subscriptionFrom"}
-- Requests are validated by the broker before fusion, so one request cannot make the call fail.
-- The result is built as json (text), not jsonb: the broker parses it anyway, and jsonb's tree building, key
-- sorting and re-serialisation cost PostgreSQL about 5 us per delivered message (queen.message_json_v2).
-- queen.pop_v1 is the same call returning jsonb, for SQL callers.

DROP FUNCTION IF EXISTS queen.pop_one_v1(jsonb);
DROP FUNCTION IF EXISTS queen.claim_partition_v1(queen.queues, uuid, text, text, integer, boolean, text, text, text,
                                                 boolean);

DROP FUNCTION IF EXISTS queen.seed_cursor_v1(queen.queues, uuid, text, text, text, text, boolean);

-- Where a group's cursor starts the first time it meets a partition (never called for queue mode): the offset,
-- id and creation time of the last message before the subscription point; (0, NULL, NULL) means from the
-- beginning. Records the group's subscription on its first join and, in 'new' mode, starts the cursors of the
-- queue's other partitions at their heads. It does not write this partition's cursor: the caller does, in the
-- same statement that takes the lease or moves the cursor.
CREATE OR REPLACE FUNCTION queen.seed_cursor_v2(
    p_queue queen.queues, p_partition_id uuid, p_partition_name text, p_group text,
    p_mode text, p_from text, p_specific boolean,
    OUT o_seq bigint, OUT o_id uuid, OUT o_created_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v_ts timestamptz;
    v_meta record;
BEGIN
    o_seq := 0;
    SELECT * INTO v_meta FROM queen.consumer_groups_metadata md
    WHERE md.consumer_group = p_group AND md.queue_name = p_queue.name
      AND md.partition_name IN (p_partition_name, '') AND md.namespace = '' AND md.task = ''
    ORDER BY (md.partition_name = p_partition_name) DESC
    LIMIT 1;

    IF FOUND THEN                                   -- first join wins forever
        IF v_meta.subscription_timestamp IS NULL THEN
            RETURN;
        END IF;
        v_ts := v_meta.subscription_timestamp;
    ELSIF p_from <> '' AND p_from <> 'now' THEN
        BEGIN
            v_ts := p_from::timestamptz;
        EXCEPTION WHEN others THEN
            RETURN;                                 -- unparseable: from the beginning (as the original)
        END;
        INSERT INTO queen.consumer_groups_metadata
            (consumer_group, queue_name, partition_name, subscription_mode, subscription_timestamp)
        VALUES (p_group, p_queue.name, CASE WHEN p_specific THEN p_partition_name ELSE '' END, 'timestamp', v_ts)
        ON CONFLICT DO NOTHING;
    ELSIF p_from = 'now' OR p_mode IN ('new', 'new-only') THEN
        INSERT INTO queen.consumer_groups_metadata
            (consumer_group, queue_name, partition_name, subscription_mode, subscription_timestamp)
        VALUES (p_group, p_queue.name, CASE WHEN p_specific THEN p_partition_name ELSE '' END, 'new', now())
        ON CONFLICT DO NOTHING;
        IF NOT p_specific THEN
            -- every other partition starts at its head too, so the wildcard scan skips them at once
            INSERT INTO queen.partition_consumers
                (partition_id, consumer_group, last_consumed_seq, last_consumed_id, last_consumed_created_at)
            SELECT p.id, p_group, p.last_seq, p.last_message_id, p.last_message_at
            FROM queen.partitions p
            WHERE p.queue_id = p_queue.id AND p.last_seq > 0 AND p.id <> p_partition_id
            ON CONFLICT DO NOTHING;
        END IF;
        SELECT p.last_seq, p.last_message_id, p.last_message_at INTO o_seq, o_id, o_created_at
        FROM queen.partitions p WHERE p.id = p_partition_id;
        RETURN;
    ELSE
        RETURN;
    END IF;

    SELECT m.seq, m.id, m.created_at INTO o_seq, o_id, o_created_at
    FROM queen.messages m
    WHERE m.partition_id = p_partition_id AND m.created_at < v_ts
    ORDER BY m.seq DESC
    LIMIT 1;
    o_seq := coalesce(o_seq, 0);
END;
$$;

-- JSON arrays joined in order into one array (json has no || operator). Only for the rare joins: a batch
-- that starts with replayed dead letters, a pop over several partitions.
CREATE OR REPLACE FUNCTION queen.json_concat_v1(p_arrays json[])
RETURNS json
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(json_agg(e ORDER BY a, n), '[]'::json)
    FROM unnest(p_arrays) WITH ORDINALITY u(arr, a), json_array_elements(u.arr) WITH ORDINALITY t(e, n)
$$;

-- A queue's lease time as an interval (60 s when the queue has none).
CREATE OR REPLACE FUNCTION queen.lease_interval_v1(p_queue queen.queues)
RETURNS interval
LANGUAGE sql IMMUTABLE AS $$
    SELECT make_interval(secs => CASE WHEN p_queue.lease_time <= 0 THEN 60 ELSE p_queue.lease_time END)
$$;

-- Try to lease one partition for a group and read up to p_limit messages after its cursor.
-- OUT: o_status 'claimed'|'empty'|'lease_held'|'busy', o_count messages, o_messages their json array
-- (NULL with lease_held and busy).
--
-- The group's cursor row is locked with FOR UPDATE (SKIP LOCKED for a wildcard pop: a row another pop holds
-- is skipped, not waited for; an INSERT ... ON CONFLICT on an existing row would wait instead). A group meeting
-- the partition for the first time has no row: the claim inserts it at its end, already in its final state
-- (cursor, lease), under a transaction-level advisory lock on (partition, group) that every pop creating that
-- row takes first. One INSERT instead of INSERT + lock + UPDATE: one row version, one foreign-key check; over
-- 10,000 partitions most pops meet a partition for the first time. A writer that creates the row without the
-- advisory lock (an ack, a seek, a 'new'-mode subscription) makes the final INSERT meet a conflict (waiting
-- for that writer's commit if need be): the claim then answers 'busy' having changed nothing.
CREATE OR REPLACE FUNCTION queen.claim_partition_v2(
    p_queue queen.queues, p_partition_id uuid, p_partition_name text, p_group text, p_limit integer,
    p_auto_ack boolean, p_lease_id text, p_mode text, p_from text, p_specific boolean,
    OUT o_status text, OUT o_count integer, OUT o_messages json)
LANGUAGE plpgsql AS $$
DECLARE
    v_pc queen.partition_consumers%ROWTYPE;
    v_new boolean := false;    -- no cursor row yet: inserted at the end
    v_seeded boolean := false; -- the cursor was positioned by the subscription (seed_cursor_v2)
    v_cursor bigint;           -- the cursor: offset, id and creation time of the last consumed message
    v_cursor_id uuid;
    v_cursor_created timestamptz;
    v_seed record;
    v_last_seq bigint;
    v_last queen.messages%ROWTYPE;
    v_replayed json;
    v_replay_seqs bigint[];
    v_replay_count integer;
BEGIN
    o_count := 0;
    FOR attempt IN 1..2 LOOP
        IF p_specific THEN
            SELECT * INTO v_pc FROM queen.partition_consumers
            WHERE partition_id = p_partition_id AND consumer_group = p_group FOR UPDATE;
        ELSE
            SELECT * INTO v_pc FROM queen.partition_consumers
            WHERE partition_id = p_partition_id AND consumer_group = p_group FOR UPDATE SKIP LOCKED;
        END IF;
        EXIT WHEN FOUND;
        IF EXISTS (SELECT 1 FROM queen.partition_consumers
                   WHERE partition_id = p_partition_id AND consumer_group = p_group) THEN
            o_status := 'busy';  -- locked by a concurrent pop
            RETURN;
        END IF;
        IF attempt = 2 THEN
            v_new := true;
            EXIT;
        END IF;
        -- the right to create the row; then one more look, since a pop that created it may have committed
        -- before the lock was ours (a wildcard pop skips a row another pop is creating right now)
        IF p_specific THEN
            PERFORM pg_advisory_xact_lock(hashtextextended(p_partition_id::text || '/' || p_group, 737));
        ELSIF NOT pg_try_advisory_xact_lock(hashtextextended(p_partition_id::text || '/' || p_group, 737)) THEN
            o_status := 'busy';
            RETURN;
        END IF;
    END LOOP;

    IF v_pc.lease_expires_at IS NOT NULL AND v_pc.lease_expires_at > now() THEN
        o_status := 'lease_held';
        RETURN;
    END IF;
    IF v_pc.retry_available_at IS NOT NULL AND v_pc.retry_available_at > now() THEN
        o_status := 'empty';
        o_messages := '[]'::json;
        RETURN;
    END IF;

    v_cursor := coalesce(v_pc.last_consumed_seq, 0);
    v_cursor_id := v_pc.last_consumed_id;
    v_cursor_created := v_pc.last_consumed_created_at;
    IF p_group <> '__QUEUE_MODE__' AND (v_new OR (v_pc.last_consumed_created_at IS NULL
                                                  AND v_pc.last_consumed_seq = 0
                                                  AND v_pc.total_messages_consumed = 0)) THEN
        v_seed := queen.seed_cursor_v2(p_queue, p_partition_id, p_partition_name, p_group, p_mode, p_from,
                                       p_specific);
        IF v_seed.o_seq > 0 THEN
            v_seeded := true;
            v_cursor := v_seed.o_seq;
            v_cursor_id := v_seed.o_id;
            v_cursor_created := v_seed.o_created_at;
        END IF;
    END IF;

    -- replayed dead letters come first, then the messages after the cursor
    SELECT json_agg(queen.message_json_v2(m, p_partition_name, p_lease_id, p_group) ORDER BY m.seq),
           array_agg(m.seq), count(*)
    INTO v_replayed, v_replay_seqs, v_replay_count
    FROM (SELECT m.* FROM queen.replays r JOIN queen.messages m ON m.id = r.message_id
          WHERE r.partition_id = p_partition_id AND r.consumer_group = p_group
          ORDER BY r.seq LIMIT p_limit) m;

    SELECT coalesce(json_agg(queen.message_json_v2(m, p_partition_name, p_lease_id, p_group) ORDER BY m.seq),
                    '[]'::json),
           count(*), max(m.seq)
    INTO o_messages, o_count, v_last_seq
    FROM queen.partition_messages_v1(p_partition_id, v_cursor, p_limit - v_replay_count) m
    WHERE p_queue.delayed_processing = 0
       OR m.created_at <= now() - make_interval(secs => p_queue.delayed_processing);
    IF v_replay_count > 0 THEN
        o_messages := queen.json_concat_v1(ARRAY[v_replayed, o_messages]);
        o_count := o_count + v_replay_count;
    END IF;

    IF o_count > 0 AND p_auto_ack THEN  -- the cursor moves past the batch
        SELECT * INTO v_last FROM queen.messages
        WHERE partition_id = p_partition_id AND seq = greatest(v_last_seq, v_cursor);
        v_cursor := greatest(v_last_seq, v_cursor);
        v_cursor_id := coalesce(v_last.id, v_cursor_id);
        v_cursor_created := coalesce(v_last.created_at, v_cursor_created);
    END IF;

    IF v_new THEN
        INSERT INTO queen.partition_consumers
            (partition_id, consumer_group, last_consumed_seq, last_consumed_id, last_consumed_created_at,
             last_consumed_at, total_messages_consumed, total_batches_consumed,
             worker_id, lease_acquired_at, lease_expires_at, batch_size)
        SELECT p_partition_id, p_group, v_cursor, coalesce(v_cursor_id, '00000000-0000-0000-0000-000000000000'),
               v_cursor_created, CASE WHEN acked THEN now() END, CASE WHEN acked THEN o_count ELSE 0 END,
               CASE WHEN acked THEN 1 ELSE 0 END,
               CASE WHEN leased THEN p_lease_id END, CASE WHEN leased THEN now() END,
               CASE WHEN leased THEN now() + queen.lease_interval_v1(p_queue) END,
               CASE WHEN leased THEN o_count ELSE 0 END
        FROM (SELECT o_count > 0 AND p_auto_ack AS acked, o_count > 0 AND NOT p_auto_ack AS leased) f
        ON CONFLICT (partition_id, consumer_group) DO NOTHING;
        IF NOT FOUND THEN  -- created meanwhile by a writer that does not take the advisory lock
            o_status := 'busy';
            o_count := 0;
            o_messages := NULL;
            RETURN;
        END IF;
    ELSIF o_count > 0 AND p_auto_ack THEN
        UPDATE queen.partition_consumers
        SET last_consumed_seq = v_cursor, last_consumed_id = v_cursor_id,
            last_consumed_created_at = v_cursor_created, last_consumed_at = now(),
            total_messages_consumed = total_messages_consumed + o_count,
            total_batches_consumed = total_batches_consumed + 1,
            worker_id = NULL, lease_expires_at = NULL, lease_acquired_at = NULL,
            batch_size = 0, acked_count = 0
        WHERE id = v_pc.id;
    ELSIF o_count > 0 THEN
        UPDATE queen.partition_consumers
        SET last_consumed_seq = v_cursor, last_consumed_id = v_cursor_id,
            last_consumed_created_at = v_cursor_created,
            worker_id = p_lease_id, lease_acquired_at = now(),
            lease_expires_at = now() + queen.lease_interval_v1(p_queue),
            batch_size = o_count, acked_count = 0, retry_available_at = NULL
        WHERE id = v_pc.id;
    ELSIF v_seeded THEN
        UPDATE queen.partition_consumers
        SET last_consumed_seq = v_cursor, last_consumed_id = v_cursor_id,
            last_consumed_created_at = v_cursor_created
        WHERE id = v_pc.id;
    END IF;

    IF v_replay_count > 0 AND p_auto_ack THEN
        DELETE FROM queen.replays r
        WHERE r.partition_id = p_partition_id AND r.consumer_group = p_group AND r.seq = ANY (v_replay_seqs);
    END IF;
    IF o_count = 0 THEN
        o_status := 'empty';
        o_messages := '[]'::json;
    ELSE
        o_status := 'claimed';
    END IF;
END;
$$;

-- The wildcard scan floor of (queue, group). Every partition whose newest message is older than the floor was
-- fully consumed by the group when the floor was computed, or is parked: listed in the watermark's `parked`
-- because it was under a live lease or a pending retry delay then. So the candidate scan (ordered by
-- last_message_at) starts at the floor and reads the parked partitions by id, instead of walking over every
-- consumed partition again.
--
-- The floor is the newest-message time of the first partition (in last_message_at order) that the group has
-- not fully consumed and that is not parked (replayed ones count as not consumed), but never later than
-- the start of any write transaction in flight: a push sets last_message_at = clock_timestamp() after it has
-- locked its partitions, i.e. after it got a transaction id, so a push that commits later carries a time at
-- or after its transaction's start (pg_stat_activity.xact_start of a backend with a backend_xid). The
-- statement's own start bounds pushes that get their id after the look at pg_stat_activity (which PostgreSQL
-- caches for the rest of the transaction). pg_stat_activity is read before the partitions are scanned, in
-- an earlier statement: a push that committed in between is then in the scan's snapshot. Anything that
-- moves a cursor backwards drops the floor (queen.reset_scan_floor_v1).
--
-- Parked partitions: the floor passes a partition under a live lease or a pending retry delay and lists it
-- (at most PARKED_MAX = 256; beyond that the floor stops at the next one, as version 1 stopped at the first).
-- Version 1 stopped at the first: after a consumer stopped without acking, its leases held the floor for the
-- queue's lease time, and every pop walked over the partitions consumed since (at a million partitions, pop
-- + ack at 0.4 of its rate; journal, issue 44). Between two steps of the floor the candidate scan reads the
-- listed partitions by id, so one whose lease ended, whose delay passed or that a failed ack freed is found
-- by the next pop. At the next step a listed partition that is consumed leaves the list, and one that is no
-- longer parked with messages left leaves it too and lowers the floor to itself: a queue whose partitions
-- keep a backlog would otherwise list every partition it ever leased (measured: 40% more PostgreSQL time a
-- message at 100 partitions; journal, issue 44).
--
-- The sweep below the floor (version 3). Sessions of other roles are invisible in pg_stat_activity to a role
-- without pg_read_all_stats: a push made by such a session through the SQL API inside a long transaction, or
-- a backward step of the system clock, can leave a partition with work below the floor. Version 2 recomputed
-- the floor from the beginning once a minute to find such partitions: a walk over every partition the group
-- had consumed, in one pop. With consumers caught up on a queue of a million partitions that walk took 7 to
-- 9 s, once a minute for each group (journal, issue 44). Version 3 sweeps the partitions below the floor
-- instead, a step at a time: every SWEEP_EVERY = 60 s (p_swept_at, the watermark's full_scan_at: the last
-- step's time), as version 2 walked, from where the sweep stands (p_sweep_at, NULL: a new sweep), the step
-- examines the next SWEEP_STEP = 5,000 partitions in last_message_at order below the floor, and the rest of
-- those that share the last one's time. One it finds with work and parked joins the list; one with work and
-- free lowers the floor to itself, so the walk below meets it first. The step stores where it stopped in the
-- watermark's sweep_at (migration 027; NULL once it reached the floor: the next step starts a new sweep).
-- A step examines no more partitions than version 2's walk passed (both cover what lies below the floor);
-- a step every 10 s examined more: at a million partitions, on pages no pop had read lately, a
-- step took about 350 ms, and the eleven a 10 s window held took 3.9 s of PostgreSQL (journal, issue 44).
-- A partition left below the floor is found within two sweeps: within a minute up to 5,000 consumed
-- partitions, as in version 2; at a million, a sweep takes about 3.3 hours.
--
-- Cost: one index-ordered scan from the current floor to the first partition with work (as cheap as a pop's
-- own scan), one probe per parked partition, and, every SWEEP_EVERY, a sweep step of SWEEP_STEP probes; one
-- backend per (queue, group) computes it, at most every 50 ms (queen.scan_floor_v1, its one caller).
DROP FUNCTION IF EXISTS queen.advance_scan_floor_v1(queen.queues, text, timestamptz, boolean);
DROP FUNCTION IF EXISTS queen.advance_scan_floor_v2(queen.queues, text, timestamptz, boolean, uuid[]);
DROP FUNCTION IF EXISTS queen.advance_scan_floor_v3(queen.queues, text, timestamptz, timestamptz, uuid[]);
CREATE OR REPLACE FUNCTION queen.advance_scan_floor_v3(p_queue queen.queues, p_group text, p_floor timestamptz,
                                                       p_parked uuid[], p_swept_at timestamptz,
                                                       p_sweep_at timestamptz,
                                                       OUT o_floor timestamptz, OUT o_parked uuid[])
LANGUAGE plpgsql AS $$
DECLARE
    v_bound timestamptz;
    v_from timestamptz := p_floor;
    v_freed timestamptz;  -- the oldest listed partition that is no longer parked
    v_row record;
    v_sweep_from timestamptz := CASE WHEN p_swept_at IS NULL OR p_swept_at < now() - interval '60 seconds'
                                     THEN coalesce(p_sweep_at, '-infinity') END;  -- SWEEP_EVERY; NULL: no step
    v_examined integer := 0;   -- the sweep step's partitions
    v_sweep_at timestamptz;    -- where the sweep step stopped (NULL: it reached the floor)
BEGIN
    -- first the bound from the transactions in flight, then (a later statement, so a later snapshot) the
    -- partitions: a push that is no longer in flight when pg_stat_activity is read has committed, so the
    -- scan below sees it. Read in one statement, a push could commit between the scan's snapshot and the
    -- look at pg_stat_activity and be missed by both.
    SELECT least(statement_timestamp(),
                 (SELECT min(a.xact_start) FROM pg_stat_activity a
                  WHERE a.backend_xid IS NOT NULL AND a.pid <> pg_backend_pid()))
    INTO v_bound;
    -- the listed partitions below the floor: those the group consumed leave the list; those no longer under a
    -- lease or a delay (it ended, or an ack released it with messages left) lower the floor to the oldest of
    -- them and leave the list, so the walk below meets them as work; the others stay listed
    SELECT coalesce(array_agg(x.id) FILTER (WHERE x.parked), '{}'), min(x.last_message_at) FILTER (WHERE NOT x.parked)
    INTO o_parked, v_freed
    FROM (SELECT p.id, p.last_message_at, w.parked
          FROM queen.partitions p
          CROSS JOIN LATERAL queen.partition_work_v1(p.id, p.last_seq, p_group) w
          WHERE p.id = ANY (p_parked) AND p.queue_id = p_queue.id AND p.last_message_at < v_from
            AND w.has_work) x;
    -- the sweep's step below the floor: SWEEP_STEP partitions and those sharing the last one's time (WITH TIES:
    -- an index-ordered walk of that length; without a limit, the loop's cursor was planned for a larger share
    -- of the queue and took three times as long); fewer than SWEEP_STEP: it reached the floor, and the next
    -- step starts a new sweep
    IF v_sweep_from IS NOT NULL THEN
        FOR v_row IN
            SELECT p.id, p.last_message_at, w.has_work, w.parked
            FROM queen.partitions p
            CROSS JOIN LATERAL queen.partition_work_v1(p.id, p.last_seq, p_group) w
            WHERE p.queue_id = p_queue.id AND p.last_message_at > v_sweep_from AND p.last_message_at < p_floor
            ORDER BY p.last_message_at
            FETCH FIRST 5000 ROWS WITH TIES  -- SWEEP_STEP
        LOOP
            v_examined := v_examined + 1;
            v_sweep_at := v_row.last_message_at;
            IF NOT v_row.has_work OR v_row.id = ANY (o_parked) THEN
                CONTINUE;
            ELSIF v_row.parked AND cardinality(o_parked) < 256 THEN  -- PARKED_MAX
                o_parked := o_parked || v_row.id;
            ELSE
                v_freed := least(v_freed, v_row.last_message_at);
            END IF;
        END LOOP;
        IF v_examined < 5000 THEN  -- SWEEP_STEP
            v_sweep_at := NULL;
        END IF;
    END IF;
    v_from := least(v_from, v_freed);
    o_floor := 'infinity'::timestamptz;
    -- LIMIT: the scan is an index-ordered walk that stops at the first partition with work (a cursor reads
    -- ten rows at a time), not a sort of the queue; it may meet each listed partition again and PARKED_MAX
    -- new ones before that
    FOR v_row IN
        SELECT p.id, p.last_message_at, w.parked
        FROM queen.partitions p
        CROSS JOIN LATERAL queen.partition_work_v1(p.id, p.last_seq, p_group) w
        WHERE p.queue_id = p_queue.id AND p.last_message_at >= v_from AND w.has_work
        ORDER BY p.last_message_at
        LIMIT 513
    LOOP
        IF v_row.parked AND v_row.id = ANY (o_parked) THEN
            CONTINUE;
        END IF;
        IF v_row.parked AND cardinality(o_parked) < 256 THEN  -- PARKED_MAX
            o_parked := o_parked || v_row.id;
            CONTINUE;
        END IF;
        o_floor := v_row.last_message_at;
        EXIT;
    END LOOP;
    o_floor := least(o_floor, v_bound);
    INSERT INTO queen.consumer_watermarks AS w (queue_name, consumer_group, last_empty_scan_at, updated_at,
                                                full_scan_at, parked, sweep_at)
    VALUES (p_queue.name, p_group, o_floor, clock_timestamp(), now(), o_parked, v_sweep_at)
    ON CONFLICT (queue_name, consumer_group) DO UPDATE
    SET last_empty_scan_at = EXCLUDED.last_empty_scan_at, updated_at = EXCLUDED.updated_at,
        full_scan_at = CASE WHEN v_sweep_from IS NOT NULL THEN EXCLUDED.full_scan_at ELSE w.full_scan_at END,
        sweep_at = CASE WHEN v_sweep_from IS NOT NULL THEN EXCLUDED.sweep_at ELSE w.sweep_at END,
        parked = EXCLUDED.parked;
END;
$$;

-- The scan floor and parked list a wildcard pop of (p_queue, p_group) scans from: the watermark's, moved on by
-- advance_scan_floor_v3 when the watermark is older than FLOOR_EVERY = 50 ms and this backend takes the
-- (queue, group)'s advisory lock without waiting (one backend computes it; the others scan from the stored
-- floor). No watermark: the floor is -infinity (scan everything) and nothing is parked. Both wildcard pops call
-- it (pop_one_v2 here, pop_group_v1 in 022_group_commit.sql).
CREATE OR REPLACE FUNCTION queen.scan_floor_v1(p_queue queen.queues, p_group text,
                                               OUT o_floor timestamptz, OUT o_parked uuid[])
LANGUAGE plpgsql AS $$
DECLARE
    v_mark queen.consumer_watermarks%ROWTYPE;
BEGIN
    SELECT * INTO v_mark FROM queen.consumer_watermarks
    WHERE queue_name = p_queue.name AND consumer_group = p_group;
    o_floor := coalesce(v_mark.last_empty_scan_at, '-infinity'::timestamptz);
    o_parked := coalesce(v_mark.parked, '{}');
    -- FLOOR_EVERY
    IF (v_mark.updated_at IS NULL OR v_mark.updated_at < clock_timestamp() - interval '50 milliseconds')
       AND pg_try_advisory_xact_lock(hashtextextended(p_queue.name || '/' || p_group, 737)) THEN
        SELECT f.o_floor, f.o_parked INTO o_floor, o_parked
        FROM queen.advance_scan_floor_v3(p_queue, p_group, o_floor, o_parked, v_mark.full_scan_at,
                                         v_mark.sweep_at) f;
    END IF;
END;
$$;

CREATE OR REPLACE FUNCTION queen.pop_one_v2(r jsonb)
RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
    v_index integer := (r->>'index')::integer;
    v_partition text := r->>'partition';
    v_group text := coalesce(r->>'consumerGroup', '__QUEUE_MODE__');
    v_batch integer := greatest(coalesce((r->>'batch')::integer, 1), 1);
    v_auto boolean := coalesce((r->>'autoAck')::boolean, false);
    v_max_partitions integer := greatest(coalesce((r->>'partitions')::integer, 1), 1);
    v_mode text := coalesce(r->>'subscriptionMode', '');
    v_from text := coalesce(r->>'subscriptionFrom', '');
    v_lease_id text;
    v_queue queen.queues%ROWTYPE;
    v_part queen.partitions%ROWTYPE;
    v_claim record;
    v_floor timestamptz;
    v_parked uuid[];
    v_remaining integer;
    v_claimed integer := 0;
    v_batches json[] := '{}';  -- the messages of each claimed partition
    v_messages json;
    v_first_name text;
    v_first_id uuid;
    c record;
    v_name text;
    v_result json;
BEGIN
    IF r->>'queue' IS NULL THEN
        -- namespace/task pop: any queue whose namespace and task match, highest priority first
        FOR v_name IN
            SELECT q.name FROM queen.queues q
            WHERE (coalesce(r->>'namespace', '') = '' OR q.namespace = r->>'namespace')
              AND (coalesce(r->>'task', '') = '' OR q.task = r->>'task')
            ORDER BY q.priority DESC, q.name
        LOOP
            v_result := queen.pop_one_v2((r - 'partition') || jsonb_build_object('queue', v_name));
            IF json_array_length(coalesce(v_result->'messages', '[]'::json)) > 0 THEN
                RETURN v_result;
            END IF;
        END LOOP;
        RETURN json_build_object('index', v_index, 'success', false, 'error', 'no_available_partition',
                                 'messages', '[]'::json);
    END IF;

    SELECT * INTO v_queue FROM queen.queues WHERE name = r->>'queue';
    IF NOT FOUND THEN
        RETURN json_build_object('index', v_index, 'success', false, 'messages', '[]'::json,
            'error', CASE WHEN v_partition IS NULL THEN 'no_available_partition' ELSE 'partition_not_found' END);
    END IF;
    -- a request may name its lease id (Queen's SQL API passes worker_id); the broker never does
    v_lease_id := CASE WHEN v_auto THEN '' ELSE coalesce(nullif(r->>'leaseId', ''), queen.uuid_v7()::text) END;

    IF v_partition IS NOT NULL THEN
        SELECT * INTO v_part FROM queen.partitions WHERE queue_id = v_queue.id AND name = v_partition;
        IF NOT FOUND THEN
            RETURN json_build_object('index', v_index, 'success', false, 'error', 'partition_not_found',
                                     'messages', '[]'::json);
        END IF;
        IF v_queue.window_buffer > 0
           AND v_part.last_message_at > now() - make_interval(secs => v_queue.window_buffer) THEN
            RETURN json_build_object('index', v_index, 'success', true, 'queue', v_queue.name,
                'partition', v_part.name, 'partitionId', v_part.id, 'leaseId', '', 'consumerGroup', v_group,
                'messages', '[]'::json, 'windowBufferActive', true);
        END IF;
        v_claim := queen.claim_partition_v2(v_queue, v_part.id, v_part.name, v_group, v_batch, v_auto,
                                            v_lease_id, v_mode, v_from, true);
        IF v_claim.o_status IN ('lease_held', 'busy') THEN
            RETURN json_build_object('index', v_index, 'success', false, 'error', 'lease_held',
                                     'messages', '[]'::json);
        END IF;
        RETURN json_build_object('index', v_index, 'success', true, 'queue', v_queue.name,
            'partition', v_part.name, 'partitionId', v_part.id,
            'leaseId', CASE WHEN v_claim.o_count > 0 THEN v_lease_id ELSE '' END,
            'consumerGroup', v_group, 'partitionsClaimed', CASE WHEN v_claim.o_count > 0 THEN 1 ELSE 0 END,
            'messages', v_claim.o_messages);
    END IF;

    -- wildcard: scan candidates above the group's scan floor
    SELECT f.o_floor, f.o_parked INTO v_floor, v_parked FROM queen.scan_floor_v1(v_queue, v_group) f;
    v_remaining := v_batch;

    FOR c IN SELECT * FROM queen.pop_candidates_v2(v_queue.id, v_group, v_floor, v_parked,
                                                   v_max_partitions * 4 + 8) LOOP
        EXIT WHEN v_claimed >= v_max_partitions OR v_remaining <= 0;
        -- two IFs: PL/pgSQL evaluates a condition with a subquery as one SQL statement (executor start, and
        -- a plan per evaluation when custom plans win), even when window_buffer is 0
        IF v_queue.window_buffer > 0 THEN
            IF EXISTS (SELECT 1 FROM queen.partitions p WHERE p.id = c.partition_id
                         AND p.last_message_at > now() - make_interval(secs => v_queue.window_buffer)) THEN
                CONTINUE;
            END IF;
        END IF;
        v_claim := queen.claim_partition_v2(v_queue, c.partition_id, c.partition_name, v_group, v_remaining,
                                            v_auto, v_lease_id, v_mode, v_from, false);
        IF v_claim.o_count > 0 THEN
            v_claimed := v_claimed + 1;
            v_remaining := v_remaining - v_claim.o_count;
            v_batches := array_append(v_batches, v_claim.o_messages);
            IF v_first_id IS NULL THEN
                v_first_id := c.partition_id;
                v_first_name := c.partition_name;
            END IF;
        END IF;
    END LOOP;

    IF v_claimed = 0 THEN
        RETURN json_build_object('index', v_index, 'success', false, 'error', 'no_available_partition',
                                 'messages', '[]'::json);
    END IF;
    IF v_claimed = 1 THEN
        v_messages := v_batches[1];
    ELSE  -- several partitions (request "partitions" > 1): one array, partition after partition
        v_messages := queen.json_concat_v1(v_batches);
    END IF;

    RETURN json_build_object('index', v_index, 'success', true, 'queue', v_queue.name,
        'partition', v_first_name, 'partitionId', v_first_id, 'leaseId', v_lease_id,
        'consumerGroup', v_group, 'partitionsClaimed', v_claimed, 'messages', v_messages);
END;
$$;

-- enable_seqscan = off (like push_items_v2): a consumer row is found by an index probe even in a session
-- whose cached plans were made while queen.partition_consumers was still empty or tiny. A sequential scan
-- planned then reads the whole table per lookup once it has grown; a new group over 10,000 partitions grows
-- it by a row per pop (lab, 10 clients, table analyzed empty: 36,000 msg/s against 96,000 with the setting).
--
-- plan_cache_mode = force_generic_plan: every statement is planned once per session. PostgreSQL's plan cache
-- otherwise compares the generic plan's estimated cost with its custom plans' and may keep re-planning on
-- every call; it did so for the candidate scan (queen.pop_candidates_v2, inlined: its body parsed and planned
-- again per pop, 0.36 ms of planning against 0.28 ms of execution) over 10,000 partitions, though not over
-- 100. The generic plans are the custom ones with parameters (tests/integration/test_explain.py checks both
-- kinds). Lab, PostgreSQL 15, 10 pgbench clients popping 100 at a time from a new group over 10,000
-- partitions, alternated: 73,000-84,000 msg/s and 24-27 us of machine CPU per message without,
-- 84,000-109,000 msg/s and 18-24 us with.
CREATE OR REPLACE FUNCTION queen.pop_v2(p_requests jsonb)
RETURNS json
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    r record;
    v_results json[] := array_fill(NULL::json, ARRAY[jsonb_array_length(p_requests)]);
BEGIN
    -- Lock order, so that two fused calls cannot deadlock: the pops of a named partition come first, sorted
    -- by (queue, partition, group); they may wait for a cursor row, but hold no lock of this call's wildcard
    -- pops while they wait. Wildcard (and namespace/task) pops come last: they skip locked rows instead of
    -- waiting. In request order, a call could lease partition A by a wildcard pop and then wait for B while
    -- another call leased B and waited for A. Results stay in request order.
    FOR r IN SELECT t.e, t.n FROM jsonb_array_elements(p_requests) WITH ORDINALITY t(e, n)
             ORDER BY (t.e->>'queue' IS NULL OR t.e->>'partition' IS NULL), t.e->>'queue', t.e->>'partition',
                      t.e->>'consumerGroup', t.n LOOP
        v_results[r.n] := queen.pop_one_v2(r.e);
    END LOOP;
    RETURN array_to_json(v_results);
END;
$$;

CREATE OR REPLACE FUNCTION queen.pop_v1(p_requests jsonb)
RETURNS jsonb
LANGUAGE sql AS $$ SELECT queen.pop_v2(p_requests)::jsonb $$;

-- Drop a group's scan floor: call whenever a cursor moves backwards (seek, replay, re-ack of an old message).
CREATE OR REPLACE FUNCTION queen.reset_scan_floor_v1(p_queue_name text, p_group text)
RETURNS void
LANGUAGE sql AS $$
    DELETE FROM queen.consumer_watermarks
    WHERE queue_name = p_queue_name AND (p_group IS NULL OR consumer_group = p_group)
$$;
