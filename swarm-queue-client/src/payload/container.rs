//! The agent fields that shape its container beyond image and command: the
//! user it runs as, how long a stop may take, the ports it publishes, the
//! volumes it mounts, its network, and what the hive does when its health
//! fails or a credential changes. Each is checked here, in the contract,
//! so a controller refuses a bad value before writing it and a hive
//! refuses the same value on decode.

use std::collections::BTreeMap;
use std::fmt::{self, Display};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::checks::{check_count, check_text};
use super::codec::InvalidField;
use crate::names::{AgentName, ObjectName};

/// Longest stop grace, in seconds (an hour).
pub const MAX_STOP_GRACE_SECS: u64 = 3600;
/// The stop grace when an agent sets none: Docker's own 10 s.
pub const DEFAULT_STOP_GRACE_SECS: u64 = 10;
/// Most published ports per agent.
pub const MAX_PORTS: usize = 16;
/// Most volumes per agent.
pub const MAX_VOLUMES: usize = 16;
/// Longest `user`, host path or container path.
pub const MAX_PATH_LEN: usize = 255;
/// Most failed checks in a row `restart_on_unhealthy` may wait for.
pub const MAX_UNHEALTHY_CHECKS: u32 = 100;

/// What the hive does when one of an agent's credentials changes or is
/// deleted: nothing (the agent reads its file again when it likes), or a
/// restart through the job path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnCredentialChange {
    #[default]
    None,
    Restart,
}

/// A published port's protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        })
    }
}

/// One published port, parsed from `[ADDRESS:]HOST:CONTAINER[/tcp|/udp]`
/// (an IPv6 address in brackets). Without an address the hive binds its
/// configured default; with one, the hive binds it only if its config
/// allows that address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortSpec {
    pub address: Option<IpAddr>,
    pub host: u16,
    pub container: u16,
    pub protocol: Protocol,
}

/// The form every port is quoted with in errors.
pub const PORT_FORM: &str = "[ADDRESS:]HOST:CONTAINER[/tcp|/udp], ports 1 to 65535";

impl PortSpec {
    pub fn parse(text: &str) -> Option<PortSpec> {
        let (rest, protocol) = match text.rsplit_once('/') {
            Some((rest, "tcp")) => (rest, Protocol::Tcp),
            Some((rest, "udp")) => (rest, Protocol::Udp),
            Some(_) => return None,
            None => (text, Protocol::Tcp),
        };
        let (front, container) = rest.rsplit_once(':')?;
        let (address, host) = match front.rsplit_once(':') {
            None => (None, front),
            Some((addr, host)) => {
                let addr = addr
                    .strip_prefix('[')
                    .and_then(|a| a.strip_suffix(']'))
                    .unwrap_or(addr);
                (Some(addr.parse::<IpAddr>().ok()?), host)
            }
        };
        let port = |s: &str| {
            s.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| s.parse::<u16>().ok())
                .flatten()
                .filter(|p| *p > 0)
        };
        Some(PortSpec {
            address,
            host: port(host)?,
            container: port(container)?,
            protocol,
        })
    }
}

/// One mount: a named Docker volume the hive creates for its agents
/// (`name`, shared by every agent of the hive that names it), or a host
/// path (`host`, confined by the hive to its `volume_roots`). A host path
/// is read-only unless `rw = true`; a named volume is writable unless
/// `rw = false`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<ObjectName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Where it appears in the container: an absolute path.
    pub target: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rw: Option<bool>,
}

impl VolumeSpec {
    /// Whether the container may write to it.
    pub fn writable(&self) -> bool {
        self.rw.unwrap_or(self.host.is_none())
    }
}

/// Container paths an agent's volume may not take, nor anything below
/// them: the hive's own mounts. The root itself is refused too.
pub const RESERVED_TARGETS: &[&str] = &[
    crate::containers::STATE_MOUNT,
    crate::containers::KNOWLEDGE_MOUNT,
];

/// The network names that are not a network the hive makes: `bridge` is
/// Docker's default, `none` has no interface but loopback. `host` (the
/// host's own network stack) is refused.
pub const NETWORK_BRIDGE: &str = "bridge";
pub const NETWORK_NONE: &str = "none";

