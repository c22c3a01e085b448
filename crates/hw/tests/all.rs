//! The one integration-test binary of knox-hw: genuine and negative attestation vectors, policies, configfs fakes, tampering.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod suite;
