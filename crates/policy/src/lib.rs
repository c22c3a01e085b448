#![doc = include_str!("../README.md")]

pub mod auth;
pub mod content;
pub mod dataflow;
pub mod fuzz;
pub mod manifest;
pub mod mediated;
pub mod proposal;
pub mod provenance;
pub mod schema;
pub mod schema_fragment;
pub mod shipped;
pub mod spec;
pub mod stop;
pub mod toolkit;
pub mod trajectory;
pub mod typed;

pub use manifest::{Effect, ManifestError, ToolEntry, ToolkitManifest};
