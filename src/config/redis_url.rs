//! `single_use.redis_url`, parsed once into a typed target: the configuration checks it,
//! and the Redis store connects to what was parsed.
//!
//! Invariant: no message echoes the URL (it may carry a password).

/// A parsed `single_use.redis_url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `redis://` or `rediss://`: one server (or a primary behind a proxy).
    Single(String),
    /// `redis+cluster://a:7000,b:7001`: the seed nodes of a Redis Cluster, each as a
    /// `redis://` (or `rediss://`) URL with the shared credentials.
    Cluster(Vec<String>),
}

/// Check and split a Redis URL. Messages never echo it (it may carry a password).
pub fn parse_url(url: &str) -> Result<Target, &'static str> {
    const SHAPE: &str = "must be redis://, rediss://, redis+cluster:// or rediss+cluster:// \
                         followed by [user:password@]host[:port]";
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
        _ => return Err(SHAPE),
    };
    let urls = match &target {
        Target::Single(url) => std::slice::from_ref(url),
        Target::Cluster(nodes) => nodes.as_slice(),
    };
    for url in urls {
        let info =
            redis::IntoConnectionInfo::into_connection_info(url.as_str()).map_err(|_| SHAPE)?;
        if info.addr().to_string().is_empty() {
            return Err(SHAPE);
        }
        // `redis://` with no host parses as localhost in the crate: refuse it, an
        // operator who wrote no host did not mean this pod's loopback.
        let after_scheme = url.split_once("://").map_or("", |(_, r)| r);
        let host = after_scheme
            .rsplit_once('@')
            .map_or(after_scheme, |(_, h)| h);
        if host.is_empty() || host.starts_with(':') || host.starts_with('/') {
            return Err(SHAPE);
        }
    }
    Ok(target)
}
