#![doc = include_str!("../README.md")]

pub mod api;
pub mod auth;
pub mod chains;
pub mod cli;
pub mod client;
pub mod config;
pub mod fuzz;
pub mod http;
pub mod ingest;
pub mod live;
pub mod pdf;
pub mod run;
pub mod store;
pub mod story;
pub mod stream;
pub mod tlog;
pub mod ui;

pub use http::{App, router};
pub use ingest::Verifier;
pub use store::{Engine, Principal, Role, Store, StoreError};
