//! The route families a log serves, each in its own module: tlog-tiles reads and adds
//! ([`tiles`]), Certificate Transparency submissions and reads ([`ct`]) and a CT
//! shard's log-list entry ([`ct_shard`]), batches other frontends forward
//! ([`forward`]), and the page a browser gets at a log's root ([`home`]). Each answers through [`crate::answer`]; [`crate::serve::router`]
//! puts them together.

pub(crate) mod cache;
pub mod ct;
pub mod ct_roots;
pub mod ct_shard;
pub mod forward;
pub(crate) mod home;
pub mod tiles;
pub mod validation;
