//! The live demo: every failure of a naive lock, and its fix.
