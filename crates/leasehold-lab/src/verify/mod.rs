//! Fault-injection verification: which strategy keeps data correct under which fault.
