use super::*;
use crate::registry::Registry;
use prometheus::IntGauge;
use serde_json::json;

fn metrics() -> StdioMetrics {
    StdioMetrics::register(&Registry::new())
}

fn budget(limit: usize) -> Arc<MemoryBudget> {
    MemoryBudget::new(limit, IntGauge::new("b", "b").unwrap())
}

fn progress(token: &str, message: &str) -> Vec<u8> {
    serde_json::to_vec(
        &json!({"jsonrpc": "2.0", "method": "notifications/progress",
        "params": {"progressToken": token, "progress": 1, "message": message}}),
    )
    .unwrap()
}

#[tokio::test]
async fn answers_and_progress_go_to_the_route_their_bridge_id_names() {
    let metrics = metrics();
    let budget = budget(1 << 20);
    let mut routes = Routes::new(budget.clone());
    let (a, b) = (ids::fresh(), ids::fresh());
    assert_ne!(a, b);
    let ra = routes.open(a.clone(), json!(1), Some(json!(1)), true);
    let mut rb = routes.open(b.clone(), json!(1), Some(json!("tok")), false);

    assert_eq!(
        routes.deliver(&progress(&a, "x"), &metrics),
        Delivery::Delivered
    );
    let notice: Value = serde_json::from_slice(&ra.notices.try_next().unwrap()).unwrap();
    assert_eq!(notice["params"]["progressToken"], json!(1));
    // b asked for JSON: its progress is dropped with a count.
    assert_eq!(
        routes.deliver(&progress(&b, "x"), &metrics),
        Delivery::Delivered
    );
    assert!(rb.notices.try_next().is_none());
    assert_eq!(metrics.dropped_count(Dropped::JsonCaller), 1);

    let answer = format!(r#"{{"jsonrpc":"2.0","id":"{b}","result":{{"requestState":"x"}}}}"#);
    assert_eq!(
        routes.deliver(answer.as_bytes(), &metrics),
        Delivery::Delivered
    );
    let reply = rb.answer.try_recv().unwrap().unwrap();
    assert_eq!(
        budget.used(),
        reply.message.len(),
        "an answer is held until sent"
    );
    let got: Value = serde_json::from_slice(&reply.message).unwrap();
    assert_eq!(
        got,
        json!({"jsonrpc":"2.0","id":1,"result":{"requestState":"x"}})
    );
    drop(reply);
    assert_eq!(budget.used(), 0);
    // Answered once: the same id again belongs to nobody.
    assert_eq!(
        routes.deliver(answer.as_bytes(), &metrics),
        Delivery::Unmatched(Unmatched::UnknownId, None)
    );
    let mut ra = ra;
    assert!(ra.answer.try_recv().is_err());
    assert_eq!(routes.fail_all(), 1);
    assert_eq!(ra.answer.try_recv().unwrap().unwrap_err(), NoAnswer::Exited);
}

/// The ids a counter would have given, as numbers or strings, name nobody.
#[test]
fn guessed_ids_and_tokens_name_nobody() {
    let metrics = metrics();
    let mut routes = Routes::new(budget(1 << 20));
    let id = ids::fresh();
    let _r = routes.open(id, json!(1), Some(json!("p")), true);
    for guess in 0..50 {
        for token in [json!(guess), json!(guess.to_string())] {
            let answer =
                json!({"jsonrpc": "2.0", "id": token, "result": {"requestState": "forged"}});
            assert_eq!(
                routes.deliver(&serde_json::to_vec(&answer).unwrap(), &metrics),
                Delivery::Unmatched(Unmatched::UnknownId, None)
            );
            let notice = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": token, "progress": 1}});
            assert!(matches!(
                routes.deliver(&serde_json::to_vec(&notice).unwrap(), &metrics),
                Delivery::Unmatched(Unmatched::Notification, _)
            ));
        }
    }
    assert_eq!(routes.len(), 1);
}

#[test]
fn lines_of_nobody_are_unmatched() {
    let metrics = metrics();
    let mut routes = Routes::new(budget(1 << 20));
    let id = ids::fresh();
    let _r = routes.open(id.clone(), json!(1), None, true);
    let progress_without_token = progress(&id, "x");
    let cases: [(&[u8], Delivery); 8] = [
        (b"   ", Delivery::Blank),
        (b"hello from print()", Delivery::Unmatched(Unmatched::NotJson, None)),
        (b"[1,2]", Delivery::Unmatched(Unmatched::NotJson, None)),
        (b"{\"jsonrpc\":\"2.0\"}", Delivery::Unmatched(Unmatched::Invalid, None)),
        (
            br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#,
            Delivery::Unmatched(Unmatched::Notification, Some("notifications/message".into())),
        ),
        // Progress for a request that asked for none.
        (
            &progress_without_token,
            Delivery::Unmatched(Unmatched::Notification, Some("notifications/progress".into())),
        ),
        (
            br#"{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{}}"#,
            Delivery::ServerRequest(json!("s1"), "sampling/createMessage".into()),
        ),
        // Unreadable, naming nobody open.
        (
            br#"{"jsonrpc":"2.0","id":"00000000000000000000000000000000","result":"\ud800"}"#,
            Delivery::Unmatched(Unmatched::NotJson, None),
        ),
    ];
    for (line, expected) in cases {
        assert_eq!(
            routes.deliver(line, &metrics),
            expected,
            "{}",
            String::from_utf8_lossy(line)
        );
    }
    assert_eq!(routes.len(), 1);
}

/// An answer that cannot be read fails the request it names at once, whichever end of
/// the line names it.
#[test]
fn an_unreadable_answer_fails_its_request() {
    let metrics = metrics();
    let mut routes = Routes::new(budget(1 << 20));
    for line in [
        r#"{"jsonrpc":"2.0","id":"ID","result":{"text":"\ud800"}}"#,
        r#"{"result":{"text":"\ud800"},"jsonrpc":"2.0","id":"ID"}"#,
    ] {
        let id = ids::fresh();
        let mut receivers = routes.open(id.clone(), json!(7), None, false);
        let line = line.replace("ID", &id);
        assert_eq!(
            routes.deliver(line.as_bytes(), &metrics),
            Delivery::Unreadable { failed: true }
        );
        assert_eq!(
            receivers.answer.try_recv().unwrap().unwrap_err(),
            NoAnswer::Unreadable
        );
    }
    assert_eq!(routes.len(), 0);
}

/// A caller that does not take its notifications is cut off at the per-route bound, or
/// as soon as one cannot be reserved: its route fails, what waited for it is given back,
/// and the reader is told whom to cancel.
#[test]
fn a_caller_falling_behind_is_cut_off() {
    let metrics = metrics();
    let budget = budget(1 << 20);
    let mut routes = Routes::new(budget.clone());
    let id = ids::fresh();
    let mut slow = routes.open(id.clone(), json!(1), Some(json!("p")), true);
    for _ in 0..super::super::notices::NOTICES_BUFFERED {
        assert_eq!(
            routes.deliver(&progress(&id, "x"), &metrics),
            Delivery::Delivered
        );
    }
    assert!(budget.used() > 0);
    assert_eq!(
        routes.deliver(&progress(&id, "x"), &metrics),
        Delivery::CutOff(Some(id.clone()), CutOff::SlowReader)
    );
    assert_eq!(budget.used(), 0);
    assert_eq!(
        slow.answer.try_recv().unwrap().unwrap_err(),
        NoAnswer::CutOff(CutOff::SlowReader)
    );
    assert!(slow.notices.try_next().is_none());

    let small = budget_limited();
    let mut routes = Routes::new(small.clone());
    let id = ids::fresh();
    let mut big = routes.open(id.clone(), json!(1), Some(json!("p")), true);
    assert_eq!(
        routes.deliver(&progress(&id, &"x".repeat(200)), &metrics),
        Delivery::CutOff(Some(id), CutOff::OverBudget)
    );
    assert_eq!(
        big.answer.try_recv().unwrap().unwrap_err(),
        NoAnswer::CutOff(CutOff::OverBudget)
    );
    assert_eq!(small.used(), 0);
}

fn budget_limited() -> Arc<MemoryBudget> {
    budget(100)
}

/// An event of a `subscriptions/listen` stream, as the child tags it.
fn event(subscription: &str, method: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"jsonrpc": "2.0", "method": method,
        "params": {"_meta": {SUBSCRIPTION_ID: subscription}}}))
    .unwrap()
}

