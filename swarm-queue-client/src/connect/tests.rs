//! Connection options and config checks, without a server.

use std::path::PathBuf;

use super::seed::nkey_seed;
use super::*;
use crate::buckets::Bucket;

#[test]
fn server_list_is_validated() {
    let c = NatsConfig {
        url: Some("nats://127.0.0.1:4222, nats://127.0.0.1:4223".into()),
        servers: vec!["127.0.0.1:4224".into()],
        ..Default::default()
    };
    assert_eq!(c.server_addrs().unwrap().len(), 3);
    let bad = NatsConfig {
        url: Some("http://[::1".into()),
        ..Default::default()
    };
    let err = bad.server_addrs().unwrap_err().to_string();
    assert!(err.contains("http://[::1"), "{err}");
    assert!(matches!(
        NatsConfig::default().server_addrs(),
        Err(ConnectError::NotConfigured)
    ));
}

#[test]
fn a_plain_seed_file_is_an_nkey_and_a_creds_file_is_not() {
    let seed = "SUAN2V5XOP5JNJO27FILRZ45RVRBB32YC7XPLF7KUGCAA2MVBZOYUTMV24";
    assert_eq!(nkey_seed(seed).as_deref(), Some(seed));
    // `nk -gen user -pubout`: seed, then public key.
    let with_public = format!("{seed}\nUDXIL452LOQQGCB5SWW7VY2X7TWFDBMB6XKYXQ7BJGXOMOWDWGUVME7Y\n");
    assert_eq!(nkey_seed(&with_public).as_deref(), Some(seed));
    let creds = format!(
        "-----BEGIN NATS USER JWT-----\neyJ0eXAi\n------END NATS USER JWT------\n\n\
         -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n"
    );
    assert_eq!(nkey_seed(&creds), None);
    assert_eq!(nkey_seed("not a key\n"), None);
}

