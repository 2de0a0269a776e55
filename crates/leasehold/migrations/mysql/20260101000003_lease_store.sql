-- The MariaDB/MySQL lease store (`mysql://`, `mariadb://` store URLs). One row per lease name that is
-- held, or was held within the idle retention; every time in it is on the database's clock (UTC,
-- microseconds).
CREATE TABLE IF NOT EXISTS leasehold_leases (
    -- The client's key prefix (the namespace of names) and the lease name.
    prefix VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    -- The holder's token (128 random bits as hex); NULL once released or force-released.
    token VARCHAR(64) CHARACTER SET ascii,
    -- The last fence issued for the name: max(last + 1, the server's clock in µs), minted under the
    -- row's lock, so it never goes backwards, also after the row was swept.
    fence BIGINT NOT NULL,
    -- When the holder's lease ends; for a free row, when it became free. A row free for longer than
    -- the idle retention is deleted.
    expires_at DATETIME(6) NOT NULL,
    -- The token of the last release, so that a release retried after a lost reply says "released".
    released_token VARCHAR(64) CHARACTER SET ascii,
    PRIMARY KEY (prefix, name)
) ENGINE = InnoDB;
