//! The bodies of `tlogd`'s commands, one module each: [`serve`] (the daemon),
//! [`keygen`], [`verify`], [`freeze`] and [`migrate`]. `main.rs` parses the command line
//! and dispatches to them.

pub mod freeze;
pub mod keygen;
pub mod migrate;
pub mod serve;
pub mod verify;
