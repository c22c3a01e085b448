#![doc = include_str!("../README.md")]

pub mod binding;
pub mod dsse;
pub mod grant;
pub mod hardware;
pub mod key;
pub mod keyfile;
pub mod platform;
pub mod simulated;
pub mod weights;

pub use key::{PartyKey, SignatureError, Signer, TeeKey, verify_signature};
pub use platform::{PlatformBackend, PlatformError};
