//! tlogd-http: the HTTP plumbing shared by tlogd's server and the clients that read and
//! write logs (`tlogd verify`, `tlog-loadgen`, a frontend forwarding adds, a witness
//! client). The logs' formats are not here; only how bytes travel.
//!
//! * [`client`]: a lean keep-alive client (HTTP/1.1 on plain TCP driven by the calling
//!   task, TLS through hyper, h2c with a shared connection pool);
//! * [`yield_first`]: HTTP/2 connections driven so that many streams' frames leave in
//!   one write (the client's h2c pool, and tlogd's server).

pub mod client;
pub mod yield_first;
