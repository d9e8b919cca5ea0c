//! The JetStream API request subjects the grants are made of.
//!
//! A client's JetStream requests go to `$JS.API.…`, which the server it is
//! connected to answers from its own domain, or to `$JS.<domain>.API.…`
//! when the buckets are in another JetStream domain (a hive on a leaf-node
//! site, `[nats] jetstream_domain`). nats-server checks a client's publish
//! permissions after the account mappings of the server it is connected to
//! (`server/parser.go`: `selectMappedSubject`, then the permission check
//! in `processInboundClientMsg`). A server maps only its *own* domain
//! (`$JS.<own>.API.DIRECT.>` to `$JS.API.DIRECT.>`, `$JS.<own>.API.$KV.>`
//! to `$KV.>`, `generateJSMappingTable` in `server/jetstream_api.go`), so
//! the site server checks a site hive's `$JS.<hub>.API.…` as sent, and the
//! hub maps it when it arrives over the leaf. A grant for a hive that uses
//! a domain therefore names the domain form: [`JsApi`].
//! The free functions are the default domain's, which the controller and
//! hives without a domain use; tests use them to name what the server
//! refused.

use crate::buckets::Bucket;

/// A JetStream domain that is not one literal subject token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "JetStream domain {domain:?} is not one literal subject token (empty, or holding `.`, `*`, \
     `>` or whitespace), so grants made from it would not name exact subjects"
)]
pub struct NotOneToken {
    pub domain: String,
}

/// Where one identity's JetStream requests go: the connected server's own
/// domain (`$JS.API`) or a named one (`$JS.<domain>.API`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JsApi {
    /// `None` for the local API; else one literal subject token.
    domain: Option<String>,
}

impl JsApi {
    /// The connected server's own JetStream: `$JS.API`.
    pub fn local() -> Self {
        JsApi { domain: None }
    }

    /// The JetStream of domain `domain`: `$JS.<domain>.API`. Refused unless
    /// the domain is one literal subject token, so that every grant made
    /// from it names exact subjects. (The config check of a domain,
    /// `connect::check_domain`, also bounds its length.)
    pub fn domain(domain: &str) -> Result<Self, NotOneToken> {
        let literal = !domain.is_empty()
            && !domain.contains(['.', '*', '>'])
            && !domain.chars().any(|c| c.is_whitespace() || c.is_control());
        if !literal {
            return Err(NotOneToken {
                domain: domain.to_string(),
            });
        }
        Ok(JsApi {
            domain: Some(domain.to_string()),
        })
    }

    /// The domain, when not the local one.
    pub fn domain_name(&self) -> Option<&str> {
        self.domain.as_deref()
    }

    /// `$JS.API` or `$JS.<domain>.API`.
    pub fn prefix(&self) -> String {
        match &self.domain {
            Some(d) => format!("$JS.{d}.API"),
            None => "$JS.API".to_string(),
        }
    }

    /// `<prefix>.DIRECT.GET.KV_<bucket>.$KV.<bucket>.<key>`: the last value
    /// of a key (`key` may be a filter such as `alpha.>`).
    pub fn direct_get(&self, bucket: Bucket, key: &str) -> String {
        format!(
            "{}.DIRECT.GET.{}.{}",
            self.prefix(),
            bucket.stream_name(),
            bucket.key_subject(key)
        )
    }

    /// What a put of `key` is published to ([`Bucket::put_subject`]):
    /// `$KV.<bucket>.<key>`, or `$JS.<domain>.API.$KV.<bucket>.<key>`.
    pub fn put(&self, bucket: Bucket, key: &str) -> String {
        bucket.put_subject(key, self.domain_name())
    }

    /// `<prefix>.STREAM.INFO.KV_<bucket>`: what opening a bucket asks.
    pub fn stream_info(&self, bucket: Bucket) -> String {
        format!("{}.STREAM.INFO.{}", self.prefix(), bucket.stream_name())
    }

    /// `<prefix>.CONSUMER.CREATE.KV_<bucket>.<name>.$KV.<bucket>.<key>`: a
    /// named consumer reading `key`.
    pub fn consumer_create(&self, bucket: Bucket, name: &str, key: &str) -> String {
        format!(
            "{}.CONSUMER.CREATE.{}.{name}.{}",
            self.prefix(),
            bucket.stream_name(),
            bucket.key_subject(key)
        )
    }
}

/// `$JS.API.STREAM.INFO.KV_<bucket>`: what opening a bucket asks.
pub fn stream_info(bucket: Bucket) -> String {
    JsApi::local().stream_info(bucket)
}

/// `$JS.API.STREAM.CREATE.KV_<bucket>`: creating a bucket.
pub fn stream_create(bucket: Bucket) -> String {
    format!("$JS.API.STREAM.CREATE.{}", bucket.stream_name())
}

/// `$JS.API.DIRECT.GET.KV_<bucket>.$KV.<bucket>.<key>`: the last value of
/// a key (`key` may be a filter such as `alpha.>`).
pub fn direct_get(bucket: Bucket, key: &str) -> String {
    JsApi::local().direct_get(bucket, key)
}

/// `$JS.API.CONSUMER.CREATE.KV_<bucket>`: an unnamed consumer; the subject
/// does not say what it reads.
pub fn consumer_create_unnamed(bucket: Bucket) -> String {
    format!("$JS.API.CONSUMER.CREATE.{}", bucket.stream_name())
}

/// `$JS.API.CONSUMER.CREATE.KV_<bucket>.<name>.$KV.<bucket>.<key>`: a named
/// consumer reading `key` (`name` may be `*`).
pub fn consumer_create(bucket: Bucket, name: &str, key: &str) -> String {
    JsApi::local().consumer_create(bucket, name, key)
}

/// `$JS.API.CONSUMER.DELETE.KV_<bucket>.<name>`.
pub fn consumer_delete(bucket: Bucket, name: &str) -> String {
    format!("$JS.API.CONSUMER.DELETE.{}.{name}", bucket.stream_name())
}

/// `$JS.API.CONSUMER.INFO.KV_<bucket>.<name>`.
pub fn consumer_info(bucket: Bucket, name: &str) -> String {
    format!("$JS.API.CONSUMER.INFO.{}.{name}", bucket.stream_name())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_domain_form_is_the_local_one_under_the_domain_prefix() {
        let hub = JsApi::domain("hub").unwrap();
        assert_eq!(
            hub.direct_get(Bucket::Wanted, "alpha"),
            "$JS.hub.API.DIRECT.GET.KV_hyperhive-wanted.$KV.hyperhive-wanted.alpha"
        );
        assert_eq!(
            direct_get(Bucket::Wanted, "alpha"),
            "$JS.API.DIRECT.GET.KV_hyperhive-wanted.$KV.hyperhive-wanted.alpha"
        );
        assert_eq!(
            hub.put(Bucket::Status, "alpha"),
            "$JS.hub.API.$KV.hyperhive-status.alpha"
        );
        assert_eq!(
            JsApi::local().put(Bucket::Status, "alpha"),
            "$KV.hyperhive-status.alpha"
        );
        assert_eq!(
            hub.stream_info(Bucket::Wanted),
            "$JS.hub.API.STREAM.INFO.KV_hyperhive-wanted"
        );
        for bad in ["", "a.b", "*", ">", "a b"] {
            assert_eq!(JsApi::domain(bad), Err(NotOneToken { domain: bad.into() }));
        }
    }
}
