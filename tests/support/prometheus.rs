//! A real Prometheus (Debian's `prometheus` package, installed by `tests/run.sh` with apt
//! when missing) on a free loopback port, scraping given targets every second and loading
//! the shipped alerting rules; killed when dropped. And `promtool`, from the same package.

use super::http::send;
use super::python::repo_path;
use http::Method;
use serde_json::Value;
use std::io::Write;
use std::net::SocketAddr;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub struct Prometheus {
    pub port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Start scraping `targets` (job `mcp-state-guard`) every second.
    pub async fn start(targets: &[SocketAddr]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let rules = repo_path("config/alerts.yml");
        let targets: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {rules:?}\n\
             scrape_configs:\n  - job_name: mcp-state-guard\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", "),
            rules = rules.display().to_string(),
        );
        let config_file = dir.path().join("prometheus.yml");
        std::fs::write(&config_file, config).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus is installed (tests/run.sh installs it with apt)");
        let prometheus = Self {
            port,
            child,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let url = format!("http://127.0.0.1:{port}/-/ready");
            let ready = tokio::time::timeout(Duration::from_secs(2), async {
                let client = hyper_util::client::legacy::Client::builder(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .build_http::<http_body_util::Empty<bytes::Bytes>>();
                client.get(url.parse().unwrap()).await
            })
            .await;
            if matches!(ready, Ok(Ok(ref r)) if r.status() == 200) {
                break;
            }
            assert!(Instant::now() < deadline, "prometheus did not become ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        prometheus
    }

    /// `GET /api/v1/query`: the result vector of an instant query.
    pub async fn query(&self, expr: &str) -> Vec<Value> {
        let url = format!(
            "http://127.0.0.1:{}/api/v1/query?query={}",
            self.port,
            encode(expr)
        );
        let reply = send(Method::GET, &url, &[], "", Duration::from_secs(10)).await;
        let body = reply.json();
        assert_eq!(body["status"], "success", "{body}");
        body["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Poll `expr` until its single sample's value is `want` (up to 30 s: scrapes are a
    /// second apart, and this machine is shared).
    pub async fn wait_for(&self, expr: &str, want: f64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let result = self.query(expr).await;
            let value = result
                .first()
                .and_then(|s| s["value"][1].as_str())
                .and_then(|v| v.parse::<f64>().ok());
            if value == Some(want) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{expr} is {result:?}, not {want}, after 30 s"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encode a query parameter value.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `promtool args...` with `stdin`, run in the repository root.
pub fn promtool(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new("promtool")
        .args(args)
        .current_dir(repo_path(""))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool is installed (tests/run.sh installs prometheus with apt)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}
