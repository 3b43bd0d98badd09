use super::*;
use crate::registry::Registry;
use prometheus::IntGauge;

fn budget(limit: usize) -> Arc<MemoryBudget> {
    MemoryBudget::new(limit, IntGauge::new("b", "b").unwrap())
}

fn events(stream: &SessionStream) -> Vec<String> {
    std::iter::from_fn(|| stream.notices.try_next())
        .map(|e| String::from_utf8(e.to_vec()).unwrap())
        .collect()
}

#[test]
fn events_go_to_the_get_stream_else_a_request_in_progress_else_wait() {
    let metrics = StdioMetrics::register(&Registry::new());
    let budget = budget(1 << 20);
    let outbox = Outbox::new(budget.clone());
    let request = Notices::new(&budget);
    // No stream: a request's event stream takes it; with neither, it waits.
    outbox.send(
        Bytes::from_static(b"{\"a\":1}"),
        Some(request.clone()),
        &metrics,
    );
    outbox.send(Bytes::from_static(b"{\"b\":2}"), None, &metrics);
    assert_eq!(request.try_next().as_deref(), Some(&b"{\"a\":1}"[..]));
    let stream = outbox.open_stream(None).unwrap();
    // What waited comes first, numbered; then what comes live.
    outbox.send(
        Bytes::from_static(b"{\"c\":3}"),
        Some(request.clone()),
        &metrics,
    );
    let got = events(&stream);
    assert_eq!(
        got,
        [
            "id: 2\r\nevent: message\r\ndata: {\"b\":2}\r\n\r\n",
            "id: 3\r\nevent: message\r\ndata: {\"c\":3}\r\n\r\n"
        ]
    );
    assert!(request.try_next().is_none(), "the GET stream took it");
    // One GET stream at a time; a resumed one replays after its Last-Event-ID.
    assert_eq!(outbox.open_stream(None).err(), Some(StreamOpen));
    drop(stream);
    assert!(!outbox.has_stream());
    let resumed = outbox.open_stream(Some(1)).unwrap();
    let got = events(&resumed);
    assert_eq!(got.len(), 2);
    assert!(got[0].starts_with("id: 2\r\n"));
    drop(resumed);
    drop(request);
    drop(outbox);
    assert_eq!(budget.used(), 0, "every kept byte given back");
}

#[test]
fn kept_events_are_bounded_and_held_in_the_budget() {
    let metrics = StdioMetrics::register(&Registry::new());
    let budget = budget(1000);
    let outbox = Outbox::new(budget.clone());
    for _ in 0..KEPT_EVENTS + 10 {
        outbox.send(Bytes::from_static(b"0123456789"), None, &metrics);
    }
    assert_eq!(budget.used(), KEPT_EVENTS * 10, "only the last are kept");
    outbox.send(Bytes::from(vec![b'x'; 2000]), None, &metrics);
    assert_eq!(metrics.dropped_count(Dropped::OverBudget), 1);
    let last = KEPT_EVENTS as u64 + 10;
    let stream = outbox.open_stream(Some(last - 4)).unwrap();
    let got = events(&stream);
    assert_eq!(got.len(), 4);
    assert!(
        got[0].starts_with(&format!("id: {}\r\n", last - 3)),
        "{}",
        got[0]
    );
}
