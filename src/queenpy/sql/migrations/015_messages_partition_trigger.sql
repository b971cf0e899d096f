-- The foreign key from queen.messages to queen.partitions checked every inserted message with a query of its
-- own (RI_FKey_check_ins: ~36,000 instructions per message on PG15, 16% of a 1 KB push and 22% of a 40 B one;
-- callgrind, benchmarks/RESULTS.md 2026-11-24). Messages are written by queen.push_items_v3 only, into
-- partitions whose rows it has just locked (FOR UPDATE, held until COMMIT; a partition deleted before the lock
-- is created again), so the check could never fail there. The constraint's other half stays: deleting a
-- partition (deleting a queue cascades to its partitions) deletes its messages, now from a statement trigger,
-- one DELETE per partition as the ON DELETE CASCADE action ran it; TRUNCATE ... CASCADE of the partitions
-- empties queen.messages too.
ALTER TABLE queen.messages DROP CONSTRAINT messages_partition_id_fkey;

CREATE FUNCTION queen.delete_messages_of_deleted_partitions_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_partition uuid;
BEGIN
    FOR v_partition IN SELECT d.id FROM deleted_partitions d LOOP
        DELETE FROM queen.messages WHERE partition_id = v_partition;
    END LOOP;
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
