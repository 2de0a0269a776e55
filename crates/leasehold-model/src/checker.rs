//! The stateright model (being written).
