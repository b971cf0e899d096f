-- The autovacuum of queen.messages at half of migration 030's pace: a sleep of 2 ms after every 500 cost units.
--
-- After a retention pass that deletes a tenth of a large table, nearly every heap page holds a dead row, so
-- the vacuum that follows dirties nearly every page it reads, and dirtied pages (20 cost units each) set its
-- pace. At 1,000 units between sleeps it worked about a third of the time for as long as it ran, and the
-- pushes beside it ran at about 0.8 of their rate on a two-core server. Half the pace spreads the same pass
-- over about twice the time, with half the work in each second of it; the soak's vacuums, after a steady
-- trickle of deletions, must still keep up (both measured: benchmarks/journal/2026-12.md, issue 44). Per
-- table; an operator may change it (ALTER TABLE ... SET, or RESET for the server's own).
ALTER TABLE queen.messages SET (autovacuum_vacuum_cost_limit = 500);
