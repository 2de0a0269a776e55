-- leasehold's tables on MariaDB and MySQL (InnoDB). Every name is prefixed `leasehold_` so they sit
-- beside an application's own tables without colliding. DDL commits implicitly here, so every
-- statement is safe to run again (a migration cut short is applied again whole); indexes are declared
-- in the tables because MySQL has no `CREATE INDEX IF NOT EXISTS`. Keys are compared byte for byte
-- (`utf8mb4_bin`), as on PostgreSQL and SQLite; they are at most 255 bytes (checked by leasehold).
-- Columns read back as text (`recovery_point`) keep the default collation: the driver takes a
-- `_bin` column for bytes.

-- Fenced writes: the highest fence each resource has accepted.
CREATE TABLE IF NOT EXISTS leasehold_fences (
    resource VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    fence BIGINT NOT NULL
) ENGINE = InnoDB;

-- Idempotency keys, scoped by caller. Times are milliseconds since 1970 on the database's clock.
-- `owner` is the attempt that currently owns the key: a takeover changes it, so a slow former owner
-- cannot complete the key after someone else took it over.
CREATE TABLE IF NOT EXISTS leasehold_idempotency_keys (
    scope VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    idempotency_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    fingerprint VARCHAR(64) CHARACTER SET ascii NOT NULL,
    locked_until_ms BIGINT,
    recovery_point VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL,
    response LONGBLOB,
    created_at_ms BIGINT NOT NULL,
    completed_at_ms BIGINT,
    owner VARCHAR(64) CHARACTER SET ascii,
    PRIMARY KEY (scope, idempotency_key),
    INDEX leasehold_idempotency_keys_created (created_at_ms)
) ENGINE = InnoDB;

-- Inbox: messages a consumer has applied.
CREATE TABLE IF NOT EXISTS leasehold_inbox (
    consumer VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    message_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    processed_at_ms BIGINT NOT NULL,
    PRIMARY KEY (consumer, message_id)
) ENGINE = InnoDB;

-- Reservations written in the same transaction as a bounded decrement.
CREATE TABLE IF NOT EXISTS leasehold_reservations (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    item_table VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    item_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    quantity BIGINT NOT NULL CHECK (quantity > 0),
    reference VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    created_at_ms BIGINT NOT NULL,
    INDEX leasehold_reservations_item (item_table, item_id)
) ENGINE = InnoDB;
