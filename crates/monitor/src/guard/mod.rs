//! Guards the monitor applies that need run-time state beyond `knox-policy`'s pure
//! predicates: external stop signals and the regulation guard's interface.

pub mod regulation;
pub mod stop;
