//! Inbox deduplication: a message id is recorded in the same transaction as the business write, so a
//! redelivered message is recognised and skipped.
