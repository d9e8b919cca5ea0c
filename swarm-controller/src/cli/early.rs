//! A one-look `status` begun before its config is read: connected with the
//! config's `[nats]` tables alone, it reads the buckets while the calling
//! thread reads the roster and lays out the fleet.

use std::sync::RwLock;
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;
use time::OffsetDateTime;
use tokio::sync::oneshot;

use swarm_queue_client::NatsConfig;

use super::status::{print_once, rollout_summary, within_load_wait};
use super::support::CONNECT_WAIT;
use crate::config::Config;
use crate::fleet::Fleet;
use crate::nats;
use crate::presence::watch::Watcher;

/// The NATS settings of config `text`, read from its `[nats]` tables
/// alone (with `--nats-url` as [`Config::parse`] applies it), so that a
/// verb can connect while the rest of the file (the roster) is read.
/// `None` when they cannot be told apart by their header lines (the file
/// has a multi-line string, which could hold one) or do not read or check
/// on their own; and what this gives is only a guess at the whole file's:
/// a caller uses a connection made with it only if the checked config's
/// [`Config::nats`] is the same.
pub(super) fn nats_head(text: &str, nats_url: Option<&str>) -> Option<NatsConfig> {
    #[derive(Deserialize)]
    struct Head {
        #[serde(default)]
        nats: NatsConfig,
    }
    if text.contains("\"\"\"") || text.contains("'''") {
        return None;
    }
    let mut head = String::new();
    let mut in_nats = false;
    for line in text.lines() {
        if let Some(header) = line.trim_start().strip_prefix('[') {
            let name = header.trim_start().strip_prefix("nats");
            in_nats = name.is_some_and(|rest| {
                let rest = rest.trim_start();
                rest.starts_with(']') || rest.starts_with('.')
            });
        }
        if in_nats {
            head.push_str(line);
            head.push('\n');
        }
    }
    let nats = toml::from_str::<Head>(&head).ok()?.nats.with_url(nats_url);
    (nats.is_configured() && nats.check().is_empty()).then_some(nats)
}

/// A one-look `status` begun before its config is read: connected with
/// the config's `[nats]` tables alone ([`nats_head`]), it
/// reads the buckets while this thread reads the roster and lays out the
/// fleet (at 10,000 hives the config and the layout took 10 ms before the
/// first read). It stops when dropped.
pub(crate) struct EarlyRead {
    /// What it connected with.
    pub(super) nats: NatsConfig,
    /// Told once the whole config is checked (buckets are made only then).
    config_checked: oneshot::Sender<()>,
    layout: oneshot::Sender<Fleet>,
    linkable: oneshot::Sender<Vec<String>>,
    task: StopOnDrop<anyhow::Result<ReadOnce>>,
}

/// A task that is stopped when its handle is dropped.
struct StopOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for StopOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What [`EarlyRead`] read.
struct ReadOnce {
    fleet: RwLock<Fleet>,
    watcher: Option<Watcher>,
    rollout: Option<serde_json::Value>,
}

impl EarlyRead {
    /// Connect with `nats` and start reading, on `runtime`.
    pub(crate) fn start(runtime: &tokio::runtime::Runtime, nats: NatsConfig) -> EarlyRead {
        tracing::debug!("reading the buckets while the config is read");
        let (layout, laid_out) = oneshot::channel();
        let (linkable, hives) = oneshot::channel();
        let (config_checked, checked) = oneshot::channel();
        let settings = nats.clone();
        let task = StopOnDrop(runtime.spawn(async move {
            let conn = nats::connect(&settings, CONNECT_WAIT).await?;
            // A bucket is made only for a config that has been checked.
            let buckets = match nats::open_existing_buckets(&conn, &settings).await {
                Err(nats::NatsError::BucketMissing(_)) => {
                    checked.await?;
                    nats::open_buckets(&conn, &settings).await?
                }
                opened => opened?,
            };
            // A fleet of no hive, until the laid-out one takes its place.
            let fleet = RwLock::new(Fleet::new(
                Default::default(),
                Duration::ZERO,
                OffsetDateTime::now_utc(),
            ));
            let read = async {
                let read = nats::read_values_before_layout(&buckets, &fleet, laid_out);
                within_load_wait(read).await
            };
            let watcher = async {
                match hives.await {
                    Ok(hives) => Watcher::start(&conn.client, hives).await,
                    Err(_) => None,
                }
            };
            let (read, watcher, rollout) =
                tokio::join!(read, watcher, rollout_summary(&buckets.rollouts));
            read?;
            Ok(ReadOnce {
                fleet,
                watcher,
                rollout,
            })
        }));
        EarlyRead {
            nats,
            config_checked,
            layout,
            linkable,
            task,
        }
    }

