//! What the hive lets its agents' specs ask of the host: the addresses a
//! published port may bind (`port_addresses`) and the directories a
//! host-path volume may mount (`volume_roots`), read into the runtime's
//! [`HostPolicy`].

use std::net::IpAddr;
use std::path::PathBuf;

use crate::agents::runtime::admit::HostPolicy;

/// `port_addresses` (IP literals) and `volume_roots` (absolute paths), with
/// a problem naming each bad value.
pub(super) fn host_policy(
    port_addresses: &[String],
    volume_roots: &[PathBuf],
    problems: &mut Vec<String>,
) -> HostPolicy {
    let mut policy = HostPolicy::default();
    for text in port_addresses {
        match text.parse::<IpAddr>() {
            Ok(a) if !policy.port_addresses.contains(&a) => policy.port_addresses.push(a),
            Ok(_) => problems.push(format!("port_addresses: {text:?} is listed twice")),
            Err(_) => problems.push(format!(
                "port_addresses: {text:?} is not an IP address (for example \"127.0.0.1\", \
                 \"0.0.0.0\" or \"::1\")"
            )),
        }
    }
    for root in volume_roots {
        if !root.is_absolute() {
            problems.push(format!(
                "volume_roots: {:?} must be an absolute path",
                root.display().to_string()
            ));
        } else if root.parent().is_none() {
            problems.push(
                "volume_roots: \"/\" would let an agent mount any path of the host; \
                 name the directories agents may mount"
                    .to_string(),
            );
        } else {
            policy.volume_roots.push(root.clone());
        }
    }
    policy
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_are_named() {
        let mut problems = Vec::new();
        let p = host_policy(
            &[
                "127.0.0.1".into(),
                "::1".into(),
                "localhost".into(),
                "::1".into(),
            ],
            &[
                PathBuf::from("/srv/data"),
                PathBuf::from("data"),
                PathBuf::from("/"),
            ],
            &mut problems,
        );
        assert_eq!(p.port_addresses.len(), 2);
        assert_eq!(p.volume_roots, vec![PathBuf::from("/srv/data")]);
        let all = problems.join("\n");
        assert!(all.contains("\"localhost\" is not an IP address"), "{all}");
        assert!(all.contains("\"::1\" is listed twice"), "{all}");
        assert!(all.contains("\"data\" must be an absolute path"), "{all}");
        assert!(all.contains("\"/\" would let"), "{all}");
    }
}