#[tokio::test]
async fn each_listen_stream_gets_only_the_events_tagged_with_its_own_request() {
    let metrics = metrics();
    let mut routes = Routes::new(budget(1 << 20));
    let (a, b) = (ids::fresh(), ids::fresh());
    let ra = routes.open(a.clone(), json!("listen-a"), None, true);
    let rb = routes.open(b.clone(), json!(7), None, true);
    for (subscription, method) in [
        (&a, "notifications/subscriptions/acknowledged"),
        (&b, "notifications/subscriptions/acknowledged"),
        (&b, "notifications/tools/list_changed"),
        (&a, "notifications/resources/updated"),
    ] {
        let line = event(subscription, method);
        assert_eq!(routes.deliver(&line, &metrics), Delivery::Delivered);
    }
    let events = |route: &Receivers| {
        std::iter::from_fn(|| route.notices.try_next())
            .map(|n| serde_json::from_slice::<Value>(&n).unwrap())
            .collect::<Vec<_>>()
    };
    // Each caller sees its own request's id as the subscription id, in order.
    let (got_a, got_b) = (events(&ra), events(&rb));
    assert_eq!(got_a.len(), 2);
    assert_eq!(got_b.len(), 2);
    assert_eq!(got_a[1]["method"], "notifications/resources/updated");
    assert_eq!(got_b[1]["method"], "notifications/tools/list_changed");
    assert!(
        got_a
            .iter()
            .all(|e| e["params"]["_meta"][SUBSCRIPTION_ID] == "listen-a")
    );
    assert!(
        got_b
            .iter()
            .all(|e| e["params"]["_meta"][SUBSCRIPTION_ID] == 7)
    );
    // A subscription no open request names goes to nobody.
    let stray = event(&ids::fresh(), "notifications/tools/list_changed");
    assert_eq!(
        routes.deliver(&stray, &metrics),
        Delivery::Unmatched(
            Unmatched::Notification,
            Some("notifications/tools/list_changed".into())
        )
    );
}

