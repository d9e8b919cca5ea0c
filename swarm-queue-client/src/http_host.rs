//! Which `Host` the daemons' HTTP listeners answer: the guard against DNS
//! rebinding, shared by the hive's health listener and the controller's
//! dashboard so the two cannot drift.
//!
//! A web page cannot read a loopback port of another origin, unless it makes
//! its own name resolve to this machine (DNS rebinding): the browser then
//! sends the page's name in `Host`. So a request is answered only when its
//! `Host` names this machine in a way no page can own:
//!
//! - an IP literal (`127.0.0.1:7390`, `[::1]:7380`, `10.0.0.5:7390`): a page
//!   always has a name, never a bare address, as its origin;
//! - `localhost` and names under `.localhost` (RFC 6761: they never leave
//!   the machine);
//! - this machine's own host name, whole or its first label;
//! - a name the operator listed (`http_allowed_hosts`), for scrapers and
//!   reverse proxies that reach the listener by a DNS name.
//!
//! A request with no `Host` at all is answered: browsers always send one,
//! and old HTTP/1.0 probes do not.

/// The rule, with what this machine is called and what the operator added.
#[derive(Debug, Clone, Default)]
pub struct HostRule {
    /// This machine's host name (`gethostname`), if known.
    pub own_hostname: Option<String>,
    /// Extra names from the config, compared without case.
    pub allowed: Vec<String>,
}

impl HostRule {
    /// The rule for this machine: its host name from `/proc` (Linux) or the
    /// `HOSTNAME` variable, plus `allowed`.
    pub fn for_this_machine(allowed: Vec<String>) -> HostRule {
        let own_hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty());
        HostRule {
            own_hostname,
            allowed: allowed
                .into_iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
        }
    }

    /// `Ok` when a request with this `Host` header (its value, if any) may
    /// be answered; otherwise the refusal, naming the host.
    pub fn check(&self, host_header: Option<&str>) -> Result<(), HostRefused> {
        let Some(value) = host_header else {
            return Ok(());
        };
        let host = host_part(value).to_ascii_lowercase();
        let host = host.trim_end_matches('.');
        let own = self.own_hostname.as_deref();
        let allowed = host.parse::<std::net::IpAddr>().is_ok()
            || host == "localhost"
            || host.ends_with(".localhost")
            || own.is_some_and(|o| host == o || Some(host) == o.split('.').next())
            || self.allowed.iter().any(|a| a.trim_end_matches('.') == host);
        if allowed {
            Ok(())
        } else {
            Err(HostRefused {
                host: value.chars().take(256).collect(),
            })
        }
    }
}

/// Check one configured `http_allowed_hosts` entry: a host name alone,
/// with no port, scheme, path or wildcard.
pub fn check_allowed_name(name: &str) -> Result<(), BadAllowedHost> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .split('.')
            .all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    if ok {
        Ok(())
    } else {
        Err(BadAllowedHost {
            name: name.chars().take(256).collect(),
        })
    }
}

/// An `http_allowed_hosts` entry that is not a plain host name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "http_allowed_hosts entry {name:?} is not a host name: give the name alone, like \
     \"metrics.example.org\" (no port, scheme, path or wildcard; IP addresses and localhost \
     are always answered)"
)]
pub struct BadAllowedHost {
    pub name: String,
}

/// A request whose `Host` names no address of this machine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "Host {host:?} does not name this machine: a web page that resolved its own name to \
     this address (DNS rebinding) is refused; reach it by its IP address or localhost, or \
     add the name to http_allowed_hosts"
)]
pub struct HostRefused {
    /// The header as sent, cut to 256 characters.
    pub host: String,
}

/// The host of a `Host` value: without the port, without IPv6 brackets.
fn host_part(value: &str) -> &str {
    let value = value.trim();
    if let Some(rest) = value.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match value.rsplit_once(':') {
        // One colon: host:port. More: a bare IPv6 address.
        Some((host, port)) if !host.contains(':') && port.chars().all(|c| c.is_ascii_digit()) => {
            host
        }
        _ => value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> HostRule {
        HostRule {
            own_hostname: Some("hive-7.fleet.example".into()),
            allowed: vec!["metrics.internal".into()],
        }
    }

    #[test]
    fn names_no_page_can_own_are_answered() {
        for host in [
            None,
            Some("127.0.0.1:7390"),
            Some("127.0.0.1"),
            Some("[::1]:7380"),
            Some("::1"),
            Some("10.1.2.3:7390"),
            Some("localhost:7390"),
            Some("LOCALHOST"),
            Some("app.localhost:7380"),
            Some("localhost."),
            Some("hive-7.fleet.example:7390"),
            Some("hive-7:7390"),
            Some("Metrics.Internal:9100"),
        ] {
            assert_eq!(rule().check(host), Ok(()), "{host:?}");
        }
    }

    #[test]
    fn any_other_name_is_refused_and_named() {
        for host in [
            "evil.example:7390",
            "evil.example",
            "localhost.evil.example",
            "127.0.0.1.nip.io:7390",
            "hive-7.evil.example",
            "fleet.example",
            "",
            "[evil]:80",
        ] {
            let e = rule().check(Some(host)).unwrap_err();
            assert_eq!(e.host, host);
            assert!(e.to_string().contains(&format!("{host:?}")), "{e}");
            assert!(e.to_string().contains("http_allowed_hosts"), "{e}");
        }
    }

    #[test]
    fn an_allowed_host_is_a_plain_name() {
        for good in ["metrics.internal", "a", "hive-7.fleet.example"] {
            assert_eq!(check_allowed_name(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "host:9100",
            "http://x",
            "*.example",
            "a..b",
            "x/y",
            "sp ace",
        ] {
            let e = check_allowed_name(bad).unwrap_err();
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn a_long_host_is_cut_in_the_refusal() {
        let long = "a".repeat(10_000);
        assert_eq!(rule().check(Some(&long)).unwrap_err().host.len(), 256);
    }
}
