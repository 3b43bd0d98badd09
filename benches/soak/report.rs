//! The soak's report (Markdown) and its verdict: each criterion stated with the figures
//! it was judged on.

use crate::flows::{Class, Tally};
use crate::generator::Outcome;
use crate::samples::Sample;
use crate::{CONNECTIONS, MIB, Observed, SAMPLE_EVERY, Settings, log};
use std::fmt::Write;

/// The most resident memory may vary after the warm-up.
const RSS_BAND: f64 = 0.10;

/// The report so far, and each criterion with whether it held.
#[derive(Default)]
struct Report {
    out: String,
    verdict: Vec<(String, bool)>,
}

impl Report {
    fn judge(&mut self, what: String, held: bool) {
        self.verdict.push((what, held));
    }
}

/// The whole report, and whether every criterion held.
pub fn write(settings: &Settings, o: &Observed, log: &log::Summary) -> (String, bool) {
    let mut r = Report::default();
    let tally = o.soak.mix.tally.lock().expect("not poisoned");
    let priming = o.priming.mix.tally.lock().expect("not poisoned");
    outcomes(&mut r, settings, o, &tally, &priming);
    resources(&mut r, settings, o);
    let (agree, table) = cross_check(&[&tally, &priming], &o.metrics);
    let _ = writeln!(r.out, "\n{table}");
    r.judge(
        "the sidecar's own counters agree with every expected refusal, and it refused nothing \
         else"
            .into(),
        agree,
    );
    sidecar_log(&mut r, log);
    let passed = r.verdict.iter().all(|(_, held)| *held);
    let _ = writeln!(
        r.out,
        "\nVerdict: {}\n",
        if passed { "PASS" } else { "FAIL" }
    );
    for (what, held) in &r.verdict {
        let _ = writeln!(r.out, "- {} {what}", if *held { "pass" } else { "FAIL" });
    }
    (r.out, passed)
}

/// Every answer by class, the rate achieved and the latencies.
fn outcomes(r: &mut Report, settings: &Settings, o: &Observed, tally: &Tally, priming: &Tally) {
    let out = &mut r.out;
    let wrong = |t: &Tally| t.unexpected.values().sum::<u64>() + t.revoke_failures;
    let right: u64 = tally.expected.values().sum();
    let answered = right + tally.unexpected.values().sum::<u64>();
    let _ = writeln!(
        out,
        "### Soak ({} requests at {} req/s, {} connections, {} callers, {} store)\n",
        settings.requests,
        settings.rate,
        CONNECTIONS,
        settings.tenants,
        if settings.redis { "Redis" } else { "memory" }
    );
    let _ = writeln!(
        out,
        "| outcome | expected | unexpected |\n| --- | ---: | ---: |"
    );
    let mut classes: Vec<&Class> = tally
        .expected
        .keys()
        .chain(tally.unexpected.keys())
        .collect();
    classes.sort();
    classes.dedup();
    let count = |map: &std::collections::BTreeMap<Class, u64>, c| map.get(c).copied().unwrap_or(0);
    for class in classes {
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            class.label(),
            count(&tally.expected, class),
            count(&tally.unexpected, class)
        );
    }
    let _ = writeln!(
        out,
        "| all | {right} | {} |\n\nrevocations over the admin endpoint: {} (failed: {}); \
         follow-ups unsent when the schedule ended: {}",
        answered - right,
        tally.revocations,
        tally.revoke_failures,
        o.soak.mix.left_over()
    );
    for e in tally.examples.iter().chain(&priming.examples) {
        let _ = writeln!(out, "- unexpected: {e}");
    }
    let mut timed = Outcome {
        latencies: o.soak.outcome.latencies.clone(),
        ..Default::default()
    };
    let elapsed = o.soak.outcome.elapsed.as_secs_f64();
    let _ = writeln!(
        out,
        "\nduration {elapsed:.0} s (wall {:.0} s), achieved {:.0} req/s; latency after the \
         warm-up (µs from the intended send) p50 {:.0} / p99 {:.0} / p99.9 {:.0} / max {:.0}\n",
        o.wall.as_secs_f64(),
        answered as f64 / elapsed,
        timed.quantile_us(0.50),
        timed.quantile_us(0.99),
        timed.quantile_us(0.999),
        timed.quantile_us(1.0),
    );
    let unexpected = wrong(tally) + wrong(priming);
    r.judge(
        format!(
            "{answered} of {} requests answered, every one as expected (unexpected: \
             {unexpected}, priming included; transport errors: {})",
            settings.requests, o.soak.outcome.errors
        ),
        answered == settings.requests as u64 && unexpected == 0 && o.soak.outcome.errors == 0,
    );
}

