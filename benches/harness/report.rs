//! The harness's report: one run's figures as the Markdown tables docs/performance.md shows,
//! followed by every error a measurement met (a run with errors says so at its end).

use super::generator::Outcome;
use super::memory::Streams;
use super::{OPEN_LOOP_CONNECTIONS, Phase, Row, Settings, Setup, SidecarRow, wrk};

const MIB: f64 = 1024.0 * 1024.0;

/// The run's tables in Markdown (as docs/performance.md shows them), then every error any
/// measurement met.
pub(super) fn markdown(
    settings: &Settings,
    rows: &mut [Row],
    single_use: &mut [SidecarRow],
    setup: &Setup,
    after_load_rss: u64,
    streams: &Result<[Streams; 3], String>,
) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let mut errors = Vec::new();
    let note = |errors: &mut Vec<String>, what: String, n: u64, first: Option<&str>| {
        if n > 0 {
            errors.push(format!("{what}: {n} failed ({})", first.unwrap_or("wrk")));
        }
    };
    let rounds = settings.rounds;
    let _ = writeln!(
        out,
        "### Throughput (wrk, 1 thread, {} connections; the median of {} rounds of {} s, the \
         servers of a row taken in turn, the order reversed every other round)\n",
        wrk::CONNECTIONS,
        rounds.count,
        rounds.each.as_secs()
    );
    let _ = writeln!(
        out,
        "| answer | phase | A direct req/s | B sidecar req/s | C nginx req/s | D hyper floor req/s | B/C | D/C | B/D | B/D by round (lowest – highest) |"
    );
    let _ = writeln!(
        out,
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let spread = |b: Option<&wrk::Throughput>, d: Option<&wrk::Throughput>| {
        b.zip(d)
            .and_then(|(b, d)| b.ratio_spread(d))
            .map_or_else(String::new, |(lo, hi)| format!("{lo:.2} – {hi:.2}"))
    };
    for row in rows.iter() {
        let rps = row
            .rps
            .each_ref()
            .map(|t| t.as_ref().map_or(f64::NAN, |t| t.rps));
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} | {} |",
            row.workload,
            row.phase.label(),
            rps[0],
            rps[1],
            rps[2],
            rps[3],
            rps[1] / rps[2],
            rps[3] / rps[2],
            rps[1] / rps[3],
            spread(row.rps[1].as_ref(), row.rps[3].as_ref()),
        );
        for (name, t) in ["direct", "sidecar", "nginx", "hyper floor"]
            .iter()
            .zip(&row.rps)
        {
            if let Some(t) = t {
                note(
                    &mut errors,
                    format!("wrk {} {} {name}", row.workload, row.phase.label()),
                    t.errors,
                    None,
                );
            }
        }
    }
    // D: the floor's JSON row of the same phase, taken in turn with this row's sidecar.
    for row in single_use.iter() {
        let (b, d) = (&row.rps, &row.floor);
        let _ = writeln!(
            out,
            "| JSON | {} | | {:.0} | | {:.0} | | | {:.2} | {} |",
            row.label,
            b.rps,
            d.rps,
            b.rps / d.rps,
            spread(Some(b), Some(d)),
        );
        note(&mut errors, format!("wrk {}", row.label), b.errors, None);
        note(
            &mut errors,
            format!("wrk {} floor", row.label),
            d.errors,
            None,
        );
    }
    let _ = writeln!(
        out,
        "\n### Latency (open loop, {} req/s, {} connections, {} s; µs from the intended send)\n",
        settings.rate,
        OPEN_LOOP_CONNECTIONS,
        settings.measure.as_secs()
    );
    let _ = writeln!(
        out,
        "| answer | phase | A direct p50 / p99 / p99.9 | B sidecar p50 / p99 / p99.9 | \
         C nginx p50 / p99 / p99.9 | D hyper floor p50 / p99 / p99.9 | B−A p50 / p99 | D−A p50 / p99 |"
    );
    let _ = writeln!(
        out,
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let cell = |o: &mut Outcome| {
        format!(
            "{:.0} / {:.0} / {:.0}",
            o.quantile_us(0.50),
            o.quantile_us(0.99),
            o.quantile_us(0.999)
        )
    };
    // Direct JSON p50 / p99 by phase, for the rows with a sidecar column only.
    let mut direct_json = [None, None];
    for row in rows.iter_mut() {
        let [a, b, c, d] = &mut row.latency;
        let (Some(a), Some(b), Some(c), Some(d)) = (a, b, c, d) else {
            continue;
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {:.0} / {:.0} | {:.0} / {:.0} |",
            row.workload,
            row.phase.label(),
            cell(a),
            cell(b),
            cell(c),
            cell(d),
            b.quantile_us(0.50) - a.quantile_us(0.50),
            b.quantile_us(0.99) - a.quantile_us(0.99),
            d.quantile_us(0.50) - a.quantile_us(0.50),
            d.quantile_us(0.99) - a.quantile_us(0.99),
        );
        for (name, o) in [
            ("direct", &*a),
            ("sidecar", &*b),
            ("nginx", &*c),
            ("hyper floor", &*d),
        ] {
            note(
                &mut errors,
                format!("open loop {} {} {name}", row.workload, row.phase.label()),
                o.errors,
                o.first_error.as_deref(),
            );
        }
        if row.workload == "JSON" {
            direct_json[usize::from(row.phase == Phase::Retry)] =
                Some((a.quantile_us(0.50), a.quantile_us(0.99)));
        }
    }
    for SidecarRow {
        label,
        phase,
        latency: o,
        ..
    } in single_use.iter_mut()
    {
        let direct = direct_json[usize::from(*phase == Phase::Retry)];
        let (a50, a99) = direct.unwrap_or((f64::NAN, f64::NAN));
        let _ = writeln!(
            out,
            "| JSON | {label} | | {} | | | {:.0} / {:.0} | |",
            cell(o),
            o.quantile_us(0.50) - a50,
            o.quantile_us(0.99) - a99,
        );
        note(
            &mut errors,
            format!("open loop {label}"),
            o.errors,
            o.first_error.as_deref(),
        );
    }
    memory(
        &mut out,
        &mut errors,
        settings,
        setup,
        Some(after_load_rss),
        streams,
    );
    if !errors.is_empty() {
        let _ = writeln!(out, "\nERRORS:");
        for e in errors {
            let _ = writeln!(out, "- {e}");
        }
    }
    out
}

