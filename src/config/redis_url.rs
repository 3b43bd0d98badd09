//! `single_use.redis_url`, parsed once into a typed target: the configuration checks it,
//! and the Redis store connects to what was parsed; and `single_use.redis_wait_replicas`,
//! read as `"auto"` or a number.
//!
//! Invariant: no message echoes the URL (it may carry a password).

use serde::{Deserialize, Serialize};

/// `single_use.redis_wait_replicas`: how many replicas must hold a write to Redis before
/// it counts (a primary acknowledges a write before any replica has it; the replica
/// promoted when it fails may not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WaitReplicas {
    /// One whenever the primary reports a connected replica, none when it reports none:
    /// a single Redis works, a replicated one is safe.
    #[default]
    Auto,
    /// Exactly this many, whatever the primary reports (0: never wait).
    Count(u32),
}

impl Serialize for WaitReplicas {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            WaitReplicas::Auto => serializer.serialize_str("auto"),
            WaitReplicas::Count(count) => serializer.serialize_u32(*count),
        }
    }
}

impl<'de> Deserialize<'de> for WaitReplicas {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Spelled {
            Count(u32),
            Text(String),
        }
        match Spelled::deserialize(deserializer)? {
            Spelled::Count(count) => Ok(WaitReplicas::Count(count)),
            Spelled::Text(text) if text == "auto" => Ok(WaitReplicas::Auto),
            // An environment variable arrives as text.
            Spelled::Text(text) => text
                .parse()
                .map(WaitReplicas::Count)
                .map_err(|_| serde::de::Error::custom("expected \"auto\" or a number of replicas")),
        }
    }
}

/// A parsed `single_use.redis_url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// `redis://` or `rediss://`: one server (or a primary behind a proxy).
    Single(String),
    /// `redis+cluster://a:7000,b:7001`: the seed nodes of a Redis Cluster, each as a
    /// `redis://` (or `rediss://`) URL with the shared credentials.
    Cluster(Vec<String>),
    /// `redis+sentinel://s1:26379,s2:26379/<primary name>[/<db>]`: a primary that
    /// Sentinel manages, found by asking the sentinels.
    Sentinel(Sentinel),
}

/// Where a Sentinel-managed primary is found and how it is spoken to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sentinel {
    /// Each sentinel as a `redis://` (or `rediss://`) URL, without credentials: the
    /// sentinels are asked without authenticating.
    pub(crate) sentinels: Vec<String>,
    /// The primary's name in the sentinels' configuration (`sentinel monitor <name>`).
    pub(crate) service: String,
    /// TLS to the primary (and the sentinels): `rediss+sentinel://`.
    pub(crate) tls: bool,
    /// The credentials of the URL, for the primary.
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) db: i64,
}

const SHAPE: &str = "must be redis://, rediss://, redis+cluster://, rediss+cluster://, \
                     redis+sentinel:// or rediss+sentinel:// followed by [user:password@]host[:port]";

/// Check and split a Redis URL. Messages never echo it (it may carry a password).
pub(crate) fn parse_url(url: &str) -> Result<Target, &'static str> {
    let (scheme, rest) = url.split_once("://").ok_or(SHAPE)?;
    let target = match scheme {
        "redis" | "rediss" => Target::Single(url.to_owned()),
        "redis+cluster" | "rediss+cluster" => {
            let node_scheme = scheme.trim_end_matches("+cluster");
            let (auth, hosts) = match rest.rsplit_once('@') {
                Some((auth, hosts)) => (format!("{auth}@"), hosts),
                None => (String::new(), rest),
            };
            let hosts = hosts.trim_end_matches('/');
            if hosts.contains('/') {
                return Err("a cluster URL has no database path (Redis Cluster has one database)");
            }
            let nodes: Vec<String> = hosts
                .split(',')
                .map(|host| format!("{node_scheme}://{auth}{host}"))
                .collect();
            Target::Cluster(nodes)
        }
        "redis+sentinel" | "rediss+sentinel" => {
            Target::Sentinel(parse_sentinel(scheme.trim_end_matches("+sentinel"), rest)?)
        }
        _ => return Err(SHAPE),
    };
    let urls = match &target {
        Target::Single(url) => std::slice::from_ref(url),
        Target::Cluster(nodes) => nodes.as_slice(),
        Target::Sentinel(sentinel) => sentinel.sentinels.as_slice(),
    };
    for url in urls {
        check_host(url)?;
    }
    Ok(target)
}

