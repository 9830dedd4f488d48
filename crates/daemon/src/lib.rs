//! The `tlogd` daemon's building blocks, by concern:
//!
//! - [`serve`]: the listener ([`serve::server::serve`]: HTTP/1.1 and h2c, timeouts,
//!   connection limits), one log's router ([`serve::router::router`], over any
//!   [`tlogd_core::engine::LogStorage`]; tests and the load generator embed it),
//!   several logs by host and prefix;
//! - [`routes`]: the route families (tlog-tiles, CT, a CT shard, forwarding), which
//!   answer through [`answer`];
//! - [`commands`]: `tlogd verify` and `tlogd migrate`;
//! - [`auth`] (bearer tokens for writes and forwards), [`config`], [`observe`] (metrics and operator endpoints), [`witness`] (checkpoint
//!   cosigning).
//!
//! `main.rs` parses the command line and opens each log from its configuration.

pub mod answer;
pub mod auth;
pub mod commands;
pub mod config;
pub mod observe;
pub mod routes;
pub mod serve;
pub mod witness;