/// An absolute path of plain components: no `..`, no `.`, nothing Docker's
/// mount syntax would split (`:` or `,`), no control character.
fn plain_absolute(field: impl Display + Copy, path: &str) -> Result<(), InvalidField> {
    check_text(field, path, MAX_PATH_LEN)?;
    let plain = path.starts_with('/')
        && !path.contains([':', ','])
        && path
            .split('/')
            .skip(1)
            .all(|c| c != ".." && c != "." && (c.is_empty() || !c.trim().is_empty()));
    if !plain || path.contains("//") {
        return Err(InvalidField::OutOfRange {
            field: field.to_string(),
            value: format!("{path:?}"),
            allowed: "an absolute path without '..', '.', '//', ':' or ','".into(),
        });
    }
    Ok(())
}

pub(super) fn check_user(field: impl Display + Copy, user: &str) -> Result<(), InvalidField> {
    check_text(field, user, 64)?;
    let part = |s: &str| {
        !s.is_empty()
            && (s.bytes().all(|b| b.is_ascii_digit()) && s.parse::<u32>().is_ok()
                || s.bytes()
                    .next()
                    .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
                    && s.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)))
    };
    let ok = match user.split_once(':') {
        Some((u, g)) => part(u) && part(g),
        None => part(user),
    };
    if !ok {
        return Err(InvalidField::OutOfRange {
            field: field.to_string(),
            value: format!("{user:?}"),
            allowed: "USER or USER:GROUP, each a number or a name of letters, digits, '_', '.' \
                      and '-'"
                .into(),
        });
    }
    Ok(())
}

pub(super) fn check_ports(
    field: impl Display + Copy,
    ports: &[String],
) -> Result<Vec<PortSpec>, InvalidField> {
    check_count(field, ports.len(), MAX_PORTS)?;
    ports
        .iter()
        .enumerate()
        .map(|(i, p)| {
            check_text(format_args!("{field}[{i}]"), p, 64)?;
            PortSpec::parse(p).ok_or_else(|| InvalidField::OutOfRange {
                field: format!("{field}[{i}]"),
                value: format!("{p:?}"),
                allowed: PORT_FORM.into(),
            })
        })
        .collect()
}

pub(super) fn check_volumes(
    field: impl Display + Copy,
    volumes: &[VolumeSpec],
) -> Result<(), InvalidField> {
    check_count(field, volumes.len(), MAX_VOLUMES)?;
    let mut targets = BTreeMap::new();
    for (i, v) in volumes.iter().enumerate() {
        let at = format!("{field}[{i}]");
        match (&v.name, &v.host) {
            (Some(_), None) => {}
            (None, Some(host)) => plain_absolute(format_args!("{at}.host"), host)?,
            _ => {
                return Err(InvalidField::OutOfRange {
                    field: at,
                    value: "a volume with both or neither of name and host".into(),
                    allowed: "exactly one of name (a Docker volume) and host (a path)".into(),
                })
            }
        }
        plain_absolute(format_args!("{at}.target"), &v.target)?;
        let target = v.target.trim_end_matches('/');
        let reserved = target.is_empty()
            || RESERVED_TARGETS.iter().any(|r| {
                target
                    .strip_prefix(r)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            });
        if reserved {
            return Err(InvalidField::OutOfRange {
                field: format!("{at}.target"),
                value: format!("{:?}", v.target),
                allowed: "a path outside /, /state and /knowledge, which the hive mounts".into(),
            });
        }
        if let Some(first) = targets.insert(target.to_string(), i) {
            return Err(InvalidField::OutOfRange {
                field: format!("{at}.target"),
                value: format!("{:?}", v.target),
                allowed: format!("a target no other volume takes ({field}[{first}] does)"),
            });
        }
    }
    Ok(())
}

pub(super) fn check_network(
    field: impl Display + Copy,
    network: &ObjectName,
) -> Result<(), InvalidField> {
    if matches!(network.as_str(), "host" | "default") {
        return Err(InvalidField::OutOfRange {
            field: field.to_string(),
            value: format!("{:?}", network.as_str()),
            allowed: "\"bridge\", \"none\" or the name of a network the hive makes (never \
                      \"host\" or \"default\")"
                .into(),
        });
    }
    Ok(())
}

