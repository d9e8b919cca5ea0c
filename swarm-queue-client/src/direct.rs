//! A hive's whole JetStream use: read one key by direct get, and put its
//! own status key, with no stream info and no consumer.
//!
//! Why: a consumer per hive is server state that grows with the fleet (and
//! nats-server's default cap is 1,000 consumers per stream), and stream info
//! with a subject filter lists every key of a bucket, other hives' included.
//! So a hive learns that a key changed from a core-NATS subscription on the
//! key's own subject (a *doorbell*: the message is not trusted, the stream
//! may have refused it) and then reads the key itself:
//!
//! | operation | request |
//! |---|---|
//! | [`KeyReader::last`] | `$JS.API.DIRECT.GET.KV_<bucket>.$KV.<bucket>.<key>`, empty body |
//! | [`put_own`] | a JetStream publish to `$KV.<bucket>.<key>` with `Nats-Expected-Stream: KV_<bucket>`; the ack comes to the inbox |
//! | [`put_own_key`] in a domain | the same to `$JS.<domain>.API.$KV.<bucket>.<key>` (a leaf-node site) |
//!
//! Neither asks for the stream's info, so neither needs the bucket to be
//! "opened" first. A read gives up after [`READ_TIMEOUT`], not the client's
//! 10 s: a direct get is answered in milliseconds by any replica, and the
//! caller's retry (a new read) is what gets through after a failover. A bucket that does not exist (deleted, or never
//! created) answers both with "no responders", reported as
//! [`ReadKeyError::BucketMissing`] / [`PutOwnError::BucketMissing`] naming
//! the bucket.

use async_nats::jetstream::{self, stream::DirectGetErrorKind};
use async_nats::StatusCode;

use crate::buckets::Bucket;

/// How long [`KeyReader::last`] waits for an answer.
pub const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// What a KV message says about its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyOp {
    Put,
    Delete,
    Purge,
}

/// One key's last message, as the stream holds it.
#[derive(Debug, Clone)]
pub struct KeyEntry {
    pub key: String,
    /// The stream sequence: the key's revision.
    pub revision: u64,
    pub operation: KeyOp,
    pub value: bytes::Bytes,
    /// The server's timestamp of the message.
    pub created: time::OffsetDateTime,
}

