//! Idempotency keys: a request carrying the same key takes effect once, and its retries get the stored
//! response back.
