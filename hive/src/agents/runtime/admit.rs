//! What this hive lets an agent's spec ask of the host, beyond what the
//! contract already bounds: the addresses its ports may bind, held with
//! the directories a host-path volume may mount in [`HostPolicy`]. A spec
//! that asks for more fails its create with an error naming the value, the
//! agent and the rule, and no container is made.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use swarm_queue_client::{AgentName, AgentSpec, HiveName, PortSpec, Protocol};

use super::RuntimeError;

/// The address a port binds when the hive config names none: loopback, so
/// a port is never open to the network unless the operator says so.
pub const DEFAULT_PORT_ADDRESS: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// What the hive config lets agents' specs ask of the host
/// (`port_addresses`, `volume_roots`), validated by the config's loader.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostPolicy {
    /// Addresses a port may bind; the first is where a port without an
    /// address goes. Empty: loopback only ([`DEFAULT_PORT_ADDRESS`]).
    pub port_addresses: Vec<IpAddr>,
    /// Directories a host-path volume may lie in; empty: none may.
    pub volume_roots: Vec<PathBuf>,
}

/// One published port as Docker binds it, its address resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublishedPort {
    pub address: IpAddr,
    pub host: u16,
    pub container: u16,
    pub protocol: Protocol,
}

impl PublishedPort {
    /// Docker's key for the container side, `80/tcp`.
    pub fn container_key(&self) -> String {
        format!("{}/{}", self.container, self.protocol)
    }
}

/// The spec's ports, each on an address the hive config's `port_addresses`
/// allows; a port without one binds the first of them.
pub fn ports(
    agent: &AgentName,
    spec: &AgentSpec,
    allowed: &[IpAddr],
) -> Result<Vec<PublishedPort>, RuntimeError> {
    let allowed = if allowed.is_empty() {
        &[DEFAULT_PORT_ADDRESS][..]
    } else {
        allowed
    };
    let default = allowed[0];
    spec.ports
        .iter()
        .map(|text| {
            let p = PortSpec::parse(text).ok_or_else(|| RuntimeError::Refused {
                agent: agent.clone(),
                what: format!("port {text:?}"),
                rule: format!("a port is {}", swarm_queue_client::PORT_FORM),
            })?;
            let address = p.address.unwrap_or(default);
            if !allowed.contains(&address) {
                let shown: Vec<String> = allowed.iter().map(IpAddr::to_string).collect();
                return Err(RuntimeError::Refused {
                    agent: agent.clone(),
                    what: format!("port {text:?} on {address}"),
                    rule: format!(
                        "a port binds only an address in the hive config's port_addresses ({})",
                        shown.join(", ")
                    ),
                });
            }
            Ok(PublishedPort {
                address,
                host: p.host,
                container: p.container,
                protocol: p.protocol,
            })
        })
        .collect()
}

/// The Docker network an agent joins: `bridge` and `none` are Docker's
/// own; any other name is the hive's network `hyperhive.<hive>.<name>`.
pub fn network_name(hive: &HiveName, spec: &AgentSpec) -> Option<String> {
    use swarm_queue_client::{NETWORK_BRIDGE, NETWORK_NONE};
    spec.network.as_ref().map(|n| match n.as_str() {
        NETWORK_BRIDGE | NETWORK_NONE => n.to_string(),
        other => object_name(hive, other),
    })
}

/// The Docker name of a volume or network the hive makes for its agents.
pub fn object_name(hive: &HiveName, name: &str) -> String {
    format!("hyperhive.{hive}.{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(ports: &[&str]) -> AgentSpec {
        AgentSpec {
            image: Some("i".into()),
            ports: ports.iter().map(|p| p.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn ports_bind_an_allowed_address_only() {
        let a = AgentName::new("web").unwrap();
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let pub4: IpAddr = "10.1.2.3".parse().unwrap();
        let got = ports(&a, &spec(&["8080:80"]), &[]).unwrap();
        assert_eq!(got[0].address, lo);
        assert_eq!(got[0].container_key(), "80/tcp");
        let got = ports(&a, &spec(&["8080:80/udp"]), &[pub4, lo]).unwrap();
        assert_eq!(got[0].address, pub4, "the first allowed is the default");
        let err = ports(&a, &spec(&["10.1.2.3:8080:80"]), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("10.1.2.3") && err.contains("port_addresses (127.0.0.1)"),
            "{err}"
        );
        let err = ports(&a, &spec(&["0.0.0.0:8080:80"]), &[lo])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("agent web") && err.contains("0.0.0.0"),
            "{err}"
        );
        ports(
            &a,
            &spec(&["0.0.0.0:8080:80"]),
            &["0.0.0.0".parse().unwrap()],
        )
        .unwrap();
    }

    #[test]
    fn networks_are_dockers_or_the_hives() {
        let h = HiveName::new("alpha").unwrap();
        let with = |n: &str| AgentSpec {
            network: Some(swarm_queue_client::ObjectName::new(n).unwrap()),
            ..Default::default()
        };
        assert_eq!(network_name(&h, &AgentSpec::default()), None);
        assert_eq!(network_name(&h, &with("none")).as_deref(), Some("none"));
        assert_eq!(network_name(&h, &with("bridge")).as_deref(), Some("bridge"));
        assert_eq!(
            network_name(&h, &with("backend")).as_deref(),
            Some("hyperhive.alpha.backend")
        );
    }
}