/// The sidecar's memory, files and tasks: idle, at the warm-up's end, after it.
fn resources(r: &mut Report, settings: &Settings, o: &Observed) {
    let out = &mut r.out;
    let (warm, after): (Vec<&Sample>, Vec<&Sample>) = o
        .samples
        .iter()
        .partition(|s| s.done < settings.warmup as u64);
    let _ = writeln!(
        out,
        "| sidecar | RSS MiB | open fds | alive tasks | in flight |\n| --- | ---: | ---: | ---: | ---: |"
    );
    let row = |out: &mut String, name: &str, s: &Sample| {
        let _ = writeln!(
            out,
            "| {name} | {:.1} | {} | {} | {} |",
            s.rss as f64 / MIB,
            s.fds,
            s.tasks,
            s.in_flight
        );
    };
    row(out, "after priming (3 s of the mix)", &o.start);
    row(out, "idle, before the soak", &o.before);
    if let Some(s) = warm.last() {
        row(out, &format!("end of warm-up ({:.0} s)", s.at), s);
    }
    let range = |f: fn(&Sample) -> i64| {
        let values = after.iter().map(|s| f(s));
        (values.clone().min().unwrap_or(0), values.max().unwrap_or(0))
    };
    let rss = range(|s| s.rss as i64);
    let fds = range(|s| s.fds as i64);
    if let Some(last) = after.last() {
        let (tasks, in_flight) = (range(|s| s.tasks), range(|s| s.in_flight));
        let _ = writeln!(
            out,
            "| after warm-up: min / max | {:.1} / {:.1} | {} / {} | {} / {} | {} / {} |",
            rss.0 as f64 / MIB,
            rss.1 as f64 / MIB,
            fds.0,
            fds.1,
            tasks.0,
            tasks.1,
            in_flight.0,
            in_flight.1,
        );
        row(out, &format!("last under load ({:.0} s)", last.at), last);
    }
    row(out, "idle, after the soak", &o.after);
    let failures = match o.sample_failures.first() {
        None => String::new(),
        Some(first) => format!(
            "; sampling failed {} times: {first}",
            o.sample_failures.len()
        ),
    };
    let _ = writeln!(
        out,
        "\n{} samples every {} s ({} after the warm-up of {} requests){failures}",
        o.samples.len(),
        SAMPLE_EVERY.as_secs(),
        after.len(),
        settings.warmup,
    );
    // The course of the resident memory, not only its range: a step (a map doubling, the
    // allocator taking pages) reads otherwise than a climb that would not stop.
    let per_minute = (60 / SAMPLE_EVERY.as_secs().max(1)).max(1) as usize;
    let course: Vec<String> = after
        .iter()
        .enumerate()
        .filter(|(i, _)| i % per_minute == 0 || *i + 1 == after.len())
        .map(|(_, s)| format!("{:.1}", s.rss as f64 / MIB))
        .collect();
    let _ = writeln!(
        out,
        "RSS after the warm-up, a sample a minute and the last (MiB): {}",
        course.join(", ")
    );
    r.judge(
        format!(
            "RSS after the warm-up within {:.0} %: {:.1} to {:.1} MiB (+{:.1} %) over {} \
             samples (at least 3 needed)",
            RSS_BAND * 100.0,
            rss.0 as f64 / MIB,
            rss.1 as f64 / MIB,
            (rss.1 as f64 / rss.0.max(1) as f64 - 1.0) * 100.0,
            after.len()
        ),
        after.len() >= 3 && rss.1 as f64 <= rss.0 as f64 * (1.0 + RSS_BAND),
    );
    // Under load the sidecar holds, beyond its idle self (whose figures include the
    // sampler's own scrape), a socket and a task per client connection, a socket per
    // upstream connection busy with one of their requests, plus a revocation's socket on
    // the admin port and an upstream socket closing; and each client connection's request
    // may have up to two short tasks of its own, which can outlive `requests_in_flight`
    // by a moment (an idempotency lease's renewal and the recording of its answer, or
    // hyper's connection to the upstream finishing in the background). The upstream
    // pool dials whenever a request finds no idle connection, and when a busy one comes
    // back first the new one joins the pool as a spare, kept while the pool holds fewer
    // than `limits.upstream_max_idle_per_host` idle (the sidecar's configuration): at
    // most one spare per client connection. Every sample after the warm-up must be
    // within these bounds.
    let spares = CONNECTIONS.min(crate::UPSTREAM_MAX_IDLE) as i64;
    let fd_bound = o.before.fds as i64 + 2 * CONNECTIONS as i64 + spares + 2;
    let task_bound = o.before.tasks + 4 * CONNECTIONS as i64;
    let tasks_max = after.iter().map(|s| s.tasks).max().unwrap_or(0);
    r.judge(
        format!(
            "under load, within the connections' bounds: fds at most {} (bound {fd_bound}), \
             tasks at most {tasks_max} (bound {task_bound})",
            fds.1
        ),
        fds.1 <= fd_bound && tasks_max <= task_bound,
    );
    r.judge(
        format!(
            "no file-descriptor growth: idle {} before, {} after",
            o.before.fds, o.after.fds
        ),
        o.after.fds <= o.before.fds,
    );
    r.judge(
        format!(
            "no task growth: idle {} alive tasks before, {} after; {} in flight after",
            o.before.tasks, o.after.tasks, o.after.in_flight
        ),
        o.after.tasks <= o.before.tasks && o.after.in_flight == 0,
    );
    r.judge("every sample taken".into(), o.sample_failures.is_empty());
}

