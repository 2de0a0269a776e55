//! Conditional updates and state machines: rules the database enforces in one statement.
