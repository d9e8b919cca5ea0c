//! The database schema, as an ordered list of migrations.
//!
//! `PRAGMA user_version` is the number of migrations applied. Each migration
//! runs in its own transaction together with the version bump, so a crash
//! leaves the file at one version or the next, never between. Migrations are
//! only ever appended; an applied one is never edited.
//!
//! `PRAGMA application_id` marks the file as a hive job database, so opening
//! some other SQLite file by mistake is refused instead of "migrated".

/// `hive` in ASCII, as a big-endian integer.
pub const APPLICATION_ID: i32 = 0x6869_7665;

/// Migration `i` takes the schema from version `i` to `i + 1`.
pub const MIGRATIONS: &[&str] = &[
    // 1: jobs, nodes, power intent, installed agents, cleanup journal.
    r#"
    CREATE TABLE jobs (
        id             INTEGER PRIMARY KEY AUTOINCREMENT,
        agent          TEXT    NOT NULL,
        kind           TEXT    NOT NULL,
        -- The whole JobRequest as JSON: everything the job needs to finish.
        request        TEXT    NOT NULL,
        state          TEXT    NOT NULL,
        -- The failed node's error chain, when state = 'failed'.
        error          TEXT,
        created_at_ms  INTEGER NOT NULL,
        started_at_ms  INTEGER,
        finished_at_ms INTEGER
    );
    CREATE INDEX jobs_by_agent ON jobs (agent, state, id);
    CREATE INDEX jobs_by_finish ON jobs (state, finished_at_ms);

    CREATE TABLE nodes (
        job_id         INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
        seq            INTEGER NOT NULL,
        op             TEXT    NOT NULL,  -- the Op as JSON
        op_name        TEXT    NOT NULL,  -- Op::name(), for queries and people
        deps           TEXT    NOT NULL,  -- JSON array of seq
        state          TEXT    NOT NULL,
        attempts       INTEGER NOT NULL DEFAULT 0,
        not_before_ms  INTEGER NOT NULL DEFAULT 0,
        error          TEXT,
        detail         TEXT,
        started_at_ms  INTEGER,
        finished_at_ms INTEGER,
        PRIMARY KEY (job_id, seq)
    );
    CREATE INDEX nodes_by_state ON nodes (state, not_before_ms);

    CREATE TABLE power (
        agent         TEXT PRIMARY KEY,
        wanted        TEXT    NOT NULL,
        updated_at_ms INTEGER NOT NULL
    );

    CREATE TABLE installed (
        agent         TEXT PRIMARY KEY,
        spec_hash     TEXT    NOT NULL,
        spec          TEXT    NOT NULL,
        image         TEXT    NOT NULL,
        revision      INTEGER,
        updated_at_ms INTEGER NOT NULL
    );

    CREATE TABLE cleanup (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        agent         TEXT    NOT NULL,
        action        TEXT    NOT NULL,  -- CleanupAction as JSON
        attempts      INTEGER NOT NULL DEFAULT 0,
        last_error    TEXT,
        created_at_ms INTEGER NOT NULL
    );
    CREATE INDEX cleanup_by_agent ON cleanup (agent, id);
    "#,
    // 2: the claim walks unfinished jobs oldest first and stops at the
    // first runnable node; without this index it visited every finished
    // job too, and a claim cost grew with the history.
    r#"
    CREATE INDEX jobs_unfinished ON jobs (id) WHERE state IN ('pending', 'running');
    "#,
    // 3: the images this hive pulled or built, per agent, so cleanup
    // removes only its own and keeps each agent's previous one.
    r#"
    CREATE TABLE images (
        image_id       TEXT    NOT NULL,  -- Docker's sha256:… id
        agent          TEXT    NOT NULL,
        reference      TEXT    NOT NULL,  -- as pulled or built
        how            TEXT    NOT NULL,  -- 'pulled' or 'built'
        recorded_at_ms INTEGER NOT NULL,
        PRIMARY KEY (image_id, agent)
    );
    CREATE INDEX images_by_agent ON images (agent, recorded_at_ms);
    "#,
    // 4: how each agent's container last ended, from Docker's events and
    // inspect: the evidence of a crash loop or an OOM kill, and the
    // crash-loop backoff's count, kept across hive restarts.
    r#"
    CREATE TABLE exits (
        agent            TEXT PRIMARY KEY,
        -- The spec label of the container the counts are about.
        spec_hash        TEXT,
        last_code        INTEGER,
        oom_killed       INTEGER NOT NULL DEFAULT 0,
        started_at_ms    INTEGER,
        finished_at_ms   INTEGER,
        -- Exits since the spec last changed, and when the first of them was.
        exits            INTEGER NOT NULL DEFAULT 0,
        first_exit_at_ms INTEGER,
        -- Exits in a row of runs shorter than the backoff's reset time;
        -- an operator's deploy or start sets it back to 0.
        streak           INTEGER NOT NULL DEFAULT 0
    );
    "#,
    // 5: the volumes and networks this hive made for its agents, and which
    // agents used each volume: the only input their removal uses.
    r#"
    CREATE TABLE objects (
        kind          TEXT    NOT NULL,  -- 'volume' or 'network'
        name          TEXT    NOT NULL,  -- as declared; Docker's is hyperhive.<hive>.<name>
        created_at_ms INTEGER NOT NULL,
        PRIMARY KEY (kind, name)
    );
    CREATE TABLE volume_users (
        name  TEXT NOT NULL,
        agent TEXT NOT NULL,
        PRIMARY KEY (name, agent)
    );
    CREATE INDEX volume_users_by_agent ON volume_users (agent);
    "#,
    // 6: the newest declaration jobs were queued for, written with them:
    // a `wanted.json` older than it is not used at start (`applied`).
    r#"
    CREATE TABLE applied (
        id         INTEGER PRIMARY KEY CHECK (id = 0),
        revision   INTEGER NOT NULL,
        created_ns INTEGER
    );
    "#,
];

/// The schema version this build writes.
pub fn latest() -> u32 {
    MIGRATIONS.len() as u32
}