    /// Lay out the fleet of `config` for the read, and print what it read.
    pub(super) async fn finish(self, config: Config, json: bool) -> anyhow::Result<i32> {
        let _ = self.config_checked.send(());
        let fleet = Fleet::for_one_look(config);
        let _ = self.linkable.send(fleet.linkable());
        // A read that has failed has dropped its receiver: its error is
        // what the task returns.
        let _ = self.layout.send(fleet);
        let mut task = self.task;
        let read = (&mut task.0).await.context("reading the buckets")??;
        print_once(read.fleet, read.watcher.as_ref(), read.rollout, json)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use swarm_queue_client::Bucket;

    /// `nats_head` of `text`, and the whole file's NATS settings.
    fn head_and_whole(text: &str, nats_url: Option<&str>) -> (Option<NatsConfig>, NatsConfig) {
        let whole = Config::parse(Path::new("c.toml"), text, nats_url).unwrap();
        (nats_head(text, nats_url), whole.nats)
    }

    #[test]
    fn the_nats_head_is_the_whole_files_nats_settings_wherever_its_tables_are() {
        let text = "stale_after_secs = 60\n\
                    [ nats ]  # the hub\n\
                    url = \"nats://127.0.0.1:4222\"\n\
                    name = \"ctl\"\n\
                    [hives.nats]\n\
                    labels = { site = \"a\" }\n\
                    [nats.buckets.status]\n\
                    history = 3\n\
                    [hives.b]\n\
                    [nats . buckets.wanted]\n\
                    replicas = 1\n";
        let (head, whole) = head_and_whole(text, None);
        assert_eq!(head.as_ref(), Some(&whole));
        assert_eq!(whole.buckets.get(Bucket::Status).history, 3);
        assert_eq!(whole.name.as_deref(), Some("ctl"));
        // `--nats-url` as the whole file takes it, with or without a
        // `[nats]` table.
        let url = Some("nats://10.0.0.1:4222");
        let (head, whole) = head_and_whole(text, url);
        assert_eq!(head.as_ref(), Some(&whole));
        let (head, whole) = head_and_whole("[hives.a]\n", url);
        assert_eq!(head.as_ref(), Some(&whole));
    }

    #[test]
    fn no_nats_head_when_its_tables_cannot_be_told_apart_or_name_no_server() {
        // A multi-line string could hold a line that looks like a header.
        // Read line by line, this one would have TLS settings.
        let quoted = "[nats]\nurl = \"nats://127.0.0.1:4222\"\n\
                      [hives.a.labels]\nnote = \"\"\"\n\
                      [nats.tls]\nca_file = \"/etc/hosts\"\n[hives.b]\n\"\"\"\n";
        assert_eq!(nats_head(quoted, None), None);
        let literal = quoted.replace("\"\"\"", "'''");
        assert_eq!(nats_head(&literal, None), None);
        // Settings outside a `[nats]` table are not guessed at.
        assert_eq!(
            nats_head("nats.url = \"nats://127.0.0.1:4222\"\n", None),
            None
        );
        assert_eq!(
            nats_head("nats = { url = \"nats://127.0.0.1:4222\" }\n", None),
            None
        );
        assert_eq!(
            nats_head("[[nats]]\nurl = \"nats://127.0.0.1:4222\"\n", None),
            None
        );
        // No server, a table that does not read, or one that fails its check.
        assert_eq!(nats_head("[nats]\nname = \"ctl\"\n", None), None);
        assert_eq!(
            nats_head(
                "[nats]\nurl = \"nats://127.0.0.1:4222\"\nurl = \"x\"\n",
                None
            ),
            None
        );
        assert_eq!(
            nats_head(
                "[nats]\nurl = \"nats://127.0.0.1:4222\"\nnonsense = 1\n",
                None
            ),
            None
        );
        let missing = "[nats]\nurl = \"nats://127.0.0.1:4222\"\ncredentials_file = \"/nonexistent/x.creds\"\n";
        assert_eq!(nats_head(missing, None), None);
    }
}