/// The sidecar's log by level and message; no error, nothing secret.
fn sidecar_log(r: &mut Report, log: &log::Summary) {
    let _ = writeln!(
        r.out,
        "The sidecar's log: {} lines, {:.1} MiB\n\n| level | message | lines |\n| --- | --- | ---: |",
        log.lines,
        log.bytes as f64 / MIB
    );
    for ((level, message), n) in &log.messages {
        let _ = writeln!(r.out, "| {level} | {message} | {n} |");
    }
    r.judge(
        format!("no ERROR line in the sidecar's log ({})", log.errors),
        log.errors == 0,
    );
    let first = log
        .first_leak
        .as_deref()
        .map_or(String::new(), |l| format!(", first: {l}"));
    r.judge(
        format!(
            "no token, handle or plaintext state in the sidecar's log ({}{first})",
            log.leaks
        ),
        log.leaks == 0,
    );
}

/// The sidecar's counters beside the soak's own counts (priming included, as the
/// counters are): each expected refusal and record counted under its cause, and no
/// refusal of another kind. A Markdown table, and whether every row agrees.
fn cross_check(tallies: &[&Tally], metrics: &str) -> (bool, String) {
    use Class::*;
    let rows: [(&str, &[Class]); 9] = [
        ("state_verified_total{result=\"malformed\"}", &[Tampered]),
        ("state_verified_total{result=\"replayed\"}", &[Replayed]),
        ("state_verified_total{result=\"revoked\"}", &[Revoked]),
        ("handles_total{result=\"malformed\"}", &[HandleTampered]),
        ("handles_total{result=\"revoked\"}", &[RevokedHandle]),
        ("idempotency_total{result=\"recorded\"}", &[Write]),
        ("idempotency_total{result=\"replayed\"}", &[WriteRepeated]),
        (
            "requests_refused_total{reason=\"invalid_state\"}",
            &[Tampered, Replayed, Revoked],
        ),
        (
            "requests_refused_total{reason=\"invalid_handle\"}",
            &[HandleTampered, RevokedHandle],
        ),
    ];
    let counter = |name: &str| -> u64 {
        let name = format!("mcp_state_guard_{name} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name.as_str()))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let mut out =
        String::from("| sidecar counter | its value | the soak's count |\n| --- | ---: | ---: |\n");
    let mut agree = true;
    for (name, classes) in rows {
        let ours: u64 = tallies
            .iter()
            .flat_map(|t| {
                classes
                    .iter()
                    .map(|c| t.expected.get(c).copied().unwrap_or(0))
            })
            .sum();
        let theirs = counter(name);
        agree &= ours == theirs;
        let _ = writeln!(out, "| `{name}` | {theirs} | {ours} |");
    }
    let others: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("mcp_state_guard_requests_refused_total{"))
        .filter(|l| !l.contains("\"invalid_state\"") && !l.contains("\"invalid_handle\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    agree &= others == 0;
    let _ = writeln!(
        out,
        "| `requests_refused_total`, every other reason | {others} | 0 |"
    );
    (agree, out)
}
