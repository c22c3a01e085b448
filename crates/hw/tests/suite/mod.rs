//! Integration-test modules.

mod configfs;
mod gpu_vectors;
mod nvml;
mod ocsp;
mod policy;
mod support;
mod tamper;
mod tdx_vectors;
mod vectors;
