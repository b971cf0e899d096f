-- Shared helpers of the queen procedures.
--
-- Convention, "(partition_id = value) IS TRUE": the hot paths look a message up by (transactionId,
-- partition), which two indexes could serve, a unique one and (partition_id, seq). Statistics taken while
-- the table was young (one row per partition) rate both alike, and PL/pgSQL keeps the generic plan it made
-- then for the whole session: (partition_id, seq) turned each lookup into a walk through a whole partition.
-- Written as IS TRUE, that condition is never an index condition, so only the unique index can serve the
-- lookup (migration 005 put transaction_id first in it; 006 keys its partition as text, so no index has
-- partition_id in second place; 017 keeps only client transactionIds in it, the primary key serves the
-- others: every such lookup is queen.message_by_transaction_v1 below). Consumer rows need no such care:
-- migration 007 made the group index a one-row probe too. The entry points of the hot paths (push_items_v2,
-- pop_v2, ack_v2, renew_lease_v1, transaction_v1) also run with enable_seqscan = off, so no table's size at
-- planning time can make a sequential scan look cheapest. tests/integration/test_explain.py checks all three.
-- pop_v2 also forces generic plans (see there): its candidate scan was re-planned on every call otherwise.

-- UUIDv7 (RFC 9562 section 5.7): 48-bit Unix milliseconds, version 7, variant 10, random rest.
-- Order inside one millisecond is random; queen orders by the per-partition offset `seq`, not by id.
CREATE OR REPLACE FUNCTION queen.uuid_v7(ts timestamptz DEFAULT clock_timestamp()) RETURNS uuid
LANGUAGE sql VOLATILE AS $$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send((extract(epoch FROM ts) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1), 'hex')::uuid
$$;

-- The message id that a transactionId is when the broker chose it: a push without a client transactionId
-- stores its new message id's text (lower-case canonical form) as the transactionId. NULL for any other text.
CREATE OR REPLACE FUNCTION queen.generated_transaction_uuid_v1(p_transaction_id text) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p_transaction_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                THEN p_transaction_id::uuid END
$$;

