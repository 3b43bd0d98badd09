//! The one way a file the sidecar loaded is watched for change: its content hash polled
//! (the key file, the TLS listener's certificate, key and client CA, the configuration
//! file). Kubernetes replaces Secret and ConfigMap files through `..data` symlink swaps,
//! which defeats naive inotify; reading and hashing the content sees every change.
//!
//! Invariants: the baseline is the content that was actually loaded (the very bytes
//! read for the load, never a later read by the watching task: a change landing in
//! between would otherwise look like no change at all); a file that cannot be read is
//! reported once per outage, not once per poll, and what is in use stays in use; when it
//! can be read again it counts as changed, so it is loaded and checked afresh. New
//! content is reported only once two polls in a row read the same bytes: a file read
//! while its writer is still writing (an editor saving in place, `cat > file`) may
//! happen to parse, and applying it would revert every key it does not yet hold. An
//! operator's `SIGHUP` reads at once: it says the file is whole.

use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::time::Duration;
use tokio::signal::unix::Signal;
use tokio::sync::watch;
use zeroize::Zeroizing;

/// A set of files watched together (a certificate and its key change as a pair).
#[derive(Debug, Clone)]
pub(crate) struct FilePoll {
    paths: Vec<PathBuf>,
    /// The digest of the content last seen; `None` before the first successful read
    /// and after a failed one.
    last: Option<[u8; 32]>,
    /// New content read once, reported when the next poll reads it again.
    pending: Option<[u8; 32]>,
}

/// What one poll saw.
#[derive(Debug)]
pub(crate) enum Seen {
    /// The same content as last time.
    Unchanged,
    /// New content (or a forced re-read): every file's bytes, in the order given.
    Changed(Vec<Zeroizing<Vec<u8>>>),
    /// A file could not be read, for the first time since it last could.
    Unreadable {
        path: PathBuf,
        error: std::io::Error,
    },
}

impl FilePoll {
    /// Watch `paths`, taking as baseline `loaded`: the content of each, as loaded.
    pub(crate) fn loaded(paths: Vec<PathBuf>, loaded: &[&[u8]]) -> Self {
        let last = Some(digest(loaded.iter().copied()));
        Self {
            paths,
            last,
            pending: None,
        }
    }

    /// Read every file once. New content is [`Seen::Changed`] on the second poll in a
    /// row that reads it; `forced`: report the content as changed at once, even if it is
    /// not (an operator's `SIGHUP`). `None`: still unreadable, already reported.
    pub(crate) async fn poll(&mut self, forced: bool) -> Option<Seen> {
        let mut contents = Vec::with_capacity(self.paths.len());
        for path in &self.paths {
            match tokio::fs::read(path).await {
                Ok(bytes) => contents.push(Zeroizing::new(bytes)),
                Err(error) => {
                    let path = path.clone();
                    return self.last.take().map(|_| Seen::Unreadable { path, error });
                }
            }
        }
        let now = digest(contents.iter().map(|b| &b[..]));
        if !forced && self.last == Some(now) {
            self.pending = None;
            return Some(Seen::Unchanged);
        }
        if !forced && self.pending != Some(now) {
            // Read once: the writer may not be done. Reported when it reads the same again.
            self.pending = Some(now);
            return Some(Seen::Unchanged);
        }
        self.pending = None;
        self.last = Some(now);
        Some(Seen::Changed(contents))
    }

    /// Poll every `interval`, and at once on each `hangup`, until `stop`; hand `on`
    /// everything seen.
    pub(crate) async fn run(
        mut self,
        interval: Duration,
        mut hangup: Option<Signal>,
        mut stop: watch::Receiver<bool>,
        mut on: impl FnMut(Seen) + Send,
    ) {
        loop {
            let forced = tokio::select! {
                _ = tokio::time::sleep(interval) => false,
                Some(()) = async { match hangup.as_mut() { Some(h) => h.recv().await, None => None } } => true,
                _ = crate::shutdown::stopped(&mut stop) => return,
            };
            if let Some(seen) = self.poll(forced).await {
                on(seen);
            }
        }
    }
}

