-- Consumer rows are looked up by (partition_id, consumer_group), the unique key. The index the admin queries
-- use to find a group's rows was (consumer_group) alone: with statistics taken while each group had one row,
-- it looked as good as the unique one, and the generic plans PL/pgSQL caches then walked every row of the
-- group per lookup. Each lookup wrote its group condition as "(consumer_group = ...) IS TRUE" to keep that
-- index out. Keyed (consumer_group, partition_id), the index is itself a probe of one row for that lookup,
-- so either index serves it and the lookups are plain again; the admin queries still read it by its
-- leading column. tests/integration/test_explain.py checks the lookups in a group of 20,000 rows.
CREATE INDEX partition_consumers_group_partition_idx ON queen.partition_consumers (consumer_group, partition_id);
DROP INDEX queen.partition_consumers_group_idx;
