mod api;
mod browser;
mod common;
mod live;
mod store;