/// Each file's length and content: no two different sets of files hash alike.
fn digest<'a>(contents: impl Iterator<Item = &'a [u8]>) -> [u8; 32] {
    let mut hash = Sha256::new();
    for bytes in contents {
        hash.update((bytes.len() as u64).to_be_bytes());
        hash.update(bytes);
    }
    hash.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(seen: Option<Seen>) -> &'static str {
        match seen {
            None => "quiet",
            Some(Seen::Unchanged) => "unchanged",
            Some(Seen::Changed(_)) => "changed",
            Some(Seen::Unreadable { .. }) => "unreadable",
        }
    }

    #[tokio::test]
    async fn changes_outages_and_returns_are_each_seen_once() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, "one").unwrap();
        std::fs::write(&b, "two").unwrap();
        let mut poll = FilePoll::loaded(vec![a.clone(), b.clone()], &[b"one", b"two"]);
        assert_eq!(kinds(poll.poll(false).await), "unchanged");
        assert_eq!(kinds(poll.poll(true).await), "changed", "a forced read");
        // Moving bytes from one file to the other is a change, once it reads the same
        // twice.
        std::fs::write(&a, "onet").unwrap();
        std::fs::write(&b, "wo").unwrap();
        assert_eq!(kinds(poll.poll(false).await), "unchanged", "read once");
        match poll.poll(false).await {
            Some(Seen::Changed(c)) => {
                assert_eq!((&c[0][..], &c[1][..]), (&b"onet"[..], &b"wo"[..]))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(kinds(poll.poll(false).await), "unchanged");
        std::fs::remove_file(&b).unwrap();
        match poll.poll(false).await {
            Some(Seen::Unreadable { path, .. }) => assert_eq!(path, b),
            other => panic!("{other:?}"),
        }
        assert_eq!(kinds(poll.poll(false).await), "quiet", "reported once");
        // Back with the very content it had: loaded afresh all the same.
        std::fs::write(&b, "wo").unwrap();
        assert_eq!(kinds(poll.poll(false).await), "unchanged", "read once");
        assert_eq!(kinds(poll.poll(false).await), "changed");
    }

    /// A file read mid-write is never reported: only content two polls in a row read
    /// alike, and a `SIGHUP` at once.
    #[tokio::test]
    async fn a_torn_write_is_never_reported() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("config.toml");
        let whole = "[single_use]\ntools = [\"transfer\"]\n[limits]\nmax_body_bytes = 1\n";
        std::fs::write(&a, whole).unwrap();
        let mut poll = FilePoll::loaded(vec![a.clone()], &[whole.as_bytes()]);
        // The writer truncated the file and wrote its first table when the poll came.
        std::fs::write(&a, &whole[..32]).unwrap();
        assert_eq!(kinds(poll.poll(false).await), "unchanged");
        // Then finished: a different content, so still not reported.
        let edited = whole.replace("transfer", "wire");
        std::fs::write(&a, &edited).unwrap();
        assert_eq!(kinds(poll.poll(false).await), "unchanged");
        match poll.poll(false).await {
            Some(Seen::Changed(c)) => assert_eq!(&c[0][..], edited.as_bytes()),
            other => panic!("{other:?}"),
        }
        assert_eq!(kinds(poll.poll(false).await), "unchanged");
        // Back and forth between polls: what was in force is what is read again.
        std::fs::write(&a, "torn").unwrap();
        assert_eq!(kinds(poll.poll(false).await), "unchanged");
        std::fs::write(&a, &edited).unwrap();
        assert_eq!(kinds(poll.poll(false).await), "unchanged");
        std::fs::write(&a, "torn").unwrap();
        assert_eq!(
            kinds(poll.poll(false).await),
            "unchanged",
            "a new pending read"
        );
        assert_eq!(
            kinds(poll.poll(true).await),
            "changed",
            "SIGHUP reads at once"
        );
    }

    #[tokio::test]
    async fn the_baseline_is_what_was_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::fs::write(&a, "old").unwrap();
        let mut poll = FilePoll::loaded(vec![a.clone()], &[b"old"]);
        // The file changes after the load, before the watcher first polls.
        std::fs::write(&a, "new").unwrap();
        assert_eq!(kinds(poll.poll(false).await), "unchanged", "read once");
        assert_eq!(kinds(poll.poll(false).await), "changed");
        let mut missing = FilePoll::loaded(vec![dir.path().join("missing")], &[b""]);
        assert_eq!(
            kinds(missing.poll(false).await),
            "unreadable",
            "a loaded file that went away is reported"
        );
        assert_eq!(kinds(missing.poll(false).await), "quiet");
    }
}