/// The host ports of every agent of one declaration: a host port (with
/// its protocol) published twice on one hive is an error naming both
/// agents. Ports on two different explicit addresses do not clash.
pub(super) fn check_port_clashes<'a>(
    agents: impl Iterator<Item = (&'a AgentName, &'a [String])>,
) -> Result<(), InvalidField> {
    let mut seen: Vec<(PortSpec, &AgentName)> = Vec::new();
    for (agent, ports) in agents {
        for p in ports.iter().filter_map(|p| PortSpec::parse(p)) {
            let clash = seen.iter().find(|(q, _)| {
                q.host == p.host
                    && q.protocol == p.protocol
                    && (q.address.is_none() || p.address.is_none() || q.address == p.address)
            });
            if clash.is_some_and(|(_, first)| *first == agent) {
                return Err(InvalidField::OutOfRange {
                    field: format!("agents.{agent}.ports"),
                    value: format!("{}/{} twice", p.host, p.protocol),
                    allowed: "each host port once".into(),
                });
            }
            if let Some((_, first)) = clash {
                return Err(InvalidField::PortTwice {
                    port: format!("{}/{}", p.host, p.protocol),
                    first: first.to_string(),
                    second: agent.to_string(),
                });
            }
            seen.push((p, agent));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_parse_in_every_form_and_refuse_the_rest() {
        let p = PortSpec::parse("8080:80/tcp").unwrap();
        assert_eq!(
            (p.address, p.host, p.container, p.protocol),
            (None, 8080, 80, Protocol::Tcp)
        );
        let p = PortSpec::parse("127.0.0.1:53:5353/udp").unwrap();
        assert_eq!(p.address, Some("127.0.0.1".parse().unwrap()));
        assert_eq!(p.protocol, Protocol::Udp);
        let p = PortSpec::parse("[::1]:8443:443").unwrap();
        assert_eq!(p.address, Some("::1".parse().unwrap()));
        for bad in [
            "",
            "80",
            "0:80",
            "80:0",
            "70000:80",
            "80:80/sctp",
            "x:80:80",
            "+80:80",
            "80:80/",
            ":80",
            "1.2.3.4::80",
            " 80:80",
        ] {
            assert!(PortSpec::parse(bad).is_none(), "{bad:?} parsed");
        }
    }

    #[test]
    fn users_are_names_or_numbers() {
        for ok in ["1000", "1000:1000", "app", "app:staff", "_svc", "www-data"] {
            check_user("u", ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in ["", ":", "1000:", "a b", "-x", "x;y", "99999999999", "a:b:c"] {
            assert!(check_user("u", bad).is_err(), "{bad:?} passed");
        }
    }

    #[test]
    fn volumes_need_one_source_and_a_free_plain_target() {
        let v = |name: Option<&str>, host: Option<&str>, target: &str| VolumeSpec {
            name: name.map(|n| ObjectName::new(n).unwrap()),
            host: host.map(String::from),
            target: target.into(),
            rw: None,
        };
        check_volumes("v", &[v(Some("cache"), None, "/cache")]).unwrap();
        check_volumes("v", &[v(None, Some("/srv/data"), "/data")]).unwrap();
        for bad in [
            vec![v(None, None, "/x")],
            vec![v(Some("c"), Some("/srv"), "/x")],
            vec![v(None, Some("srv"), "/x")],
            vec![v(None, Some("/srv/../etc"), "/x")],
            vec![v(Some("c"), None, "x")],
            vec![v(Some("c"), None, "/state")],
            vec![v(Some("c"), None, "/state/sub")],
            vec![v(Some("c"), None, "/")],
            vec![v(Some("c"), None, "/knowledge")],
            vec![v(Some("c"), None, "/a:/b")],
            vec![v(Some("c"), None, "/a"), v(Some("d"), None, "/a/")],
        ] {
            assert!(check_volumes("v", &bad).is_err(), "{bad:?} passed");
        }
        assert!(!v(None, Some("/srv"), "/x").writable());
        assert!(v(Some("c"), None, "/x").writable());
    }

    #[test]
    fn a_host_port_twice_names_both_agents() {
        let a = AgentName::new("a").unwrap();
        let b = AgentName::new("b").unwrap();
        let pa = ["8080:80".to_string()];
        let pb = ["127.0.0.1:8080:81/tcp".to_string()];
        let err = check_port_clashes([(&a, &pa[..]), (&b, &pb[..])].into_iter()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "host port 8080/tcp is published by both agent a and agent b; give each its own"
        );
        let pc = ["8080:80/udp".to_string()];
        check_port_clashes([(&a, &pa[..]), (&b, &pc[..])].into_iter()).unwrap();
        let (x, y) = (
            vec!["10.0.0.1:80:80".to_string()],
            vec!["10.0.0.2:80:80".to_string()],
        );
        check_port_clashes([(&a, &x[..]), (&b, &y[..])].into_iter()).unwrap();
    }
}
