//! Bollard's errors as typed [`RuntimeError`]s that name what was
//! attempted: an unreachable dockerd, a timeout, a missing image or
//! container, a taken name, and a registry's refusal of a pull, which
//! names the registry and which login was sent, never the password.

use bollard::errors::Error as BollardError;

use super::{DockerRuntime, REQUEST_TIMEOUT_SECS};
use crate::agents::runtime::registry_auth::{registry_of, Login};
use crate::agents::runtime::RuntimeError;

impl DockerRuntime {
    /// The login for `image`'s registry, read afresh if the file changed.
    pub(super) fn login_for(&self, image: &str) -> Result<Option<Login>, RuntimeError> {
        match &self.registry_auth {
            None => Ok(None),
            Some(auth) => Ok(auth.login_for(image)?),
        }
    }

    /// A failed pull as an error: a refusal by the registry names the
    /// registry and which login was sent; no message keeps the password.
    pub(super) fn pull_failed(
        &self,
        image: &str,
        login: Option<&Login>,
        message: String,
    ) -> RuntimeError {
        let message = login.map_or(message.clone(), |l| l.scrub(&message));
        if !is_auth_refusal(&message) {
            return RuntimeError::Pull {
                image: image.to_string(),
                message,
            };
        }
        let registry = registry_of(image);
        let login = match (login, &self.registry_auth) {
            (Some(l), Some(auth)) => format!(
                "the login of user {:?} from {} was refused; check it",
                l.username,
                auth.path().display()
            ),
            (None, Some(auth)) => {
                format!("{} holds no login for {registry}", auth.path().display())
            }
            _ => "the hive has no registry_auth_file, so no login was sent".to_string(),
        };
        RuntimeError::RegistryDenied {
            registry,
            image: image.to_string(),
            message,
            login,
        }
    }

    pub(super) fn unreachable(&self, e: &BollardError) -> RuntimeError {
        let reason = match e {
            BollardError::SocketNotFoundError(path) => format!("the socket {path} does not exist"),
            other => crate::error_chain(other),
        };
        RuntimeError::Unreachable {
            host: self.host.clone(),
            reason,
        }
    }

    /// Turn a bollard error into a typed one, naming what was attempted.
    pub(super) fn classify(&self, op: &'static str, target: &str, e: BollardError) -> RuntimeError {
        match e {
            BollardError::RequestTimeoutError => RuntimeError::Timeout {
                host: self.host.clone(),
                op,
                target: target.to_string(),
                secs: REQUEST_TIMEOUT_SECS,
            },
            BollardError::SocketNotFoundError(_)
            | BollardError::HyperLegacyError { .. }
            | BollardError::IOError { .. }
            | BollardError::HttpClientError { .. } => self.unreachable(&e),
            // A start of a container whose network is gone (removed behind
            // the hive's back) is no missing container: say what is missing.
            BollardError::DockerResponseServerError {
                status_code: 404,
                ref message,
            } if op == "start" && message.contains("network") => RuntimeError::Docker {
                op,
                target: format!(
                    "{target} (its network is gone; `hive rebuild` makes the container and \
                     the network again)"
                ),
                source: Box::new(e),
                transient: false,
            },
            BollardError::DockerResponseServerError {
                status_code: 404,
                message,
            } => match op {
                "pull" | "create" | "build" => RuntimeError::NoSuchImage {
                    image: target.to_string(),
                    message,
                },
                _ => RuntimeError::NoSuchContainer {
                    container: target.to_string(),
                },
            },
            BollardError::DockerResponseServerError {
                status_code: 409,
                message,
            } if op == "create" => RuntimeError::NameTaken {
                name: target.to_string(),
                message,
            },
            BollardError::DockerResponseServerError { status_code, .. } => {
                let transient = status_code == 503 || status_code == 429;
                RuntimeError::Docker {
                    op,
                    target: target.to_string(),
                    source: Box::new(e),
                    transient,
                }
            }
            other => RuntimeError::Docker {
                op,
                target: target.to_string(),
                source: Box::new(other),
                transient: false,
            },
        }
    }
}

/// Whether dockerd's message says the registry wants (other) credentials.
fn is_auth_refusal(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "unauthorized",
        "authentication required",
        "no basic auth credentials",
        "denied",
        "incorrect username or password",
    ]
    .iter()
    .any(|needle| m.contains(needle))
}
