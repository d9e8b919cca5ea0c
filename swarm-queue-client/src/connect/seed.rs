//! Reading an nkey user seed. A seed is the identity's secret, so it never
//! appears in an error: only the path and what is wrong with the file.

use super::ConnectError;

/// Read and check an nkey user seed file. The seed itself never appears in
/// an error: only the path and what is wrong with it.
pub fn read_nkey_seed(path: &std::path::Path) -> Result<String, ConnectError> {
    let fail = |reason: String| ConnectError::NkeySeed {
        path: path.to_path_buf(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
    if !meta.is_file() {
        return Err(fail("it is not a file".into()));
    }
    // A seed is 58 characters; anything much longer is not a seed file.
    if meta.len() > 4096 {
        return Err(fail(format!("it is {} bytes, not a seed", meta.len())));
    }
    let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
    let seed = nkey_seed(&text).ok_or_else(|| {
        fail(
            "it does not hold an nkey user seed (a line starting with SU, as written by `nk -gen user`)"
                .into(),
        )
    })?;
    nkeys::KeyPair::from_seed(&seed).map_err(|_| {
        fail("its SU… line is not a valid nkey seed (bad checksum or length)".into())
    })?;
    Ok(seed)
}

/// The user nkey seed of a plain seed file (what `nk -gen user` writes: the
/// seed, maybe followed by the public key), or `None` for anything else,
/// which is then read as a decorated `.creds` file. A nats-server whose
/// users are nkeys (the authorization `swarm-controller nats-config` writes)
/// needs the first; an operator/JWT setup the second.
pub(super) fn nkey_seed(contents: &str) -> Option<String> {
    if contents.contains("-----BEGIN") {
        return None;
    }
    contents
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with("SU"))
        .map(str::to_string)
}