-- The message of a partition with a transactionId: zero or one row. Two unique-index probes at most: the
-- primary key for a broker-given transactionId (the message id's text), else the dedupe index, which holds
-- only client transactionIds (migration 017; its predicate is repeated so the planner may use it). A client
-- transactionId may equal another message's broker-given one (a consumer re-pushing what it popped): the
-- first probe finds that message. Inlined by the planner (a single SQL SELECT, STABLE), so callers' cached
-- plans hold the probes themselves. The primary-key probe filters the partition "IS TRUE" (the convention
-- above); the dedupe-index probe names it as that index keys it (text), its second column.
CREATE OR REPLACE FUNCTION queen.message_by_transaction_v1(p_partition_id uuid, p_transaction_id text)
RETURNS SETOF queen.messages
LANGUAGE sql STABLE AS $$
    (SELECT m.* FROM queen.messages m
     WHERE m.id = queen.generated_transaction_uuid_v1(p_transaction_id) AND m.transaction_id = p_transaction_id
       AND (m.partition_id = p_partition_id) IS TRUE
     UNION ALL
     SELECT m.* FROM queen.messages m
     WHERE m.transaction_id = p_transaction_id AND m.transaction_id <> m.id::text
       AND (m.partition_id::text) = p_partition_id::text)
    LIMIT 1
$$;

-- Timestamps on the wire, always UTC: milliseconds everywhere, microseconds for pop `createdAt`.
-- STABLE, as to_char and json_build_object are: the planner inlines a SQL function only when its declared
-- volatility is not stricter than its body's. Declared IMMUTABLE, the message JSON function ran as a function
-- call of its own for every delivered message (20 us each, pg_stat_statements.track = all).
CREATE OR REPLACE FUNCTION queen.iso_ms(ts timestamptz) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

CREATE OR REPLACE FUNCTION queen.iso_us(ts timestamptz) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;

-- namespace / task of an auto-created queue: `billing.invoices` -> (`billing`, `invoices`)
CREATE OR REPLACE FUNCTION queen.default_namespace(queue_name text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT split_part(queue_name, '.', 1) $$;

CREATE OR REPLACE FUNCTION queen.default_task(queue_name text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN position('.' IN queue_name) > 0
                THEN substring(queue_name FROM position('.' IN queue_name) + 1) ELSE '' END
$$;

-- Messages of one partition strictly after offset `after_seq`, in offset order: the dequeue.
-- A plain SQL function so the planner inlines it; tests EXPLAIN it (index scan on (partition_id, seq)).
CREATE OR REPLACE FUNCTION queen.partition_messages_v1(p_partition_id uuid, p_after_seq bigint, p_limit integer)
RETURNS SETOF queen.messages
LANGUAGE sql STABLE AS $$
    SELECT * FROM queen.messages
    WHERE partition_id = p_partition_id AND seq > p_after_seq
    ORDER BY seq
    LIMIT p_limit
$$;

-- The consumer rows lease p_lease holds, live or expired: found by the lease's id through
-- queen.consumer_activity (migration 026: partition_consumers has no index on its lease holder, so that pops and
-- acks rewrite their rows as HOT updates), each checked on the row itself, which stays the truth. A plain SQL
-- function so the planner inlines it (lease renewal, a transaction's required leases, lease_seconds).
CREATE OR REPLACE FUNCTION queen.lease_rows_v1(p_lease text)
RETURNS SETOF queen.partition_consumers
LANGUAGE sql STABLE AS $$
    SELECT pc.* FROM queen.consumer_activity a JOIN queen.partition_consumers pc ON pc.id = a.consumer_id
    WHERE a.worker_id = p_lease AND pc.worker_id = p_lease
$$;

-- Whether p_lease is the live lease of a consumer row. coalesce: a released lease (worker_id NULL) must fail
-- the check, not make it NULL and skip it. STABLE (now()), so the planner inlines it.
CREATE OR REPLACE FUNCTION queen.holds_lease(p_pc queen.partition_consumers, p_lease text)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT coalesce(p_pc.worker_id = p_lease AND p_pc.lease_expires_at > now(), false)
$$;

-- Partitions of a queue that may have work for a consumer group: newest message after the group's
-- cursor, no live lease, no pending retry delay. Only partitions whose newest message is at or after
-- `p_floor` (the group's scan floor, see pop.sql) are looked at, through the (queue_id, last_message_at)
-- index, so idle partitions cost nothing; plus, by id, the partitions the floor passed while they were
-- leased or retry-delayed (`p_parked`, a few dozen at most), first, since their messages are older.
-- Inlined by the planner; tests EXPLAIN it.
DROP FUNCTION IF EXISTS queen.pop_candidates_v1(uuid, text, timestamptz, integer);
-- What a wildcard pop asks of one partition for one consumer group: has the group something to read there
-- (messages past its cursor, or a replay), and is the partition parked (under a live lease or a retry delay).
-- A set-returning SQL function that PostgreSQL inlines into the caller's plan; the consumer row is read by a
-- LATERAL ... LIMIT 1, which cannot be flattened into a hash join: one index probe per partition looked at
-- (test_explain.py checks the callers' plans).
CREATE OR REPLACE FUNCTION queen.partition_work_v1(p_partition_id uuid, p_last_seq bigint, p_group text)
RETURNS TABLE (has_work boolean, parked boolean)
LANGUAGE sql STABLE AS $$
    SELECT p_last_seq > coalesce(pc.last_consumed_seq, 0)
               OR EXISTS (SELECT 1 FROM queen.replays r
                          WHERE r.partition_id = p_partition_id AND r.consumer_group = p_group),
           coalesce(pc.lease_expires_at > now() OR pc.retry_available_at > now(), false)
    FROM (SELECT) one
    LEFT JOIN LATERAL (
        SELECT c.last_consumed_seq, c.lease_expires_at, c.retry_available_at
        FROM queen.partition_consumers c
        WHERE c.partition_id = p_partition_id AND c.consumer_group = p_group
        LIMIT 1) pc ON true
$$;

CREATE OR REPLACE FUNCTION queen.pop_candidates_v2(p_queue_id uuid, p_group text, p_floor timestamptz,
                                                   p_parked uuid[], p_limit integer)
RETURNS TABLE (partition_id uuid, partition_name varchar, last_seq bigint)
LANGUAGE sql STABLE AS $$
    -- two scans, each with its own order and limit (one UNION ALL under one ORDER BY let the planner sort
    -- every partition above the floor): the partitions from the scan floor on, and the listed (parked) ones
    -- below it
    SELECT x.id, x.name, x.last_seq FROM (
        (SELECT p.id, p.name, p.last_seq, p.last_message_at
         FROM queen.partitions p
         CROSS JOIN LATERAL queen.partition_work_v1(p.id, p.last_seq, p_group) w
         WHERE p.queue_id = p_queue_id AND p.last_message_at >= p_floor AND w.has_work AND NOT w.parked
         ORDER BY p.last_message_at
         LIMIT p_limit)
        UNION ALL
        (SELECT p.id, p.name, p.last_seq, p.last_message_at
         FROM queen.partitions p
         CROSS JOIN LATERAL queen.partition_work_v1(p.id, p.last_seq, p_group) w
         WHERE p.id = ANY (p_parked) AND p.queue_id = p_queue_id AND p.last_message_at < p_floor
           AND w.has_work AND NOT w.parked
         ORDER BY p.last_message_at
         LIMIT p_limit)) x
    ORDER BY x.last_message_at
    LIMIT p_limit
$$;

-- Wire shape of one delivered message (API.md section 5.3), plus our `offset`, as json (text), which is what
-- the broker reads: json_build_object appends to a string, where jsonb_build_object builds a tree, sorts its
-- keys and serialises it again. For 34 messages: 257 us against 429 us (pgbench, one client, PostgreSQL 15).
-- It replaces queen.message_json, which returned jsonb.
DROP FUNCTION IF EXISTS queen.message_json(queen.messages, text, text, text);
CREATE OR REPLACE FUNCTION queen.message_json_v2(m queen.messages, p_partition_name text, p_lease_id text,
                                                 p_group text)
RETURNS json
LANGUAGE sql STABLE AS $$
    SELECT json_build_object(
        'id', m.id, 'transactionId', m.transaction_id, 'traceId', m.trace_id,
        'data', m.payload, 'producerSub', m.producer_sub, 'createdAt', queen.iso_us(m.created_at),
        'partitionId', m.partition_id, 'partition', p_partition_name, 'offset', m.seq,
        'leaseId', p_lease_id, 'consumerGroup', p_group)
$$;
