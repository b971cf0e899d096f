-- Which PostgreSQL server this connection reached and how it commits (GET /health, issue 43): behind a
-- multi-host DATABASE_URL the primary changes on a failover, and what a commit waits for is what an
-- acknowledged push survives. host is null on a Unix socket.
CREATE OR REPLACE FUNCTION queen.server_role_v1() RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'host', host(inet_server_addr()),
        'port', current_setting('port')::int,
        'inRecovery', pg_is_in_recovery(),
        'synchronousCommit', current_setting('synchronous_commit'),
        'synchronousStandbyNames', current_setting('synchronous_standby_names'))
$$;
