//! What the soak watches in the sidecar while it runs: resident memory, open file
//! descriptors, and from its own `/metrics` the runtime's alive tasks and the requests in
//! flight, sampled on a thread of their own every few seconds.

use crate::{admin, procs};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One look at the sidecar.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Seconds since the schedule started.
    pub at: f64,
    /// Requests answered by then.
    pub done: u64,
    pub rss: u64,
    pub fds: u64,
    pub tasks: i64,
    pub in_flight: i64,
}

/// Open file descriptors of a process.
fn fds(pid: u32) -> Result<u64, String> {
    let entries =
        std::fs::read_dir(format!("/proc/{pid}/fd")).map_err(|e| format!("/proc/{pid}/fd: {e}"))?;
    Ok(entries.count() as u64)
}

/// Read the sidecar's state now.
pub fn take(pid: u32, admin: SocketAddr, at: f64, done: u64) -> Result<Sample, String> {
    let (status, metrics) = admin::request(admin, "GET", "/metrics", &[], "")?;
    if status != 200 {
        return Err(format!("/metrics answered {status}"));
    }
    Ok(Sample {
        at,
        done,
        rss: procs::rss(pid)?,
        fds: fds(pid)?,
        tasks: gauge(&metrics, "mcp_state_guard_runtime_alive_tasks")?,
        in_flight: gauge(&metrics, "mcp_state_guard_requests_in_flight")?,
    })
}

/// The value of an unlabelled gauge in a Prometheus text exposition.
fn gauge(metrics: &str, name: &str) -> Result<i64, String> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("no {name} in /metrics"))
}

/// Samples taken every `every` on a thread until dropped.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    pub samples: Arc<Mutex<Vec<Sample>>>,
    pub failures: Arc<Mutex<Vec<String>>>,
}

impl Sampler {
    pub fn start(pid: u32, admin: SocketAddr, every: Duration, done: Arc<AtomicU64>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (stop, samples, failures) = (stop.clone(), samples.clone(), failures.clone());
            std::thread::spawn(move || {
                let start = Instant::now();
                let mut next = start;
                while !stop.load(Ordering::Relaxed) {
                    if Instant::now() >= next {
                        let at = start.elapsed().as_secs_f64();
                        match take(pid, admin, at, done.load(Ordering::Relaxed)) {
                            Ok(s) => samples.lock().expect("not poisoned").push(s),
                            Err(e) => failures.lock().expect("not poisoned").push(e),
                        }
                        next += every;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        };
        Sampler {
            stop,
            thread: Some(thread),
            samples,
            failures,
        }
    }

    /// Stop sampling; the samples taken.
    pub fn finish(mut self) -> (Vec<Sample>, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let samples = std::mem::take(&mut *self.samples.lock().expect("not poisoned"));
        let failures = std::mem::take(&mut *self.failures.lock().expect("not poisoned"));
        (samples, failures)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