#[test]
fn check_reports_every_problem() {
    let c = NatsConfig {
        url: Some("nats://127.0.0.1:4222".into()),
        credentials_file: Some("/nonexistent/x.creds".into()),
        tls: TlsConfig {
            cert_file: Some("/nonexistent/cert.pem".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let problems = c.check();
    assert!(
        problems.iter().any(|p| p.contains("x.creds")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("go together")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("cert.pem")),
        "{problems:?}"
    );
}

#[test]
fn nkey_seed_file_is_checked_and_never_echoed() {
    let dir = tempfile_dir();
    let good = dir.join("good.seed");
    let seed = nkeys::KeyPair::new_user().seed().unwrap();
    let public = nkeys::KeyPair::from_seed(&seed).unwrap().public_key();
    // As `nk -gen user -pubout` writes it: the seed, then the public key.
    std::fs::write(&good, format!("{seed}\n{public}\n")).unwrap();
    assert_eq!(read_nkey_seed(&good).unwrap(), seed);
    let cfg = |p: &std::path::Path| NatsConfig {
        nkey_seed_file: Some(p.to_path_buf()),
        ..Default::default()
    };
    assert!(cfg(&good).check().is_empty(), "{:?}", cfg(&good).check());

    let account = dir.join("account.seed");
    let account_seed = nkeys::KeyPair::new_account().seed().unwrap();
    std::fs::write(&account, &account_seed).unwrap();
    let corrupt = dir.join("corrupt.seed");
    let mut broken = seed.clone();
    // Two characters changed, whatever they were (a seed with "AA" there
    // was left whole once in 1,024 runs, and the test failed).
    let other = if &seed[10..12] == "AA" { "BB" } else { "AA" };
    broken.replace_range(10..12, other);
    std::fs::write(&corrupt, &broken).unwrap();
    let cases = [
        (dir.join("missing.seed"), "cannot read"),
        (account.clone(), "user seed"),
        (corrupt.clone(), "not a valid nkey seed"),
        (dir.clone(), "not a file"),
    ];
    for (path, why) in cases {
        let problems = cfg(&path).check();
        assert_eq!(problems.len(), 1, "{problems:?}");
        let p = &problems[0];
        assert!(
            p.contains(why) && p.contains(&path.display().to_string()),
            "{p}"
        );
        assert!(!p.contains(&account_seed) && !p.contains(&broken), "{p}");
    }
    let both = NatsConfig {
        credentials_file: Some(good.clone()),
        ..cfg(&good)
    };
    assert!(both.check().iter().any(|p| p.contains("give one")));
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempfile_dir() -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "sqc-connect-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn jetstream_domains_are_one_subject_token() {
    assert_eq!(check_domain("hub"), Ok(()));
    assert_eq!(check_domain("site-7_eu"), Ok(()));
    for (bad, why) in [
        ("", "empty"),
        ("a.b", "`.`"),
        ("hub*", "`*`"),
        ("h>", "`>`"),
        ("my hub", "whitespace"),
        (&"x".repeat(65), "longer than 64"),
    ] {
        let e = check_domain(bad).unwrap_err().to_string();
        assert!(e.contains(why) && e.contains(&format!("{bad:?}")), "{e}");
    }
    let c = toml_like(r#"{"url":"nats://a:4222","jetstream_domain":"a.b"}"#);
    assert!(
        c.check()
            .iter()
            .any(|p| p.starts_with("nats.jetstream_domain:") && p.contains("\"a.b\"")),
        "{:?}",
        c.check()
    );
}

#[test]
fn toml_shape() {
    let c: NatsConfig = toml_like(
        r#"{"url":"nats://a:4222","buckets":{"wanted":{"history":5,"storage":"memory","replicas":3}}}"#,
    );
    assert_eq!(c.buckets.get(Bucket::Wanted).replicas, 3);
    assert_eq!(c.buckets.get(Bucket::Status).history, 1);
    // A table that sets only replicas keeps the bucket's own history.
    let c = toml_like(r#"{"buckets":{"wanted":{"replicas":3}}}"#);
    assert_eq!(c.buckets.get(Bucket::Wanted).history, 10);
    let c = toml_like(r#"{"buckets":{"wanted":{"history":0}}}"#);
    assert!(
        c.check()
            .iter()
            .any(|p| p.contains("nats.buckets.wanted.history")),
        "{:?}",
        c.check()
    );
    let err = serde_json::from_str::<NatsConfig>(r#"{"urll":"x"}"#).unwrap_err();
    assert!(err.to_string().contains("urll"), "{err}");
}

/// The deliveries bucket keeps its ids a day by default, between a minute
/// and 30 days; no other bucket may expire entries.
#[test]
fn only_the_deliveries_bucket_has_a_bounded_max_age() {
    let c = NatsConfig::default();
    assert_eq!(c.buckets.get(Bucket::Deliveries).max_age_secs, 86_400);
    assert_eq!(c.buckets.get(Bucket::Wanted).max_age_secs, 0);
    let c = toml_like(r#"{"buckets":{"deliveries":{"max_age_secs":3600}}}"#);
    assert_eq!(c.buckets.get(Bucket::Deliveries).max_age_secs, 3600);
    assert!(!c.check().iter().any(|p| p.contains("max_age")));
    for bad in [0, 59, 30 * 86_400 + 1] {
        let c = toml_like(&format!(
            r#"{{"buckets":{{"deliveries":{{"max_age_secs":{bad}}}}}}}"#
        ));
        let problems = c.check();
        assert!(
            problems.iter().any(|p| p
                == &format!("nats.buckets.deliveries.max_age_secs must be 60 to 2592000 (a minute to 30 days), not {bad}")),
            "{problems:?}"
        );
    }
    let problems = toml_like(r#"{"buckets":{"wanted":{"max_age_secs":60}}}"#).check();
    let wanted = "nats.buckets.wanted.max_age_secs = 60: only the deliveries bucket expires";
    assert!(
        problems.iter().any(|p| p.starts_with(wanted)),
        "{problems:?}"
    );
}

fn toml_like(json: &str) -> NatsConfig {
    serde_json::from_str(json).unwrap()
}

#[test]
fn reconnect_delays_grow_to_5_s_and_are_drawn_below_the_backoff() {
    let ms = Duration::from_millis;
    let backoffs: Vec<Duration> = [0, 1, 2, 3, 11, 51, 52, usize::MAX]
        .into_iter()
        .map(reconnect_backoff)
        .collect();
    assert_eq!(backoffs, [0, 0, 100, 200, 1000, 5000, 5000, 5000].map(ms));
    // Off: the backoff itself, the schedule every hive would share.
    assert_eq!(reconnect_delay(11, &Jitter::none()), ms(1000));
    // On: from [0, backoff], the same draws for the same seed, and not
    // one schedule for two hives.
    let schedule = |seed| {
        let jitter = Jitter::seeded(20, seed);
        (1..=60)
            .map(|n| reconnect_delay(n, &jitter))
            .collect::<Vec<_>>()
    };
    let a = schedule(1);
    assert_eq!(a, schedule(1));
    assert_ne!(a, schedule(2));
    assert_eq!(a[0], Duration::ZERO);
    for (i, d) in a.iter().enumerate() {
        assert!(*d <= reconnect_backoff(i + 1), "attempt {}: {d:?}", i + 1);
    }
    // Over the 10 attempts at the 5 s cap, the draws spread over it.
    let capped = &a[50..];
    assert!(capped.iter().any(|d| *d < ms(2500)) && capped.iter().any(|d| *d > ms(2500)));
}
