//! Throughput at a fixed concurrency: wrk (one thread, 64 connections) on the generator
//! core, driven by a Lua script that sends the harness's request; the servers a table
//! compares are measured in interleaved rounds ([`interleaved`]).

use crate::generator::{PRINCIPAL, PRINCIPAL_HEADER, Target};
use crate::procs::GENERATOR_CORE;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub const CONNECTIONS: u32 = 64;

/// What one wrk run measured.
#[derive(Clone)]
pub struct Throughput {
    pub rps: f64,
    pub requests: u64,
    /// Non-2xx answers, socket errors and timeouts.
    pub errors: u64,
    /// Each round's requests per second ([`interleaved`]; a single run's is its own).
    pub rounds: Vec<f64>,
}

/// The request body for wrk: one file sent every time, or (`each`) a file of one body a
/// line, each sent once in turn (single-use tokens).
pub enum WrkBody<'a> {
    Same(&'a Path),
    Each(&'a Path),
}

/// Run wrk against `target` for `duration`; `script` is where its Lua script is written.
pub fn run(
    target: &Target,
    body: WrkBody<'_>,
    duration: Duration,
    script: &Path,
) -> Result<Throughput, String> {
    let mut lua = format!(
        "wrk.method = \"POST\"\n\
         wrk.headers[\"Content-Type\"] = \"application/json\"\n\
         wrk.headers[\"Accept\"] = \"application/json, text/event-stream\"\n\
         wrk.headers[\"Mcp-Protocol-Version\"] = \"2026-07-28\"\n\
         wrk.headers[\"Mcp-Method\"] = \"tools/call\"\n\
         wrk.headers[\"Mcp-Name\"] = \"provision\"\n\
         wrk.headers[\"{PRINCIPAL_HEADER}\"] = \"{PRINCIPAL}\"\n"
    );
    if let Some(bearer) = crate::generator::AUTHORIZATION.get() {
        lua.push_str(&format!("wrk.headers[\"Authorization\"] = \"{bearer}\"\n"));
    }
    match body {
        WrkBody::Same(file) => lua.push_str(&format!(
            "local f = assert(io.open(\"{}\", \"rb\"))\nwrk.body = f:read(\"*a\")\nf:close()\n",
            file.display()
        )),
        WrkBody::Each(file) => lua.push_str(&format!(
            "local bodies = {{}}\n\
             for line in io.lines(\"{}\") do bodies[#bodies + 1] = line end\n\
             local i = 0\n\
             request = function()\n  i = i + 1\n  \
             return wrk.format(nil, nil, nil, bodies[i] or \"\")\nend\n",
            file.display()
        )),
    }
    std::fs::write(script, lua).map_err(|e| format!("wrk script: {e}"))?;
    let out = Command::new("taskset")
        .args(["-c", GENERATOR_CORE, "wrk", "-t1"])
        .arg(format!("-c{CONNECTIONS}"))
        .arg(format!("-d{}s", duration.as_secs()))
        .arg("-s")
        .arg(script)
        .arg(format!("http://{}{}", target.addr, target.path))
        .output()
        .map_err(|e| format!("wrk: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "wrk failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let field = |prefix: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(prefix))
            .map(str::trim)
    };
    let rps = field("Requests/sec:")
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or_else(|| format!("no Requests/sec in wrk's output: {text}"))?;
    let requests = text
        .lines()
        .find(|l| l.contains("requests in"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    let non_2xx = field("Non-2xx or 3xx responses:")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    // "Socket errors: connect 0, read 0, write 0, timeout 0"
    let socket: u64 = field("Socket errors:")
        .map(|v| {
            v.split(',')
                .filter_map(|part| part.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0);
    Ok(Throughput {
        rps,
        requests,
        errors: non_2xx + socket,
        rounds: vec![rps],
    })
}

/// What a contender of [`interleaved`] sends.
pub enum Feed {
    /// One body file, sent again and again in every round (and in the warm-up).
    Same(PathBuf),
    /// A file of bodies for each round, one line each and each sent once (single-use
    /// tokens: a round must not send another's again); no warm-up.
    EachRound(Vec<PathBuf>),
}

/// One of the servers [`interleaved`] measures in turn.
pub struct Contender {
    pub target: Target,
    pub feed: Feed,
    /// Where its wrk script is written.
    pub script: PathBuf,
}

impl Contender {
    /// A contender sending `body` every time (written to `dir/body-{tag}.json`).
    pub fn same(target: Target, body: &[u8], dir: &Path, tag: &str) -> Result<Self, String> {
        let file = dir.join(format!("body-{tag}.json"));
        std::fs::write(&file, body).map_err(|e| format!("body file: {e}"))?;
        Ok(Contender {
            target,
            feed: Feed::Same(file),
            script: dir.join(format!("wrk-{tag}.lua")),
        })
    }
}

/// The rounds of an interleaved measurement.
#[derive(Clone, Copy)]
pub struct Rounds {
    pub warmup: Duration,
    pub count: usize,
    pub each: Duration,
}

/// Every contender measured in `rounds.count` rounds of `rounds.each`, taken in turn and
/// in the reverse order every other round (A B C D, D C B A, ...), so that a drift of
/// the machine (its speed moves by more than half within minutes on this VM) falls on
/// all of them alike. A contender's figure is the median of its rounds' requests per
/// second, its requests and errors summed; the rounds are kept for their spread.
pub fn interleaved(contenders: &[Contender], rounds: Rounds) -> Result<Vec<Throughput>, String> {
    for c in contenders {
        if let Feed::Same(file) = &c.feed {
            run(&c.target, WrkBody::Same(file), rounds.warmup, &c.script)?;
        }
    }
    let mut measured: Vec<Vec<Throughput>> = contenders.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds.count {
        let mut order: Vec<usize> = (0..contenders.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let c = &contenders[i];
            let taken = match &c.feed {
                Feed::Same(file) => run(&c.target, WrkBody::Same(file), rounds.each, &c.script)?,
                Feed::EachRound(files) => {
                    let file = (files.get(round))
                        .ok_or_else(|| format!("no body file for round {round}"))?;
                    let mut taken = run(&c.target, WrkBody::Each(file), rounds.each, &c.script)?;
                    // Past the file's last line the script sends an empty body, refused
                    // (a 400 wrk counts already): the round ran out of bodies, and each
                    // request past them is an error, counted once.
                    let lines = std::fs::read(file)
                        .map_err(|e| format!("{}: {e}", file.display()))?
                        .iter()
                        .filter(|&&b| b == b'\n')
                        .count() as u64;
                    taken.errors = taken.errors.max(taken.requests.saturating_sub(lines));
                    taken
                }
            };
            measured[i].push(taken);
        }
    }
    Ok(measured.into_iter().map(Throughput::median_of).collect())
}

impl Throughput {
    /// The median round's rate, the requests and errors of all.
    fn median_of(rounds: Vec<Throughput>) -> Throughput {
        let mut rates: Vec<f64> = rounds.iter().map(|t| t.rps).collect();
        rates.sort_by(f64::total_cmp);
        let rps = match rates.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => rates[n / 2],
            n => (rates[n / 2 - 1] + rates[n / 2]) / 2.0,
        };
        Throughput {
            rps,
            requests: rounds.iter().map(|t| t.requests).sum(),
            errors: rounds.iter().map(|t| t.errors).sum(),
            rounds: rounds.iter().map(|t| t.rps).collect(),
        }
    }

    /// The lowest and highest of this contender's per-round ratio to `other`'s (rounds
    /// paired as they were taken, side by side).
    pub fn ratio_spread(&self, other: &Throughput) -> Option<(f64, f64)> {
        let ratios = self.rounds.iter().zip(&other.rounds).map(|(a, b)| a / b);
        ratios.fold(None, |acc, r| match acc {
            None => Some((r, r)),
            Some((lo, hi)) => Some((f64::min(lo, r), f64::max(hi, r))),
        })
    }
}
