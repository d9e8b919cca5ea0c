//! The end-to-end tests that share the machine: one test binary (one link
//! instead of one per file, and the test threads packed with tests from
//! every file), a module per subject, each over the real nats-server,
//! dockerd, registry and browser it names in its own header.
//!
//! Each test starts its own nats-server, and what it makes in the shared
//! dockerd is named by it alone (`unique_name`): the few hives with fixed
//! names (`alpha`, `beta`, `gamma`, `alone`, `cut-off`) are declared no
//! image that exists, so they make no container, and `upgrade_state`'s
//! hive, which makes containers, has a name no other test uses. So any
//! two of these may run side by side. What must not share the machine (a
//! private dockerd, a stopped server, both cores kept busy, a latency
//! printed) is in the `alone` binary instead.
//!
//! Run one module with `cargo test -p hyperhive-tests --test e2e MODULE::`.

mod agent_fields;
mod api_access;
mod audit_events;
mod bad_input;
mod bucket_reset;
mod bucket_settings;
mod consumers;
mod controller_converge;
mod controller_dashboard;
mod controller_serve;
mod controller_status;
mod controller_support;
mod controller_verbs;
mod converge;
mod crash_loop;
mod credential_rotation;
mod dns_rebinding;
mod events;
mod group_values;
mod harness;
mod health;
mod hive_page;
mod hive_status;
mod isolation_bus;
mod isolation_cluster;
mod isolation_credentials;
mod isolation_hive;
mod isolation_permissions;
mod isolation_replies;
mod isolation_secrets;
mod job_store_recovery;
mod jobs_crash;
mod jobs_deploy;
mod jobs_docker_down;
mod leaf_site;
mod leaf_site_permissions;
mod nats_nkey_auth;
mod offline;
mod registry_pull;
mod rollback;
mod rollout;
mod rollout_dashboard;
mod rollout_state;
mod self_heal;
mod supervision;
mod upgrade_accounts;
mod upgrade_state;
mod volumes;
mod wanted_doorbell;
mod wanted_saved;
