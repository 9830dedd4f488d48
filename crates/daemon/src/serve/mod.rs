//! Serving: the listener with its timeouts and connection limits (HTTP/1.1 and h2c,
//! [`server`]; over TLS, [`tls`], with certificates from an ACME CA, [`acme`]) and one log's router ([`router`]). Several logs on one listener, by
//! host and path prefix, are [`crate::logset::routing`]; write authentication is
//! [`crate::auth`].

pub mod acme;
pub mod router;
pub mod server;
pub mod tls;
