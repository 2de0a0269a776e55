//! `leasehold`: run a command under a lease, inspect and force-release leases, the live demo, the
//! fault-injection verifier and the benchmarks. A thin layer over the `leasehold` and `leasehold-lab`
//! crates.
#![forbid(unsafe_code)]

fn main() {
    eprintln!("leasehold: not built yet");
    std::process::exit(2);
}
