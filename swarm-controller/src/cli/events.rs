//! The event verbs of the command line: `deploy`, `credential put`,
//! `credential delete`, `credential xkey` and `knowledge-changed`. Each
//! checks its arguments against the roster, does one thing through the
//! library modules, prints the outcome (text or `--json`) and returns the
//! exit code.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use swarm_queue_client::credentials::XKey;
use swarm_queue_client::event_stream::Event;
use swarm_queue_client::outln;
use swarm_queue_client::{AccountName, AgentName, HiveName};

use swarm_queue_client::cli::{print_json, EXIT_FAILURE, EXIT_OK};

use super::support::CONNECT_WAIT;
use crate::config::Config;
use crate::credential::{self, CredentialPutError};
use crate::{audit, deploy, knowledge, nats};

/// The arguments of `credential put`.
#[derive(Debug, clap::Args)]
pub(crate) struct CredentialPut {
    hive: HiveName,
    agent: AgentName,
    account: AccountName,
    /// File holding the secret (read as bytes; never printed or logged).
    #[arg(long, value_name = "FILE")]
    from_file: PathBuf,
    #[arg(long)]
    json: bool,
}

/// The arguments of `credential delete`.
#[derive(Debug, clap::Args)]
pub(crate) struct CredentialDelete {
    hive: HiveName,
    agent: AgentName,
    account: AccountName,
    #[arg(long)]
    json: bool,
}

/// How `deploy` was asked to run.
pub(crate) struct DeployArgs {
    pub hive: HiveName,
    pub agent: AgentName,
    /// How long to wait for the hive's reply.
    pub timeout: Duration,
    pub json: bool,
}

/// `deploy HIVE AGENT`: ask the hive to deploy now; exit 0 once it queued.
pub(crate) async fn deploy_cmd(config: &Config, args: DeployArgs) -> anyhow::Result<i32> {
    let DeployArgs {
        ref hive,
        ref agent,
        timeout,
        json,
    } = args;
    if !config.hives.contains_key(hive) {
        bail!(
            "hive {hive} is not on the roster in {}",
            config.path.display()
        );
    }
    let conn = nats::connect(&config.nats, CONNECT_WAIT).await?;
    let outcome = deploy::request(&conn.client, hive, agent, timeout).await;
    let mut event = Event::new("deploy").touching(std::slice::from_ref(hive));
    event.agent = Some(agent.clone());
    audit::record(
        &conn.client,
        &config.events,
        event.said(outcome.to_string()),
    )
    .await;
    if json {
        print_json(&outcome)?;
    } else {
        outln!("{hive}/{agent}: {outcome}");
    }
    Ok(if outcome.is_queued() {
        EXIT_OK
    } else {
        EXIT_FAILURE
    })
}

/// `credential xkey`: the controller's public xkey.
pub(crate) fn xkey_cmd(config: &Config) -> anyhow::Result<i32> {
    let key = controller_xkey(config)?;
    outln!("{}", key.public_key());
    Ok(EXIT_OK)
}

/// `credential put`: seal, store, notify.
pub(crate) async fn credential_put_cmd(config: &Config, put: CredentialPut) -> anyhow::Result<i32> {
    let CredentialPut {
        hive,
        agent,
        account,
        from_file,
        json,
    } = put;
    if !config.hives.contains_key(&hive) {
        return Err(CredentialPutError::NotRostered { hive }.into());
    }
    let key = controller_xkey(config)?;
    let secret = credential::read_secret_file(&from_file)?;
    let conn = nats::connect(&config.nats, CONNECT_WAIT).await?;
    let buckets = nats::open_buckets(&conn, &config.nats).await?;
    let cx = credential::PutContext {
        client: &conn.client,
        status: &buckets.status,
        credentials: &buckets.credentials,
        controller: &key,
        stale_after: config.stale_after,
    };
    let owner = credential::CredentialFor {
        hive: &hive,
        agent: &agent,
        account: &account,
    };
    let stored = credential::put(&cx, owner, secret).await;
    let mut event = Event::new("credential_put").touching(std::slice::from_ref(&hive));
    event.agent = Some(agent.clone());
    let said = match &stored {
        Ok(s) => format!(
            "account {account}: stored {} (revision {})",
            s.key, s.revision
        ),
        Err(e) => format!("account {account}: failed: {e}"),
    };
    audit::record(&conn.client, &config.events, event.said(said)).await;
    let stored = stored?;
    if json {
        print_json(&stored)?;
    } else {
        outln!(
            "stored {} (revision {}) sealed to hive {hive}, and notified it",
            stored.key,
            stored.revision
        );
        if let Some(note) = &stored.hive_not_fresh {
            outln!("note: {note}; it delivers stored credentials when it starts");
        }
    }
    Ok(EXIT_OK)
}

/// `credential delete`: write the delete marker, notify.
pub(crate) async fn credential_delete_cmd(
    config: &Config,
    args: CredentialDelete,
) -> anyhow::Result<i32> {
    let CredentialDelete {
        hive,
        agent,
        account,
        json,
    } = args;
    if !config.hives.contains_key(&hive) {
        return Err(CredentialPutError::NotRostered { hive }.into());
    }
    let conn = nats::connect(&config.nats, CONNECT_WAIT).await?;
    let buckets = nats::open_buckets(&conn, &config.nats).await?;
    let cx = credential::DeleteContext {
        client: &conn.client,
        status: &buckets.status,
        credentials: &buckets.credentials,
        stale_after: config.stale_after,
    };
    let owner = credential::CredentialFor {
        hive: &hive,
        agent: &agent,
        account: &account,
    };
    let deleted = credential::delete(&cx, owner).await;
    let mut event = Event::new("credential_delete").touching(std::slice::from_ref(&hive));
    event.agent = Some(agent.clone());
    let said = match &deleted {
        Ok(d) => format!(
            "account {account}: deleted {} (revision {})",
            d.key, d.revision
        ),
        Err(e) => format!("account {account}: failed: {e}"),
    };
    audit::record(&conn.client, &config.events, event.said(said)).await;
    let deleted = deleted?;
    if json {
        print_json(&deleted)?;
    } else {
        let again = if deleted.already_deleted {
            " again"
        } else {
            ""
        };
        outln!(
            "deleted {} (revision {}){again}, and told hive {hive} to remove the file",
            deleted.key,
            deleted.revision
        );
        if let Some(note) = &deleted.hive_not_fresh {
            outln!("note: {note}; it removes the file when it starts");
        }
    }
    Ok(EXIT_OK)
}

/// `knowledge-changed`: tell every hive the knowledge repository moved.
pub(crate) async fn knowledge_cmd(config: &Config) -> anyhow::Result<i32> {
    let conn = nats::connect(&config.nats, CONNECT_WAIT).await?;
    let published = knowledge::publish(&conn.client).await;
    let said = match &published {
        Ok(()) => "published".to_string(),
        Err(e) => format!("failed: {e}"),
    };
    audit::record(
        &conn.client,
        &config.events,
        Event::new("knowledge_changed").said(said),
    )
    .await;
    published?;
    outln!("published {}", swarm_queue_client::subjects::KNOWLEDGE);
    Ok(EXIT_OK)
}

/// The controller's xkey from `xkey_seed_file`, created when missing.
fn controller_xkey(config: &Config) -> Result<XKey, CredentialPutError> {
    let seed_path = config
        .xkey_seed_file
        .as_ref()
        .ok_or(CredentialPutError::NoSeedFile)?;
    credential::load_or_create_seed(seed_path)
}
