//! The `tlogd` daemon's building blocks: configuration, the public HTTP API and the
//! operator endpoints. `main.rs` is the CLI glue; tests and the load generator embed
//! [`http::router`] over any [`tlogd_core::engine::LogStorage`], served by
//! [`server::serve`] (HTTP/1.1 and h2c, timeouts, connection limit).

pub mod auth;
pub mod config;
pub mod ct;
pub mod ct_shard;
pub mod forward;
pub mod http;
pub mod migrate;
pub mod observe;
pub mod routes;
pub mod server;
pub mod verify;
pub mod witness;
