-- queen.messages is a queue table: retention and eviction delete what producers push, at the push rate, so
-- its dead rows grow as fast as its live ones. With autovacuum's defaults a worker sleeps 2 ms after every
-- 200 cost units (about 36 MB of dirtied pages a second) and starts only when a fifth of the table is dead;
-- in the soak (issue 18: 20,000 messages a second deleted) each pass over the table and its three indexes
-- took longer than the deletes it cleaned up took to come back, and the table grew by 25 MB a minute with
-- the stored count flat. Unthrottled, and started at 5% dead rows, a pass finishes before the next is due.
-- Per table, so the rest of the server keeps its own settings; an operator may change them (ALTER TABLE).
ALTER TABLE queen.messages SET (autovacuum_vacuum_cost_delay = 0, autovacuum_vacuum_scale_factor = 0.05);
