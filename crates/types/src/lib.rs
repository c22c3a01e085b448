#![doc = include_str!("../README.md")]

pub mod action;
pub mod aeg;
pub mod apm;
pub mod bundle;
pub mod bytes;
pub mod canon;
pub mod canon_ser;
pub mod checkpoint;
pub mod compact;
pub mod digest;
pub mod dsse;
pub mod grant;
pub mod json;
pub mod merkle;
pub mod payload;
pub mod regulation;

pub use action::Action;
pub use digest::Digest;
