//! `tlogd freeze`: freeze a log for good, recorded in its storage so that every
//! frontend obeys it.

use anyhow::bail;

use crate::config::Config;
use crate::logset::storage::Clients;
use crate::logset::{open_log, pick_log};

/// `tlogd freeze`: open the one log, freeze it, publish its final checkpoint, stop.
pub async fn run(c: Config, name: Option<String>) -> anyhow::Result<()> {
    let mut section = pick_log(&c, name.as_deref())?;
    section.read_only = true;
    let opened = open_log(&c, &section, &Clients::default()).await?;
    opened.log.shutdown();
    opened.tasks.join().await;
    let (size, published) = (opened.log.committed_size(), opened.log.published_size());
    if published != Some(size) {
        bail!(
            "the log is frozen at size {size}, but its final checkpoint was not published (a restart publishes it)"
        );
    }
    println!(
        "log {} ({}) is frozen at size {size}",
        section.label(),
        opened.log.origin()
    );
    Ok(())
}