/// The answer `line` hands to the caller whose own id was `caller_id`.
fn answered(line: &str, caller_id: Value) -> Reply {
    let mut routes = Routes::new(budget(1 << 20));
    let id = ids::fresh();
    let mut receivers = routes.open(id.clone(), caller_id, None, false);
    let line = line.replace("BRIDGE", &id);
    assert_eq!(
        routes.deliver(line.as_bytes(), &metrics()),
        Delivery::Delivered,
        "{line}"
    );
    assert!(!routes.is_open(&id));
    receivers.answer.try_recv().unwrap().unwrap()
}

#[test]
fn an_answer_goes_on_as_the_child_wrote_it_with_its_callers_id() {
    // Spaces, key order, escapes and numbers stay as written: only the id is the
    // caller's (a string that needs escaping, spelled as JSON spells it).
    let written =
        r#"  { "result" : {"t":"\u00e9\/", "n":1.50E+3}, "id": "BRIDGE",  "jsonrpc":"2.0" }	"#;
    let reply = answered(written, json!("caller \"7\""));
    assert_eq!(
        std::str::from_utf8(&reply.message).unwrap(),
        r#"{ "result" : {"t":"\u00e9\/", "n":1.50E+3}, "id": "caller \"7\"",  "jsonrpc":"2.0" }"#
    );
    assert_eq!(reply.status, http::StatusCode::OK);
    let reply = answered(r#"{"jsonrpc":"2.0","id":"BRIDGE","result":{}}"#, json!(42));
    assert_eq!(
        &reply.message[..],
        br#"{"jsonrpc":"2.0","id":42,"result":{}}"#
    );
}

#[test]
fn an_answer_the_text_cannot_carry_on_is_written_again_from_its_tree() {
    // A `\r` between tokens (an event's `data:` line cannot carry it), and a key twice
    // (the strict scan refuses it; the tree keeps the last, as it always did): written
    // again, compact, with the caller's id.
    for (line, written) in [
        (
            "\r{\"jsonrpc\":\"2.0\",\r\"id\":\"BRIDGE\",\"result\":{}}\r",
            r#"{"jsonrpc":"2.0","id":3,"result":{}}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","id":"BRIDGE","result":{"a":1,"a":2}}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":{"a":2}}"#,
        ),
    ] {
        let reply = answered(line, json!(3));
        assert_eq!(std::str::from_utf8(&reply.message).unwrap(), written);
    }
}

#[test]
fn an_answers_status_is_its_error_codes_read_either_way() {
    // The same status by the text (the first of each pair) and by the tree (a `\r`
    // between tokens sends the line there).
    for (code, status) in [
        ("-32602", http::StatusCode::BAD_REQUEST),
        ("-32601", http::StatusCode::NOT_FOUND),
        ("-32603", http::StatusCode::OK),
        ("-32602.0", http::StatusCode::OK),
        ("-3.2602e4", http::StatusCode::OK),
        ("\"-32602\"", http::StatusCode::OK),
        ("null", http::StatusCode::OK),
        ("99999999999999999999", http::StatusCode::OK),
    ] {
        for gap in ["", "\r"] {
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":"BRIDGE",{gap}"error":{{"code":{code},"message":"m"}}}}"#
            );
            assert_eq!(answered(&line, json!(1)).status, status, "{line}");
        }
    }
    // An `error` that is no object has no code.
    let reply = answered(r#"{"id":"BRIDGE","error":[{"code":-32602}]}"#, json!(1));
    assert_eq!(reply.status, http::StatusCode::OK);
}

#[test]
fn a_crlf_childs_answer_goes_on_as_written_and_a_form_feed_is_no_json() {
    let reply = answered(
        "{\"jsonrpc\":\"2.0\", \"id\":\"BRIDGE\",\"result\":{}}\r",
        json!(5),
    );
    assert_eq!(
        &reply.message[..],
        br#"{"jsonrpc":"2.0", "id":5,"result":{}}"#
    );
    // A form feed around the message is no JSON whitespace: the tree's reading refuses
    // the line, and the request it names fails.
    let mut routes = Routes::new(budget(1 << 20));
    let id = ids::fresh();
    let mut receivers = routes.open(id.clone(), json!(5), None, false);
    let line = format!("\u{c}{{\"jsonrpc\":\"2.0\",\"id\":\"{id}\",\"result\":{{}}}}");
    assert_eq!(
        routes.deliver(line.as_bytes(), &metrics()),
        Delivery::Unreadable { failed: true }
    );
    assert_eq!(
        receivers.answer.try_recv().unwrap().unwrap_err(),
        NoAnswer::Unreadable
    );
}
