-- The attempt that currently owns an idempotency key: a takeover changes it, so a slow former owner
-- cannot complete the key after someone else took it over.
ALTER TABLE leasehold_idempotency_keys ADD COLUMN owner TEXT;
