use super::*;
use crate::registry::Registry;
use serde_json::json;

fn metrics() -> StdioMetrics {
    StdioMetrics::register(&Registry::new())
}

fn request(id: Value, token: Option<Value>) -> Map<String, Value> {
    let mut params = json!({"name": "t", "arguments": {"big": 123456789012345678901234567890u128}});
    if let Some(token) = token {
        params["_meta"] = json!({ "progressToken": token });
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
        .as_object()
        .unwrap()
        .clone()
}

#[test]
fn ids_and_tokens_are_the_bridges_and_come_back_as_the_callers() {
    let metrics = metrics();
    let mut routes = Routes::default();
    // Two callers with the same id and token: the child sees two different ones.
    let mut a = request(json!(1), Some(json!(1)));
    let mut b = request(json!(1), Some(json!("tok")));
    let (a_id, a_token) = rewrite(&mut a, 10);
    let (b_id, b_token) = rewrite(&mut b, 11);
    assert_eq!((a["id"].clone(), b["id"].clone()), (json!(10), json!(11)));
    assert_eq!(a["params"]["_meta"]["progressToken"], json!(10));
    assert_eq!(b["params"]["_meta"]["progressToken"], json!(11));
    // Everything else is kept as sent, big numbers to the digit.
    assert!(
        String::from_utf8(encode(&a).to_vec())
            .unwrap()
            .contains("123456789012345678901234567890")
    );
    let mut ra = routes.open(10, a_id, a_token, true);
    let mut rb = routes.open(11, b_id, b_token, false);

    let progress = br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":10,"progress":1}}"#;
    assert_eq!(routes.deliver(progress, &metrics), Delivery::Delivered);
    let notice: Value = serde_json::from_slice(&ra.notices.try_recv().unwrap()).unwrap();
    assert_eq!(notice["params"]["progressToken"], json!(1));
    // b asked for JSON: its progress is dropped with a count.
    let progress = br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":11,"progress":1}}"#;
    assert_eq!(routes.deliver(progress, &metrics), Delivery::Delivered);
    assert!(rb.notices.try_recv().is_err());
    assert_eq!(metrics.dropped_count(Dropped::JsonCaller), 1);

    let answer = br#"{"jsonrpc":"2.0","id":11,"result":{"requestState":"x"}}"#;
    assert_eq!(routes.deliver(answer, &metrics), Delivery::Delivered);
    let got: Value = serde_json::from_slice(&rb.answer.try_recv().unwrap().unwrap()).unwrap();
    assert_eq!(
        got,
        json!({"jsonrpc":"2.0","id":1,"result":{"requestState":"x"}})
    );
    // Answered once: the same id again belongs to nobody.
    assert_eq!(
        routes.deliver(answer, &metrics),
        Delivery::Unmatched(Unmatched::UnknownId, None)
    );
    assert!(ra.answer.try_recv().is_err());
    assert_eq!(routes.fail_all(), 1);
    assert_eq!(ra.answer.try_recv().unwrap(), Err(Fault::Exited));
}

#[test]
fn lines_of_nobody_are_unmatched() {
    let metrics = metrics();
    let mut routes = Routes::default();
    let _r = routes.open(3, json!(1), None, true);
    let cases: [(&[u8], Delivery); 7] = [
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
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":3}}"#,
            Delivery::Unmatched(Unmatched::Notification, Some("notifications/progress".into())),
        ),
        (
            br#"{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{}}"#,
            Delivery::ServerRequest(json!("s1"), "sampling/createMessage".into()),
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

#[test]
fn an_overlong_answer_is_named_by_its_first_or_last_bytes() {
    let none = b"".as_slice();
    let leading = |prefix: &[u8]| overlong_id(prefix, none);
    assert_eq!(
        leading(br#"{"jsonrpc":"2.0","id":42,"result":{"x":"#),
        Some(42)
    );
    assert_eq!(leading(br#"{ "jsonrpc" : "2.0" , "id" : 7 }"#), Some(7));
    assert_eq!(leading(br#"{"id":9,"result":"#), Some(9));
    assert_eq!(
        leading(br#"{"jsonrpc":"2.0","method":"x","params":{"id":5,"#),
        None
    );
    assert_eq!(leading(br#"{"jsonrpc":"2.0","id":"5","#), None);
    assert_eq!(overlong_id(b"garbage", b"garbage"), None);
    // The TypeScript SDK writes the id last.
    let ts = br#"{"result":{"content":[]},"jsonrpc":"2.0","id":"#;
    assert_eq!(
        overlong_id(ts, br#"xxxx"}]},"jsonrpc":"2.0","id":12}"#),
        Some(12)
    );
    // A nested id at the end is not the message's.
    assert_eq!(overlong_id(ts, br#"xx","item":{"id":3}}}"#), None);
}
