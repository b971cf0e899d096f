-- The foreign key from queen.messages to queen.partitions checked every inserted message with a query of its
-- own (RI_FKey_check_ins: ~36,000 instructions per message on PG15, 16% of a 1 KB push and 22% of a 40 B one;
-- callgrind, benchmarks/RESULTS.md 2026-11-24). Messages are written by queen.push_items_v3 only, into
-- partitions whose rows it has just locked (FOR UPDATE, held until COMMIT; a partition deleted before the lock
-- is created again), so the check could never fail there. Its other half stays, as the services did for the
-- message -> dead letters/traces/replays cascades (080_services.sql): deleting partitions (partition cleanup,
-- a queue's deletion cascading to its partitions) deletes their messages from a statement trigger, one
-- set-based DELETE per deleting statement through the (partition_id, seq) index, instead of the key's
-- cascade (one DELETE per partition). That DELETE fires queen.messages_deleted_v1 like any other: it removes
-- the messages' dead letters, traces and replays, and counts nothing for partitions already gone (their
-- counters go with them, queen.partitions_removed_v1). TRUNCATE ... CASCADE of the partitions empties
-- queen.messages too.
ALTER TABLE queen.messages DROP CONSTRAINT messages_partition_id_fkey;

-- enable_seqscan = off: the plan is made once per session, maybe while queen.messages was small.
CREATE FUNCTION queen.delete_messages_of_deleted_partitions_v1() RETURNS trigger
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
BEGIN
    DELETE FROM queen.messages m WHERE m.partition_id = ANY (ARRAY(SELECT d.id FROM deleted_partitions d));
    RETURN NULL;
END;
$$;

CREATE TRIGGER partitions_delete_messages AFTER DELETE ON queen.partitions
    REFERENCING OLD TABLE AS deleted_partitions
    FOR EACH STATEMENT EXECUTE FUNCTION queen.delete_messages_of_deleted_partitions_v1();

CREATE FUNCTION queen.truncate_messages_with_partitions_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE queen.messages CASCADE;
    RETURN NULL;
END;
$$;

CREATE TRIGGER partitions_truncate_messages AFTER TRUNCATE ON queen.partitions
    FOR EACH STATEMENT EXECUTE FUNCTION queen.truncate_messages_with_partitions_v1();
