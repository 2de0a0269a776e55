//! Benchmarks, each measured against a baseline in the same run.
