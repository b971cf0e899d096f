-- The dedupe index holds only transactionIds a client chose. A push without one stores the message id's text
-- as its transactionId (020_push.sql), unique already by the primary key; indexed a second time as 36 bytes of
-- text beside the partition's 36, those entries made the dedupe index the largest part of queen.messages (in
-- the issue-18 soak: 160-430 MB against a 215 MB heap and a 49 MB primary key), and, as its keys only grow
-- and retention deletes from the left, it grew in steps whenever VACUUM fell behind (+0.71 MB a minute over
-- 60 minutes). Every lookup by (partition, transactionId) now reads queen.message_by_transaction_v1
-- (010_common.sql): the primary key when the text is a message id's canonical form, this index otherwise.
-- A client transactionId that equals an existing message's broker-given one is still a duplicate: push looks
-- it up in the primary key under the partition's lock.
-- Built under a lock that holds off writes to queen.messages (as 005 and 006); the broker re-applies the
-- procedures in the same pass, so the old index's readers are replaced before it serves traffic again.
CREATE UNIQUE INDEX messages_client_transaction_key ON queen.messages (transaction_id, (partition_id::text))
    WHERE transaction_id <> id::text;
DROP INDEX queen.messages_transaction_partition_key;
