-- The PostgreSQL lease store (`postgres://` store URLs). One row per lease name that is held, or was
-- held within the idle retention; every time in it is on the database's clock.

-- Every fence comes from this one sequence. `nextval` never returns a value it returned before, and
-- after a crash it skips ahead (it is WAL-logged in advance), never back. CACHE 1 is the default,
-- written out because it matters: with a cache, each session draws from its own block of values, and
-- a later lease could get a lower fence than an earlier one. The store refuses to start otherwise.
CREATE SEQUENCE IF NOT EXISTS leasehold_lease_fence AS BIGINT MINVALUE 1 CACHE 1 NO CYCLE;

CREATE TABLE IF NOT EXISTS leasehold_leases (
    -- The client's key prefix (the namespace of names) and the lease name.
    prefix TEXT NOT NULL,
    name TEXT NOT NULL,
    -- The holder's token (128 random bits as hex); NULL once released or force-released.
    token TEXT,
    -- The last fence issued for the name.
    fence BIGINT NOT NULL,
    -- When the holder's lease ends; for a free row, when it became free. A row free for longer than
    -- the idle retention is deleted.
    expires_at TIMESTAMPTZ NOT NULL,
    -- The token of the last release, so that a release retried after a lost reply says "released".
    released_token TEXT,
    -- Until then a contender told "busy" may be waiting for a notification: a release notifies only
    -- while it lies ahead, so an uncontended release sends none.
    waiting_until TIMESTAMPTZ,
    PRIMARY KEY (prefix, name)
)
-- Acquire, renew and release change only columns no index covers, so with room left on the page
-- PostgreSQL updates the row in place of its page (a HOT update: no index entry written). For the
-- same reason `expires_at` has no index: the sweep of idle rows reads the table instead, once every
-- few minutes.
WITH (fillfactor = 80);
