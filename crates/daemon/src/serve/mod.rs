//! Serving: the listener with its timeouts and connection limits (HTTP/1.1 and h2c,
//! [`server`]), one log's router ([`router`]), and several logs on one listener by
//! host and path prefix ([`logs`]). Write authentication is [`crate::auth`].

pub mod logs;
pub mod router;
pub mod server;
