-- leasehold's tables on SQLite. Every name is prefixed `leasehold_` so they sit beside an
-- application's own tables without colliding.

-- Fenced writes: the highest fence each resource has accepted.
CREATE TABLE IF NOT EXISTS leasehold_fences (
    resource TEXT PRIMARY KEY NOT NULL,
    fence INTEGER NOT NULL
);

-- Idempotency keys, scoped by caller. Times are milliseconds since 1970 on the database's clock.
CREATE TABLE IF NOT EXISTS leasehold_idempotency_keys (
    scope TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    locked_until_ms INTEGER,
    recovery_point TEXT NOT NULL,
    response BLOB,
    created_at_ms INTEGER NOT NULL,
    completed_at_ms INTEGER,
    PRIMARY KEY (scope, idempotency_key)
);
CREATE INDEX IF NOT EXISTS leasehold_idempotency_keys_created ON leasehold_idempotency_keys (created_at_ms);

-- Inbox: messages a consumer has applied.
CREATE TABLE IF NOT EXISTS leasehold_inbox (
    consumer TEXT NOT NULL,
    message_id TEXT NOT NULL,
    processed_at_ms INTEGER NOT NULL,
    PRIMARY KEY (consumer, message_id)
);

-- Reservations written in the same transaction as a bounded decrement.
CREATE TABLE IF NOT EXISTS leasehold_reservations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    item_table TEXT NOT NULL,
    item_id TEXT NOT NULL,
    quantity INTEGER NOT NULL CHECK (quantity > 0),
    reference TEXT,
    created_at_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS leasehold_reservations_item ON leasehold_reservations (item_table, item_id);