/// A key could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadKeyError {
    #[error(
        "KV bucket {bucket} is missing: no server answers a direct get for it (it was deleted, \
         or made without allow_direct, or its JetStream domain is out of reach: a leaf node's \
         link to the hub down); the controller creates it"
    )]
    BucketMissing { bucket: &'static str },
    #[error("reading {key} in {bucket} timed out")]
    TimedOut { bucket: &'static str, key: String },
    #[error("reading {key} in {bucket} failed")]
    Read {
        bucket: &'static str,
        key: String,
        #[source]
        source: jetstream::stream::DirectGetError,
    },
    #[error("{key} in {bucket} came back as {subject}")]
    WrongSubject {
        bucket: &'static str,
        key: String,
        subject: String,
    },
}

/// Reads the last value of a key of one bucket by direct get.
#[derive(Clone, Debug)]
pub struct KeyReader {
    bucket: Bucket,
    stream: jetstream::stream::Stream<()>,
}

impl KeyReader {
    /// No request is sent: the handle only names the stream.
    pub fn new(js: &jetstream::Context, bucket: Bucket) -> Self {
        use futures_util::FutureExt;
        // get_stream_no_info awaits nothing and only checks the name, which
        // is one of three constants (`Bucket::stream_name`).
        let stream = match js.get_stream_no_info(bucket.stream_name()).now_or_never() {
            Some(Ok(stream)) => stream,
            other => unreachable!(
                "get_stream_no_info({}) did not resolve at once: {:?}",
                bucket.stream_name(),
                other.map(|r| r.err())
            ),
        };
        KeyReader { bucket, stream }
    }

    pub fn bucket(&self) -> Bucket {
        self.bucket
    }

    /// The key's last message (a put, delete or purge), or `None` when the
    /// key was never written in this bucket.
    pub async fn last(&self, key: &str) -> Result<Option<KeyEntry>, ReadKeyError> {
        let bucket = self.bucket.name();
        let subject = self.bucket.key_subject(key);
        let timed_out = || ReadKeyError::TimedOut {
            bucket,
            key: key.to_string(),
        };
        let read = self.stream.direct_get_last_for_subject(subject.as_str());
        let message = match tokio::time::timeout(READ_TIMEOUT, read)
            .await
            .map_err(|_| timed_out())?
        {
            Ok(m) => m,
            Err(e) => {
                return match e.kind() {
                    DirectGetErrorKind::NotFound => Ok(None),
                    DirectGetErrorKind::ErrorResponse(StatusCode::NO_RESPONDERS, _) => {
                        Err(ReadKeyError::BucketMissing { bucket })
                    }
                    DirectGetErrorKind::TimedOut => Err(timed_out()),
                    _ => Err(ReadKeyError::Read {
                        bucket,
                        key: key.to_string(),
                        source: e,
                    }),
                }
            }
        };
        if message.subject.as_str() != subject {
            return Err(ReadKeyError::WrongSubject {
                bucket,
                key: key.to_string(),
                subject: message.subject.to_string(),
            });
        }
        let operation = match message
            .headers
            .get("KV-Operation")
            .map(|v| v.as_str().to_string())
            .as_deref()
        {
            Some("DEL") => KeyOp::Delete,
            Some("PURGE") => KeyOp::Purge,
            _ => KeyOp::Put,
        };
        Ok(Some(KeyEntry {
            key: key.to_string(),
            revision: message.sequence,
            operation,
            value: message.payload,
            created: message.time,
        }))
    }
}

/// A put of the identity's own key failed.
#[derive(Debug, thiserror::Error)]
pub enum PutOwnError {
    #[error(
        "KV bucket {bucket} does not exist (no stream stored {key}); the controller creates it"
    )]
    BucketMissing { bucket: &'static str, key: String },
    #[error("put of {key} in {bucket} failed")]
    Publish {
        bucket: &'static str,
        key: String,
        #[source]
        source: jetstream::context::PublishError,
    },
}

/// Put `value` under `key` in `bucket` as a JetStream publish, and wait for
/// the stream's ack. Returns the new revision. The publish carries
/// `Nats-Expected-Stream`, so only the bucket's own stream may store it.
pub async fn put_own(
    js: &jetstream::Context,
    bucket: Bucket,
    key: &str,
    value: bytes::Bytes,
) -> Result<u64, PutOwnError> {
    let own = OwnKey {
        bucket,
        key,
        domain: None,
    };
    put_own_key(js, own, value).await
}

/// The key a [`put_own_key`] writes, and the JetStream domain its bucket is
/// in when that is not the local one.
#[derive(Debug, Clone, Copy)]
pub struct OwnKey<'a> {
    pub bucket: Bucket,
    pub key: &'a str,
    /// `Some` for a bucket reached through a leaf node in another domain:
    /// the put goes to [`Bucket::put_subject`].
    pub domain: Option<&'a str>,
}

/// [`put_own`] for a key whose bucket may be in another JetStream domain.
pub async fn put_own_key(
    js: &jetstream::Context,
    own: OwnKey<'_>,
    value: bytes::Bytes,
) -> Result<u64, PutOwnError> {
    use jetstream::context::PublishErrorKind;
    let OwnKey {
        bucket,
        key,
        domain,
    } = own;
    let name = bucket.name();
    let fail = |source: jetstream::context::PublishError| {
        if source.kind() == PublishErrorKind::StreamNotFound {
            PutOwnError::BucketMissing {
                bucket: name,
                key: key.to_string(),
            }
        } else {
            PutOwnError::Publish {
                bucket: name,
                key: key.to_string(),
                source,
            }
        }
    };
    let message = jetstream::message::PublishMessage::build()
        .payload(value)
        .expected_stream(bucket.stream_name());
    let ack = js
        .send_publish(bucket.put_subject(key, domain), message)
        .await
        .map_err(fail)?
        .await
        .map_err(fail)?;
    Ok(ack.sequence)
}