/// `[user:password@]host:port,host:port/<name>[/<db>]` after `redis+sentinel://`.
fn parse_sentinel(node_scheme: &str, rest: &str) -> Result<Sentinel, &'static str> {
    const NAME: &str = "a sentinel URL names the primary after the hosts: \
                        redis+sentinel://host:26379,host:26379/<name>[/<db>]";
    let (auth, after_auth) = match rest.rsplit_once('@') {
        Some((auth, after)) => (Some(auth), after),
        None => (None, rest),
    };
    let (hosts, path) = after_auth.split_once('/').ok_or(NAME)?;
    let (service, db) = match path.trim_end_matches('/').split_once('/') {
        Some((service, db)) => (service, db.parse::<i64>().map_err(|_| NAME)?),
        None => (path.trim_end_matches('/'), 0),
    };
    if service.is_empty() || hosts.is_empty() {
        return Err(NAME);
    }
    let (username, password) = match auth {
        None => (None, None),
        Some(auth) => {
            let (user, password) = auth.split_once(':').unwrap_or((auth, ""));
            let decode = |part: &str| {
                percent_decode(part).ok_or("the URL's credentials are not valid percent-encoding")
            };
            let user = decode(user)?;
            let password = decode(password)?;
            (
                (!user.is_empty()).then_some(user),
                (!password.is_empty()).then_some(password),
            )
        }
    };
    Ok(Sentinel {
        sentinels: hosts
            .split(',')
            .map(|host| format!("{node_scheme}://{host}"))
            .collect(),
        service: service.to_owned(),
        tls: node_scheme == "rediss",
        username,
        password,
        db,
    })
}

/// `%XX` sequences decoded (a password may hold `@`, `:` or `/` only so escaped).
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The crate reads the URL, and it names a host.
fn check_host(url: &str) -> Result<(), &'static str> {
    let info = redis::IntoConnectionInfo::into_connection_info(url).map_err(|_| SHAPE)?;
    if info.addr().to_string().is_empty() {
        return Err(SHAPE);
    }
    // `redis://` with no host parses as localhost in the crate: refuse it, an operator
    // who wrote no host did not mean this pod's loopback.
    let after_scheme = url.split_once("://").map_or("", |(_, r)| r);
    let host = after_scheme
        .rsplit_once('@')
        .map_or(after_scheme, |(_, h)| h);
    if host.is_empty() || host.starts_with(':') || host.starts_with('/') {
        return Err(SHAPE);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Overrides, WaitReplicas};

    /// `single_use.redis_wait_replicas` is `"auto"` or a number, in the file and in the
    /// environment (where it arrives as text); anything else is named.
    #[test]
    #[allow(clippy::result_large_err)]
    fn wait_replicas_read_as_auto_or_a_number() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("a.toml", "[single_use]\nredis_wait_replicas = 2\n")?;
            let file = Config::load(Some(std::path::Path::new("a.toml")), &Overrides::default());
            assert_eq!(
                file.unwrap().single_use.redis_wait_replicas,
                WaitReplicas::Count(2)
            );
            jail.set_env("MCP_STATE_GUARD_SINGLE_USE__REDIS_WAIT_REPLICAS", "auto");
            let env = Config::load(Some(std::path::Path::new("a.toml")), &Overrides::default());
            assert_eq!(
                env.unwrap().single_use.redis_wait_replicas,
                WaitReplicas::Auto
            );
            jail.set_env("MCP_STATE_GUARD_SINGLE_USE__REDIS_WAIT_REPLICAS", "0");
            let zero = Config::load(None, &Overrides::default()).unwrap();
            assert_eq!(zero.single_use.redis_wait_replicas, WaitReplicas::Count(0));
            jail.set_env("MCP_STATE_GUARD_SINGLE_USE__REDIS_WAIT_REPLICAS", "some");
            let bad = Config::load(None, &Overrides::default()).unwrap_err().0;
            assert!(
                bad.iter()
                    .any(|p| p.key == "single_use.redis_wait_replicas"),
                "{bad:?}"
            );
            Ok(())
        });
        let mut config = Config::default();
        config.single_use.redis_wait_replicas = WaitReplicas::Count(17);
        config.single_use.redis_wait_ms = 0;
        let keys: Vec<String> = config.validate().into_iter().map(|p| p.key).collect();
        assert_eq!(
            keys,
            ["single_use.redis_wait_ms", "single_use.redis_wait_replicas"]
        );
    }

    #[test]
    fn sentinel_urls() {
        assert_eq!(
            parse_url("redis+sentinel://u:p%40ss@s1:26379,s2:26380/mymaster/2"),
            Ok(Target::Sentinel(Sentinel {
                sentinels: vec!["redis://s1:26379".into(), "redis://s2:26380".into()],
                service: "mymaster".into(),
                tls: false,
                username: Some("u".into()),
                password: Some("p@ss".into()),
                db: 2,
            }))
        );
        let Ok(Target::Sentinel(tls)) = parse_url("rediss+sentinel://:pw@s1/primary") else {
            panic!("a TLS sentinel URL parses");
        };
        assert!(tls.tls);
        assert_eq!(tls.sentinels, ["rediss://s1"]);
        assert_eq!((tls.username, tls.password), (None, Some("pw".into())));
        for bad in [
            "redis+sentinel://s1:26379",
            "redis+sentinel://s1:26379/",
            "redis+sentinel:///mymaster",
            "redis+sentinel://s1/mymaster/x",
            "redis+sentinel://:%zz@s1/m",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }
}
