//! The `tlogd` daemon's building blocks, by concern:
//!
//! - [`serve`]: the listener ([`serve::server::serve`]: HTTP/1.1 and h2c, timeouts,
//!   connection limits) and one log's router ([`serve::router::router`], over any
//!   [`tlogd_core::engine::LogStorage`]; tests and the load generator embed it);
//! - [`logset`]: every log of the configuration opened (keys, storage, dedup index,
//!   engine, routes) and the public router that picks one by host and path prefix;
//! - [`routes`]: the route families (tlog-tiles, CT, a CT shard, forwarding), which
//!   answer through [`answer`];
//! - [`commands`]: each command's body (`serve`, `keygen`, `verify`, `freeze`,
//!   `migrate`);
//! - [`auth`] (bearer tokens for writes and forwards), [`config`], [`observe`]
//!   (metrics and operator endpoints), [`witness`] (checkpoint cosigning).
//!
//! `main.rs` parses the command line and dispatches to [`commands`].

pub mod answer;
pub mod auth;
pub mod client;
pub mod commands;
pub mod config;
pub mod logset;
pub mod observe;
pub mod routes;
pub mod serve;
pub mod witness;
