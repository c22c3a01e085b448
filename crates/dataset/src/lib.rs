#![doc = include_str!("../README.md")]

pub mod cases;
pub mod embedded;
pub mod flows;
pub mod fuzz;
pub mod pylit;
pub mod syscall_attacks;

pub use cases::{AttackKind, AttackerCall, AttackerCase, Dataset, UserCase};
pub use flows::Flow;
