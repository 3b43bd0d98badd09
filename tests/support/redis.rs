//! A real `redis-server` (installed by `tests/run.sh` with apt when missing) on a free
//! loopback port, killed when dropped; it can be stopped and started again on the same
//! port to show that the sidecar recovers without a restart.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
}

impl RedisServer {
    pub fn start() -> Self {
        Self::launch(Self::plain)
    }

    /// The command of a plain server on `port` (nothing persisted).
    fn plain(port: u16) -> Command {
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--protected-mode", "yes", "--daemonize", "no"]);
        command
    }

    /// `command(port)` started on a free loopback port and answering. A port free when
    /// it was picked can be taken before the server binds it (an outgoing connection of
    /// a test running beside this one gets it as its source port): the server then exits
    /// at once, and it is started again on another port (five tries).
    fn launch(command: impl Fn(u16) -> Command) -> Self {
        for _ in 0..5 {
            let port = free_port();
            let child = command(port)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server is installed (tests/run.sh installs it with apt)");
            let mut server = Self {
                port,
                child: Some(child),
            };
            if server.answering_or_exited() {
                return server;
            }
        }
        panic!("redis-server did not start on five free ports");
    }

    /// Wait until it answers `PING` (`true`) or its process exited (`false`); fail
    /// after 10 s.
    fn answering_or_exited(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if self.answers() {
                return true;
            }
            let child = self.child.as_mut().expect("started");
            if child.try_wait().ok().flatten().is_some() {
                self.child = None;
                return false;
            }
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kill the server (nothing persisted: it comes back empty).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start it (again) on the same port and wait until it answers.
    pub fn restart(&mut self) {
        self.stop();
        let child = Self::plain(self.port)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (tests/run.sh installs it with apt)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.answers() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// One raw command (inline protocol); the reply's first line.
    pub fn command(&self, line: &str) -> Option<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        stream.write_all(format!("{line}\r\n").as_bytes()).ok()?;
        let mut buffer = [0u8; 512];
        let n = stream.read(&mut buffer).ok()?;
        let text = String::from_utf8_lossy(&buffer[..n]);
        Some(text.lines().next().unwrap_or_default().to_owned())
    }

    fn answers(&self) -> bool {
        self.command("PING").as_deref() == Some("+PONG")
    }
}

impl RedisServer {
    /// A server on a free loopback port, run in `dir` with `args` after the usual ones,
    /// answering before this returns.
    pub fn spawn(dir: &std::path::Path, args: &[&str]) -> Self {
        Self::launch(|port| {
            let mut command = Command::new("redis-server");
            command
                .current_dir(dir)
                .args(["--port", &port.to_string()])
                .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .args(args);
            command
        })
    }

    /// A sentinel (`redis-sentinel`, Debian's package) run in `dir` from `config`, on a
    /// free loopback port.
    pub fn sentinel(dir: &std::path::Path, config: &std::path::Path) -> Self {
        Self::launch(|port| {
            let mut command = Command::new("redis-sentinel");
            command.current_dir(dir).arg(config).args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ]);
            command
        })
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Send `signal` (`STOP`, `CONT`, `KILL`) to it.
    pub fn signal(&self, signal: &str) {
        let pid = self.pid().expect("running");
        let sent = Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{signal} {pid}");
    }

    /// A plain connection to this node (not cluster-aware), with short timeouts.
    pub fn connection(&self) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(self.url())?;
        let connection = client.get_connection_with_timeout(Duration::from_secs(2))?;
        connection.set_read_timeout(Some(Duration::from_secs(5)))?;
        connection.set_write_timeout(Some(Duration::from_secs(5)))?;
        Ok(connection)
    }

    /// `command` on this node.
    pub fn query<T: redis::FromRedisValue>(&self, command: &redis::Cmd) -> redis::RedisResult<T> {
        command.query(&mut self.connection()?)
    }
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A three-primary Redis Cluster on free loopback ports (no replicas), its nodes killed
/// when dropped.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    _dir: tempfile::TempDir,
}

/// `count` cluster nodes in `dir` (each with `args` after the cluster's own), joined by
/// `redis-cli --cluster create` with `replicas` replicas per primary; not yet waited
/// for until every slot is served.
pub fn create_cluster(
    dir: &std::path::Path,
    count: usize,
    replicas: usize,
    args: &[&str],
) -> Vec<RedisServer> {
    let nodes: Vec<RedisServer> = (0..count)
        .map(|i| {
            let conf = format!("nodes-{i}.conf");
            let mut all = vec!["--cluster-enabled", "yes", "--cluster-config-file", &conf];
            all.extend(args);
            RedisServer::spawn(dir, &all)
        })
        .collect();
    let addresses: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let created = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addresses)
        .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("redis-cli is installed");
    assert!(created.success(), "redis-cli --cluster create failed");
    nodes
}

impl RedisCluster {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let nodes = create_cluster(dir.path(), 3, 0, &[]);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !nodes.iter().all(|n| n.cluster_ok()) {
            assert!(Instant::now() < deadline, "the cluster did not become ok");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { nodes, _dir: dir }
    }

    /// `redis+cluster://` with every node as a seed.
    pub fn url(&self) -> String {
        cluster_url(&self.nodes)
    }
}

impl RedisServer {
    pub fn cluster_ok(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        if stream.write_all(b"CLUSTER INFO\r\n").is_err() {
            return false;
        }
        let mut buffer = [0u8; 2048];
        let n = stream.read(&mut buffer).unwrap_or(0);
        String::from_utf8_lossy(&buffer[..n]).contains("cluster_state:ok")
    }
}

/// `redis+cluster://` naming every node of a cluster as a seed.
pub fn cluster_url(nodes: &[RedisServer]) -> String {
    let seeds: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    format!("redis+cluster://{}", seeds.join(","))
}
