-- Insert-driven autovacuum of queen.messages every 100,000 pushed rows, in place of PostgreSQL's default
-- (1,000 rows plus a fifth of the table's rows: two million at ten million stored).
--
-- Every page a push fills must be vacuumed once (hint bits, the visibility map), and a vacuum reads the
-- page to do it. Left to the default, a pass comes after millions of pushes, or after retention's deletions
-- cross 016's 5%; by then the pages pushed since the last pass are no longer in the page cache when the
-- table is larger than memory, and the pass reads them back from disk beside the pushes' WAL writes: the
-- push ran at about 0.6 of its rate beside such a pass at a million partitions, and at about 0.9 to 1.0
-- beside passes over pages pushed a minute before (benchmarks/journal/2026-12.md, issue 44). With a fixed
-- threshold, autovacuum takes the pushed pages at each naptime that saw 100,000 pushes, while they are
-- cached; a pass over pages with no dead rows skips the index vacuum. Per table; an operator may change it
-- (ALTER TABLE ... SET, or RESET for the server's own).
ALTER TABLE queen.messages
    SET (autovacuum_vacuum_insert_threshold = 100000, autovacuum_vacuum_insert_scale_factor = 0);
