//! Knox hardware evidence: collect TDX quotes and NVIDIA GPU evidence on real hardware, verify them offline, appraise them against a regulator's policy.
#![doc = include_str!("../README.md")]

pub mod fuzz;
pub mod nvidia;
pub mod policy;
pub mod tdx;
pub mod time;
mod x509;