/// The memory table (idle RSS, and per idle SSE stream held through each proxy), its
/// failures added to `errors`.
pub(super) fn memory(
    out: &mut String,
    errors: &mut Vec<String>,
    settings: &Settings,
    setup: &Setup,
    after_load_rss: Option<u64>,
    streams: &Result<[Streams; 3], String>,
) {
    use std::fmt::Write;
    let _ = writeln!(out, "\n### Memory (VmRSS)\n");
    let _ = writeln!(out, "| | sidecar | nginx | hyper floor |");
    let _ = writeln!(out, "| --- | ---: | ---: | ---: |");
    let _ = writeln!(
        out,
        "| idle, after start | {:.1} MiB | | |",
        setup.idle_rss as f64 / MIB
    );
    let _ = writeln!(
        out,
        "| idle, {} | {:.1} MiB | {} | {} |",
        if after_load_rss.is_some() {
            "after the load above"
        } else {
            "before the streams (no load)"
        },
        after_load_rss.unwrap_or(setup.idle_rss) as f64 / MIB,
        streams.as_ref().map_or("".into(), |[_, n, _]| format!(
            "{:.1} MiB",
            n.before as f64 / MIB
        )),
        streams.as_ref().map_or("".into(), |[_, _, d]| format!(
            "{:.1} MiB",
            d.before as f64 / MIB
        ))
    );
    match streams {
        Ok([b, c, d]) => {
            let with = |s: &Streams| format!("{:.1} MiB ({} streams)", s.with as f64 / MIB, s.held);
            let per = |s: &Streams| {
                s.with.saturating_sub(s.before) as f64 / s.held.max(1) as f64 / 1024.0
            };
            let _ = writeln!(
                out,
                "| with idle SSE streams open (asked for {}) | {} | {} | {} |",
                settings.streams,
                with(b),
                with(c),
                with(d)
            );
            let _ = writeln!(
                out,
                "| per open stream | {:.1} KiB | {:.1} KiB | {:.1} KiB |",
                per(b),
                per(c),
                per(d)
            );
            for (name, s) in [("sidecar", b), ("nginx", c), ("hyper floor", d)] {
                if let Some(e) = &s.error {
                    errors.push(format!("holding streams through {name}: {e}"));
                }
            }
        }
        Err(e) => errors.push(e.clone()),
    }
}
