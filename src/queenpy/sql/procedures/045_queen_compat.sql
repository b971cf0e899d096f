-- Queen's own SQL procedures, for the users and tools that call them from SQL (API.md sharp edge 25): the
-- names and JSON shapes of the original broker (libqueen), implemented over queenpy's procedures, so their
-- guarantees hold (offsets in commit order, one lease holder per (partition, consumer group), the retry and
-- dead-letter rules of API.md 6.3). queen.push_messages_v2/v3 live in 020_push.sql.
--
-- queen.pop_specific_batch(jsonb) -> jsonb
--   Input: an array of requests {"idx": int, "queue_name": str, "partition_name": str,
--   "consumer_group": str (default "__QUEUE_MODE__"), "lease_seconds": int (0 or absent: the queue's
--   leaseTime), "worker_id": str (the lease id to take; absent: a new UUIDv7), "batch_size": int (default 1),
--   "sub_mode": str, "sub_from": str, "auto_ack": bool}.
--   Output: one element per request, in request order: {"idx": int, "result": {"success", "queue",
--   "partition", "partitionId", "leaseId", "consumerGroup", "messages": [the pop message shape of API.md 5.3,
--   producerSub included], "error"? ("partition_not_found" | "lease_held" | "no_available_partition")}}.
-- queen.pop_discover_batch(jsonb) -> jsonb: the same without "partition_name" (any partition of the queue
--   with work for the group: the wildcard pop).
-- queen.ack_messages_v2(jsonb) -> jsonb
--   Input: an array of acknowledgments {"index"?, "transactionId", "partitionId", "status"? ("completed"),
--   "consumerGroup"?, "leaseId"?, "error"?} (snake_case keys transaction_id, partition_id, consumer_group,
--   lease_id are read too); items without "index" are numbered in array order.
--   Output: the results of POST /api/v1/ack/batch: [{"index", "transactionId", "success", "error",
--   "queueName", "partitionName", "leaseReleased", "dlq"}], ordered by index.
-- Bad input (not an array, a missing name or id, a partitionId that is not a UUID, an unknown status) raises
-- SQLSTATE QN400 with a message naming the item and the field; nothing is changed.

-- One Queen-shaped pop request as queen.pop_one_v2's request (index = its position).
CREATE OR REPLACE FUNCTION queen.compat_pop_request_v1(r jsonb, p_position integer, p_specific boolean)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_where text := format('request %s', p_position - 1);
BEGIN
    IF jsonb_typeof(r) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION '%: must be a JSON object', v_where USING ERRCODE = 'QN400';
    END IF;
    IF jsonb_typeof(r->'queue_name') IS DISTINCT FROM 'string' OR r->>'queue_name' = '' THEN
        RAISE EXCEPTION '%: queue_name (a non-empty string) is required', v_where USING ERRCODE = 'QN400';
    END IF;
    IF p_specific AND jsonb_typeof(r->'partition_name') IS DISTINCT FROM 'string' THEN
        RAISE EXCEPTION '%: partition_name (a string) is required', v_where USING ERRCODE = 'QN400';
    END IF;
    IF r ? 'batch_size' AND jsonb_typeof(r->'batch_size') IS DISTINCT FROM 'number' THEN
        RAISE EXCEPTION '%: batch_size must be a number', v_where USING ERRCODE = 'QN400';
    END IF;
    IF r ? 'worker_id' AND (jsonb_typeof(r->'worker_id') NOT IN ('string', 'null')
                            OR length(r->>'worker_id') > 255) THEN
        RAISE EXCEPTION '%: worker_id must be a string of at most 255 characters', v_where USING ERRCODE = 'QN400';
    END IF;
    IF r ? 'lease_seconds' AND jsonb_typeof(r->'lease_seconds') NOT IN ('number', 'null') THEN
        RAISE EXCEPTION '%: lease_seconds must be a number', v_where USING ERRCODE = 'QN400';
    END IF;
    RETURN jsonb_build_object(
        'index', p_position - 1,
        'queue', r->>'queue_name',
        'partition', CASE WHEN p_specific THEN r->>'partition_name' END,
        'consumerGroup', coalesce(nullif(r->>'consumer_group', ''), '__QUEUE_MODE__'),
        'batch', greatest(coalesce((r->>'batch_size')::numeric::integer, 1), 1),
        'autoAck', coalesce((r->>'auto_ack')::boolean, false),
        'partitions', 1,
        'subscriptionMode', coalesce(r->>'sub_mode', ''),
        'subscriptionFrom', coalesce(r->>'sub_from', ''),
        'leaseId', nullif(r->>'worker_id', ''));
END;
$$;

-- Pops in Queen's shape (see the header): fused through queen.pop_v2, so the lock order that keeps fused
-- calls deadlock-free holds here too; a lease_seconds override is applied to the lease just taken.
CREATE OR REPLACE FUNCTION queen.compat_pop_batch_v1(p_requests jsonb, p_specific boolean)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_requests jsonb;
    v_results jsonb;
