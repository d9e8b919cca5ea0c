//! The JSON API and the server-sent events: one row per KV update,
//! filters, paging, bad values, and the attention page.

use super::*;

#[tokio::test]
async fn api_and_events_push_one_row_per_update() {
    let env = Env::new(&["alpha", "beta"], "stale_after_secs = 2").await;
    env.put_status(&hive_status("beta", HiveState::Ok, None, None, vec![]))
        .await;
    let (_serve, base) = env.serve("serve.log").await;

    // /api/status has the shape of status --json.
    let api = get_json(&format!("{base}/api/status")).await;
    let cli = env.status().await;
    let names = |doc: &serde_json::Value| -> Vec<String> {
        doc["hives"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&api), names(&cli));
    assert_eq!(api["summary"]["line"], cli["summary"]["line"]);
    for key in ["name", "freshness", "age_secs", "convergence", "reason"] {
        assert!(api["hives"][0].get(key).is_some(), "{key} missing: {api}");
    }

    let mut events = Events::open(&base).await;
    let (name, snapshot) = events.next().await;
    assert_eq!(name, "snapshot");
    assert_eq!(names(&snapshot), ["alpha", "beta"]);

    let before = get_json(&format!("{base}/api/stats")).await;
    env.put_status(&hive_status("alpha", HiveState::Ok, None, None, vec![]))
        .await;
    let (name, push) = events.next().await;
    assert_eq!(name, "row");
    assert_eq!(push["row"]["name"], "alpha");
    assert_eq!(push["row"]["freshness"], "fresh");
    assert_eq!(push["summary"]["hives"], 2, "{push}");
    assert!(
        push["summary"]["freshness"]["fresh"].as_u64().unwrap() >= 1,
        "{push}"
    );
    // One update decoded exactly one value: no re-read of the bucket.
    let after = get_json(&format!("{base}/api/stats")).await;
    assert_eq!(
        after["values_decoded"].as_u64().unwrap() - before["values_decoded"].as_u64().unwrap(),
        1,
        "{before} -> {after}"
    );

    // With no KV update at all, beta and then alpha are pushed as stale.
    let mut stale = BTreeSet::new();
    while stale.len() < 2 {
        let (name, push) = events.next().await;
        assert_eq!(name, "row");
        if push["row"]["freshness"] == "stale" {
            stale.insert(push["row"]["name"].as_str().unwrap().to_string());
        }
    }
    let last = get_json(&format!("{base}/api/stats")).await;
    assert_eq!(
        last["values_decoded"], after["values_decoded"],
        "expiry decodes nothing"
    );

    // A removed unrostered key is pushed as a removal.
    env.put_status(&hive_status("stray", HiveState::Ok, None, None, vec![]))
        .await;
    loop {
        let (name, push) = events.next().await;
        if name == "row" && push["row"]["name"] == "stray" {
            assert_eq!(push["row"]["freshness"], "unrostered");
            break;
        }
    }
    // A delete, not a purge: the status bucket refuses rollup headers (a
    // purge is one), so that no hive can wipe another's status with one.
    env.status.delete("stray").await.unwrap();
    loop {
        let (name, push) = events.next().await;
        if name == "remove" {
            assert_eq!(push["name"], "stray");
            break;
        }
    }
    let page = reqwest::get(format!("{base}/"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("EventSource"), "dashboard page served");
}

#[tokio::test]
async fn api_status_and_events_filter_and_page_and_bad_values_get_400() {
    let env = Env::new(&["alpha", "beta", "gamma", "delta"], "").await;
    for hive in ["alpha", "beta"] {
        env.put_status(&hive_status(hive, HiveState::Ok, None, None, vec![]))
            .await;
    }
    let (_serve, base) = env.serve("serve.log").await;
    let names = |doc: &serde_json::Value| -> Vec<String> {
        doc["hives"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_string())
            .collect()
    };
    let api = |q: &str| {
        let url = format!("{base}/api/status?{q}");
        async move { get_json(&url).await }
    };
    // gamma and delta never reported: unknown, so they need attention.
    let doc = api("freshness=unknown").await;
    assert_eq!(
        (names(&doc), doc["matched"].clone()),
        (vec!["delta".to_string(), "gamma".into()], 2.into())
    );
    assert_eq!(names(&api("attention=true").await), ["delta", "gamma"]);
    assert_eq!(
        names(&api("sort=attention").await),
        ["delta", "gamma", "alpha", "beta"]
    );
    assert_eq!(
        api("sort=attention").await["hives"][0]["attention"]["kind"],
        "unknown"
    );
    assert_eq!(names(&api("label=test=yes&name=al").await), ["alpha"]);
    assert_eq!(names(&api("label=test=no").await), Vec::<String>::new());
    assert_eq!(
        names(&api("convergence=unknown&freshness=fresh").await),
        ["alpha", "beta"]
    );
    let doc = api("offset=1&limit=2").await;
    assert_eq!(names(&doc), ["beta", "delta"]);
    assert_eq!(
        (
            doc["matched"].clone(),
            doc["offset"].clone(),
            doc["limit"].clone()
        ),
        (4.into(), 1.into(), 2.into())
    );
    assert_eq!(
        doc["summary"]["hives"], 4,
        "the summary is the whole fleet's"
    );
    assert_eq!(doc["summary"]["attention"], 2);

    for (path, q, named) in [
        ("api/status", "freshness=stal", "freshness=\"stal\""),
        ("api/status", "convergence=ok", "convergence=\"ok\""),
        ("api/status", "limit=0", "limit=\"0\""),
        ("api/status", "sort=age", "sort=\"age\""),
        ("api/status", "label=nokey", "label=\"nokey\""),
        ("api/status", "bogus=1", "\"bogus\""),
        ("api/events", "attention=maybe", "attention=\"maybe\""),
    ] {
        let resp = reqwest::get(format!("{base}/{path}?{q}")).await.unwrap();
        assert_eq!(resp.status(), 400, "{path}?{q}");
        let body: serde_json::Value = resp.json().await.unwrap();
        let error = body["error"].as_str().unwrap();
        assert!(error.contains(named), "{path}?{q}: {error}");
    }

    // A page of one unknown hive: the snapshot holds it alone.
    let mut events = Events::open_query(&base, "freshness=unknown&limit=1").await;
    let (name, snapshot) = events.next().await;
    assert_eq!(name, "snapshot");
    assert_eq!(names(&snapshot), ["delta"]);
    assert_eq!(snapshot["matched"], 2);
    // alpha is neither shown nor matching: nothing at all is sent for it,
    // so the next event is gamma's, which left the filter: counts only.
    env.put_status(&hive_status(
        "alpha",
        HiveState::Degraded,
        None,
        None,
        vec![],
    ))
    .await;
    env.put_status(&hive_status("gamma", HiveState::Ok, None, None, vec![]))
        .await;
    let (name, push) = events.next().await;
    assert_eq!(name, "summary", "{push}");
    assert_eq!(push["view"]["matched"], 1);
    assert!(push.get("row").is_none());
    // delta, the shown hive, leaves the filter: removed from the page.
    env.put_status(&hive_status("delta", HiveState::Ok, None, None, vec![]))
        .await;
    let (name, push) = events.next().await;
    assert_eq!(
        (name.as_str(), push["name"].as_str()),
        ("remove", Some("delta"))
    );
    assert_eq!(push["view"]["matched"], 0);
}

#[tokio::test]
async fn a_declaration_progressing_too_long_enters_the_attention_page_with_no_kv_update() {
    let env = Env::new(&["alpha"], "attention_progressing_secs = 2").await;
    let mut agents = std::collections::BTreeMap::new();
    agents.insert(agent("bot"), image_spec("local/bot:1"));
    let declaration =
        swarm_queue_client::encode_pretty(&swarm_queue_client::Declaration::new(agents)).unwrap();
    let rev = env
        .wanted
        .put("alpha", Bytes::from(declaration))
        .await
        .unwrap();
    // The hive read the revision and works on it: progressing.
    env.put_status(&hive_status(
        "alpha",
        HiveState::Ok,
        Some(rev),
        None,
        vec![],
    ))
    .await;
    let (_serve, base) = env.serve("serve.log").await;
    let mut events = Events::open_query(&base, "attention=true").await;
    let (name, snapshot) = events.next().await;
    assert_eq!(name, "snapshot");
    let decoded = get_json(&format!("{base}/api/stats")).await["values_decoded"].clone();
    let row = match snapshot["hives"].as_array().unwrap().first() {
        // A slow machine: it was already over the threshold at the snapshot.
        Some(row) => {
            println!("already in the snapshot");
            row.clone()
        }
        None => loop {
            let (name, push) = events.next().await;
            if name == "row" {
                break push["row"].clone();
            }
        },
    };
    assert_eq!(row["name"], "alpha");
    assert_eq!(row["convergence"], "progressing");
    assert_eq!(row["attention"]["kind"], "slow_progress", "{row}");
    println!("{}", row["attention"]["why"]);
    let after = get_json(&format!("{base}/api/stats")).await["values_decoded"].clone();
    assert_eq!(decoded, after, "no KV value read: time alone moved it");
    let doc = get_json(&format!("{base}/api/status?attention=true")).await;
    assert_eq!(doc["summary"]["attention"], 1);
}

/// `/metrics` in Prometheus' text: `name{labels}` to value.
async fn scrape(base: &str) -> std::collections::BTreeMap<String, f64> {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

#[tokio::test]
async fn metrics_count_the_fleet_by_state_and_the_open_streams_never_one_series_per_hive() {
    let env = Env::new(&["alpha", "beta", "gamma"], "").await;
    env.put_status(&hive_status("alpha", HiveState::Ok, None, None, vec![]))
        .await;
    let (_serve, base) = env.serve("serve.log").await;
    let api = get_json(&format!("{base}/api/status")).await;
    let m = scrape(&base).await;
    println!("metrics: {m:?}");
    for (f, n) in api["summary"]["freshness"].as_object().unwrap() {
        let key = format!("hyperhive_controller_hives{{freshness=\"{f}\"}}");
        assert_eq!(m[&key], n.as_f64().unwrap(), "{key}");
    }
    for (c, n) in api["summary"]["convergence"].as_object().unwrap() {
        let key = format!("hyperhive_controller_hives_by_convergence{{convergence=\"{c}\"}}");
        assert_eq!(m[&key], n.as_f64().unwrap(), "{key}");
    }
    assert_eq!(m["hyperhive_controller_hives{freshness=\"fresh\"}"], 1.0);
    assert_eq!(m["hyperhive_controller_hives{freshness=\"unknown\"}"], 2.0);
    assert_eq!(
        m["hyperhive_controller_hives_attention"],
        api["summary"]["attention"].as_f64().unwrap()
    );
    assert_eq!(m["hyperhive_controller_sse_clients"], 0.0);
    assert_eq!(m["hyperhive_controller_nats_connected"], 1.0);
    assert_eq!(m["hyperhive_controller_nats_reconnects_total"], 0.0);
    // No hive's name in any series, and no rollout stored: no outcome.
    assert!(m
        .keys()
        .all(|k| !k.contains("alpha") && !k.contains("beta")));
    assert!(m
        .keys()
        .all(|k| !k.starts_with("hyperhive_controller_rollout{")));
    let requests = m["hyperhive_controller_http_requests_total"];

    // An open event stream is counted while it is open.
    let events = Events::open(&base).await;
    let m = scrape(&base).await;
    assert_eq!(m["hyperhive_controller_sse_clients"], 1.0);
    assert!(m["hyperhive_controller_http_requests_total"] >= requests + 2.0);
    drop(events);
    wait_until(T, "the closed stream no longer counted", || async {
        (scrape(&base).await["hyperhive_controller_sse_clients"] == 0.0).then_some(())
    })
    .await;
    // A page elsewhere that rebinds its name here reads nothing.
    let resp = reqwest::Client::new()
        .get(format!("{base}/metrics"))
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 421);
}
