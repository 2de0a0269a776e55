//! Resource-side fencing: the resource keeps the highest fence it has accepted and refuses writers that
//! present an older one, in the same transaction as the business write.
//!
//! Promise: once a writer with fence `n` has committed, no writer with a fence `< n` can commit to that
//! resource. Limit: it protects only writes that go through it, and only against holders whose lease
//! was superseded (a newer fence was issued and used); it does not stop two writers with the same fence.

mod token;

pub use token::Fence;
