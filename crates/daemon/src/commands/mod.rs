//! The bodies of `tlogd`'s commands besides `serve`: `tlogd verify` ([`verify`]) and
//! `tlogd migrate` ([`migrate`]).

pub mod migrate;
pub mod verify;