BEGIN
    IF jsonb_typeof(p_requests) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'the requests must be a JSON array' USING ERRCODE = 'QN400';
    END IF;
    SELECT coalesce(jsonb_agg(queen.compat_pop_request_v1(e, o::integer, p_specific) ORDER BY o), '[]'::jsonb)
    INTO v_requests
    FROM jsonb_array_elements(p_requests) WITH ORDINALITY t(e, o);
    IF jsonb_array_length(v_requests) = 0 THEN
        RETURN '[]'::jsonb;
    END IF;
    v_results := queen.pop_v2(v_requests)::jsonb;

    -- lease_seconds: the lease each request took lasts that long instead of the queue's leaseTime
    UPDATE queen.partition_consumers pc
    SET lease_expires_at = pc.lease_acquired_at + make_interval(secs => (r.e->>'lease_seconds')::numeric)
    FROM jsonb_array_elements(p_requests) WITH ORDINALITY r(e, o)
    JOIN jsonb_array_elements(v_results) WITH ORDINALITY x(res, n) ON x.n = r.o
    WHERE coalesce((r.e->>'lease_seconds')::numeric, 0) > 0
      AND coalesce(x.res->>'leaseId', '') <> ''
      AND pc.id IN (SELECT h.id FROM queen.lease_rows_v1(x.res->>'leaseId') h)
      AND pc.worker_id = x.res->>'leaseId' AND pc.lease_expires_at IS NOT NULL;

    RETURN (SELECT jsonb_agg(jsonb_build_object('idx', coalesce(r.e->'idx', to_jsonb(r.o - 1)),
                                                'result', x.res - 'index')
                             ORDER BY r.o)
            FROM jsonb_array_elements(p_requests) WITH ORDINALITY r(e, o)
            JOIN jsonb_array_elements(v_results) WITH ORDINALITY x(res, n) ON x.n = r.o);
END;
$$;

CREATE OR REPLACE FUNCTION queen.pop_specific_batch(p_requests jsonb)
RETURNS jsonb
LANGUAGE sql AS $$ SELECT queen.compat_pop_batch_v1(p_requests, true) $$;

CREATE OR REPLACE FUNCTION queen.pop_discover_batch(p_requests jsonb)
RETURNS jsonb
LANGUAGE sql AS $$ SELECT queen.compat_pop_batch_v1(p_requests, false) $$;

-- Acknowledgments in Queen's shape (see the header), applied by queen.ack_v1 after the checks the broker
-- makes at its edge (queen.ack_v1 trusts its input).
CREATE OR REPLACE FUNCTION queen.ack_messages_v2(p_items jsonb)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    e jsonb;
    o integer;
    v_where text;
    v_status text;
    v_items jsonb := '[]'::jsonb;
BEGIN
    IF jsonb_typeof(p_items) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'the acknowledgments must be a JSON array' USING ERRCODE = 'QN400';
    END IF;
    FOR e, o IN SELECT t.e, t.o FROM jsonb_array_elements(p_items) WITH ORDINALITY t(e, o) LOOP
        v_where := format('acknowledgment %s', o - 1);
        IF jsonb_typeof(e) IS DISTINCT FROM 'object' THEN
            RAISE EXCEPTION '%: must be a JSON object', v_where USING ERRCODE = 'QN400';
        END IF;
        e := jsonb_strip_nulls(jsonb_build_object(
            'index', coalesce(e->'index', to_jsonb(o - 1)),
            'transactionId', coalesce(e->'transactionId', e->'transaction_id'),
            'partitionId', coalesce(e->'partitionId', e->'partition_id'),
            'status', coalesce(e->'status', '"completed"'::jsonb),
            'consumerGroup', coalesce(e->'consumerGroup', e->'consumer_group'),
            'leaseId', coalesce(e->'leaseId', e->'lease_id'),
            'error', e->'error'));
        IF jsonb_typeof(e->'transactionId') IS DISTINCT FROM 'string' OR e->>'transactionId' = '' THEN
            RAISE EXCEPTION '%: transactionId (a non-empty string) is required', v_where USING ERRCODE = 'QN400';
        END IF;
        IF jsonb_typeof(e->'partitionId') IS DISTINCT FROM 'string'
           OR e->>'partitionId' !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
            RAISE EXCEPTION '%: partitionId must be a UUID string', v_where USING ERRCODE = 'QN400';
        END IF;
        IF jsonb_typeof(e->'index') IS DISTINCT FROM 'number' THEN
            RAISE EXCEPTION '%: index must be a number', v_where USING ERRCODE = 'QN400';
        END IF;
        v_status := e->>'status';
        IF v_status NOT IN ('completed', 'success', 'failed', 'dlq', 'retry') THEN
            RAISE EXCEPTION '%: status must be completed, success, failed, dlq or retry, not %', v_where,
                coalesce(v_status, 'null') USING ERRCODE = 'QN400';
        END IF;
        IF e ? 'consumerGroup' AND jsonb_typeof(e->'consumerGroup') <> 'string' THEN
            RAISE EXCEPTION '%: consumerGroup must be a string', v_where USING ERRCODE = 'QN400';
        END IF;
        IF e ? 'leaseId' AND jsonb_typeof(e->'leaseId') <> 'string' THEN
            RAISE EXCEPTION '%: leaseId must be a string', v_where USING ERRCODE = 'QN400';
        END IF;
        IF e ? 'error' AND jsonb_typeof(e->'error') <> 'string' THEN
            e := e - 'error';  -- as the original: a non-string error is no error text
        END IF;
        v_items := v_items || jsonb_build_array(e);
    END LOOP;
    IF jsonb_array_length(v_items) = 0 THEN
        RETURN '[]'::jsonb;
    END IF;
    RETURN queen.ack_v1(v_items);
END;
$$;
