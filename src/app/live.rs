//! What changes while the sidecar runs, beyond the key ring: the configuration keys a
//! reload applies live (the one list of which is the `Live` rows of the configuration's
//! table of keys), and the admin token file, watched like the key file.
//!
//! Invariants: every live key has an applier here (a test checks the two lists agree),
//! so no reload can report a key applied that nothing applied; an admin token file that
//! becomes unreadable or holds no valid secret keeps the token in use, is logged once
//! per change and counted `error`; a valid new secret replaces the old one at once, and
//! the old one is refused from then on.

use super::ProcessMetrics;
use crate::admin::{self, Admin};
use crate::config::Config;
use crate::file_watch::{FilePoll, Seen};
use crate::policy::single_use::{SingleUse, SingleUsePolicy};
use crate::proxy::Proxy;
use crate::proxy::ingress::HostPolicy;
use arc_swap::ArcSwap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use zeroize::Zeroizing;

/// What applies one live key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Applier {
    PassthroughPaths,
    /// The proxy's and the admin listener's host policies.
    AllowedHosts,
    SingleUsePolicy,
    OnStoreError,
}

/// The applier of a live key; `None` for a key nothing here applies (restart-class).
fn applier(key: &str) -> Option<Applier> {
    Some(match key {
        "passthrough_paths" => Applier::PassthroughPaths,
        "allowed_hosts" => Applier::AllowedHosts,
        "single_use.tools"
        | "single_use.prompts"
        | "single_use.resources"
        | "single_use.default" => Applier::SingleUsePolicy,
        "single_use.on_store_error" => Applier::OnStoreError,
        _ => return None,
    })
}

/// The running parts a reload reaches.
pub(super) struct Live {
    pub(crate) proxy: Arc<Proxy>,
    pub(crate) admin: Arc<Admin>,
    pub(crate) single_use: Arc<SingleUse>,
    /// The listeners' configured addresses (restart-class), which the host policies'
    /// defaults follow.
    pub(crate) listen: SocketAddr,
    pub(crate) admin_listen: SocketAddr,
}

impl Live {
    /// Apply the `changed` live keys of `config` (the configuration now in force).
    pub(crate) fn apply(&self, config: &Config, changed: &[&str]) {
        let mut appliers: Vec<Applier> = changed.iter().filter_map(|key| applier(key)).collect();
        appliers.sort();
        appliers.dedup();
        for applier in appliers {
            match applier {
                Applier::PassthroughPaths => {
                    self.proxy
                        .replace_passthrough_paths(&config.passthrough_paths);
                }
                Applier::AllowedHosts => self.apply_hosts(config.allowed_hosts.as_deref()),
                Applier::SingleUsePolicy => self
                    .single_use
                    .replace_policy(SingleUsePolicy::from_config(&config.single_use)),
                Applier::OnStoreError => self
                    .single_use
                    .replace_on_store_error(config.single_use.on_store_error),
            }
        }
    }

    fn apply_hosts(&self, allowed: Option<&[String]>) {
        // Validated with the configuration, so neither fails; if one did, the policy in
        // force stays rather than open up.
        match (
            HostPolicy::new(allowed, self.listen),
            HostPolicy::for_admin(allowed, self.admin_listen),
        ) {
            (Ok(proxy), Ok(admin)) => {
                self.proxy.replace_hosts(proxy);
                self.admin.hosts.store(Arc::new(admin));
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!(error = %e, "allowed_hosts not applied; the previous hosts stay");
            }
        }
    }
}

/// Read `admin.token_file` (when configured) for the start: the secret, and the watch
/// whose baseline is the very bytes read.
pub(super) fn load_admin_token(
    path: Option<&Path>,
) -> Result<(Option<admin::Token>, Option<FilePoll>), String> {
    let Some(path) = path else {
        return Ok((None, None));
    };
    let bytes = std::fs::read(path)
        .map(Zeroizing::new)
        .map_err(|e| format!("admin.token_file: {} cannot be read: {e}", path.display()))?;
    let token = crate::config::admin_token::parse_token(&bytes, path)
        .map_err(|e| format!("admin.token_file: {e}"))?;
    let poll = FilePoll::loaded(vec![path.to_owned()], &[&bytes[..]]);
    Ok((Some(ArcSwap::from_pointee(token)), Some(poll)))
}

/// Swap the admin token when its file changes ([`FilePoll`]: content hashes, which
/// survive Kubernetes' `..data` symlink swaps). A bad new file keeps the old token, logs,
/// and counts.
pub(super) async fn reload_admin_token(
    path: PathBuf,
    poll: FilePoll,
    admin: Arc<Admin>,
    metrics: Arc<ProcessMetrics>,
    interval: Duration,
    stop: watch::Receiver<bool>,
) {
    let Some(token) = admin.token.as_ref() else {
        return;
    };
    poll.run(interval, None, stop, |seen| match seen {
        Seen::Unchanged => {}
        Seen::Unreadable { path, error } => {
            tracing::error!(%error, path = %path.display(), "admin token file unreadable; keeping the previous token");
            metrics.admin_token_reload(false);
        }
        Seen::Changed(contents) => match crate::config::admin_token::parse_token(&contents[0], &path) {
            Ok(new) => {
                token.store(Arc::new(new));
                tracing::info!(path = %path.display(), "admin token file changed; the new token is in use and the old one refused");
                metrics.admin_token_reload(true);
            }
            Err(error) => {
                tracing::error!(%error, "admin token file changed but holds no valid token; keeping the previous token");
                metrics.admin_token_reload(false);
            }
        },
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_live_key_has_an_applier_and_no_other_key_does() {
        for (key, class) in crate::config::reload::classes() {
            let live = class == crate::config::Reload::Live;
            assert_eq!(applier(key).is_some(), live, "{key}: {class:?}");
        }
    }
}
