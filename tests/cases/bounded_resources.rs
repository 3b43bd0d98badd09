//! Bounded resources: memory, connections and time per client are bounded, and what
//! upstream streams buffer shares the same memory budget. What a hostile client can make
//! the sidecar hold: parsed values (bounded per body by
//! `limits.max_json_values`), buffered bytes (bounded across requests by
//! `limits.max_buffered_bytes`), log volume (client text is clipped), and the
//! `requests_in_flight` gauge (a guard that follows the response body, so streams count and
//! a client that goes away decrements); an upstream's incomplete SSE events held against
//! the same budget, and a JSON answer stalling after its head cut off by the head timeout.
//! The peak-RSS case runs the real binary.

use crate::support::fake::{
    FakeBody, FakeUpstream, Reply, Step, assert_internal_error, call_case, case_of, complete,
    event, first_progress, input_required, last_data, open, plaintext, sealed as token,
    sidecar_with, tools_call, wait_until,
};
use crate::support::http::{mcp_headers, post_mcp, send};
use crate::support::process::Process;
use crate::support::sidecar::{self, Sidecar, config};
use bytes::Bytes;
use http::Method;
use mcp_state_guard::facade::error::ErrorKind;
use mcp_state_guard::facade::proxy::SealFailure;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const T: Duration = Duration::from_secs(30);

/// `{"jsonrpc":..,"params":{"name":"provision","arguments":{"a":[0,0,…]}}}` of about
/// `bytes` bytes: two million values in 4 MiB.
fn zeros(bytes: usize) -> Vec<u8> {
    let mut body = br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"provision","arguments":{"a":[0"#.to_vec();
    while body.len() < bytes - 16 {
        body.extend_from_slice(b",0");
    }
    body.extend_from_slice(b"]}}}");
    body
}

#[tokio::test(flavor = "multi_thread")]
async fn bodies_with_too_many_values_are_refused_before_anything_is_kept() {
    let fake = FakeUpstream::always(|| Reply::json(complete(json!(5), "ok").to_string())).await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let headers = mcp_headers("tools/call", Some("provision"));
    let reply = send(
        Method::POST,
        &sidecar.mcp_url(),
        &headers,
        zeros(4 << 20),
        T,
    )
    .await;
    assert_eq!(reply.status, 413, "{}", reply.text());
    assert_eq!(reply.json()["error"]["code"], -32600);
    assert_eq!(fake.count(), 0);
    assert_eq!(
        sidecar.metrics().refusals.refused_count(ErrorKind::Parse),
        1
    );
    // Under the cap, the same shape is forwarded.
    let reply = send(
        Method::POST,
        &sidecar.mcp_url(),
        &headers,
        zeros(150_000),
        T,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(fake.count(), 1);
    sidecar.stop().await;
}

/// A connection that sent a POST head announcing `declared` bytes and `sent` bytes of
/// its body.
async fn announce(sidecar: &Sidecar, declared: usize, sent: usize) -> TcpStream {
    let mut stream = TcpStream::connect(sidecar.addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        sidecar.addr, declared
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&vec![b' '; sent]).await.unwrap();
    stream
}

#[tokio::test(flavor = "multi_thread")]
async fn buffered_bodies_share_one_budget() {
    let fake = FakeUpstream::always(|| Reply::json(complete(json!(5), "ok").to_string())).await;
    let mut c = config(&fake.base_url());
    c.limits.max_body_bytes = 64 * 1024;
    c.limits.max_buffered_bytes = 64 * 1024;
    let sidecar = Sidecar::start(c).await;
    // Declared lengths hold nothing: eight clients that announce 60 KiB and send none of
    // it leave the budget untouched (they used to lock every POST out).
    let announce = |sent: usize| announce(&sidecar, 60 * 1024, sent);
    let mut idle = Vec::new();
    for _ in 0..8 {
        idle.push(announce(0).await);
    }
    let budget = || sidecar.metrics().path.buffered_bytes().get();
    let small = serde_json::to_vec(&tools_call(5, None)).unwrap();
    let headers = mcp_headers("tools/call", Some("provision"));
    let reply = send(Method::POST, &sidecar.mcp_url(), &headers, small, T).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(budget(), 0);
    // A client that sends 56 KiB of a 60 KiB body holds what it sent.
    let slow = announce(56 * 1024).await;
    crate::support::fake::wait_until(|| budget() >= 56 * 1024, "the slow body is reserved").await;
    let body = serde_json::to_vec(&tools_call(5, None)).unwrap();
    let padded = [
        &body[..body.len() - 1],
        &b",\"pad\":\""[..],
        &vec![b'x'; 8 * 1024],
        b"\"}",
    ]
    .concat();
    let headers = mcp_headers("tools/call", Some("provision"));
    let reply = send(
        Method::POST,
        &sidecar.mcp_url(),
        &headers,
        padded.clone(),
        T,
    )
    .await;
    assert_eq!(reply.status, 503, "{}", reply.text());
    assert_eq!(reply.headers.get("retry-after").unwrap(), "1");
    assert_eq!(
        sidecar
            .metrics()
            .refusals
            .refused_count(ErrorKind::Overloaded),
        1
    );
    assert_eq!(fake.count(), 1, "only the small request was forwarded");
    drop(idle);
    // The slow client leaves: its bytes come back, and the same request goes through.
    drop(slow);
    crate::support::fake::wait_until(|| budget() == 0, "the budget is returned").await;
    let reply = send(Method::POST, &sidecar.mcp_url(), &headers, padded, T).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    crate::support::fake::wait_until(|| budget() == 0, "the budget is returned").await;
    sidecar.stop().await;
}

/// What a retry holds beside its body while the store is asked (its arena, the opened
/// state) is reserved in the same budget: past it the retry is refused as overloaded
/// before its single-use state is spent, nothing is forwarded, and every byte comes back;
/// with room again the same token goes through, once.
#[tokio::test(flavor = "multi_thread")]
async fn what_a_retry_opens_is_held_inside_the_budget() {
    let fake = FakeUpstream::start(|request| {
        let message = request.json();
        let answer = match message["params"]["requestState"].is_null() {
            true => input_required(message["id"].clone(), json!(plaintext())),
            false => complete(message["id"].clone(), "ok"),
        };
        Reply::json(answer.to_string())
    })
    .await;
    let sidecar = sidecar_with(&fake, |c| {
        c.limits.max_body_bytes = 32 * 1024;
        c.limits.max_buffered_bytes = 32 * 1024;
        c.single_use.tools = vec!["provision".into()];
    })
    .await;
    let metrics = sidecar.metrics();
    let budget = || metrics.path.buffered_bytes().get() as usize;
    let headers = mcp_headers("tools/call", Some("provision"));
    let first = serde_json::to_vec(&tools_call(5, None)).unwrap();
    let reply = send(Method::POST, &sidecar.mcp_url(), &headers, first, T).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let retry =
        serde_json::to_vec(&tools_call(6, Some(json!(token(&reply.json()["result"]))))).unwrap();
    // A slow client leaves room for the retry's body and 512 bytes more: less than the
    // arena the retry reads its token into.
    let sent = 32 * 1024 - retry.len() - 512;
    let slow = announce(&sidecar, 32 * 1024, sent).await;
    wait_until(|| budget() >= sent, "the slow body is reserved").await;
    let refused = send(Method::POST, &sidecar.mcp_url(), &headers, retry.clone(), T).await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.headers.get("retry-after").unwrap(), "1");
    assert_eq!(metrics.refusals.refused_count(ErrorKind::Overloaded), 1);
    assert_eq!(fake.count(), 1, "the refused retry was not forwarded");
    assert_eq!(budget(), sent, "the refused retry gave back all it held");
    drop(slow);
    wait_until(|| budget() == 0, "the budget is returned").await;
    // Not spent by the refusal: the same token goes through now, and only once.
    let reply = send(Method::POST, &sidecar.mcp_url(), &headers, retry.clone(), T).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(fake.count(), 2);
    let replay = send(Method::POST, &sidecar.mcp_url(), &headers, retry, T).await;
    assert_eq!(replay.status, 400, "{}", replay.text());
    assert_eq!(fake.count(), 2, "a replay was forwarded");
    wait_until(|| budget() == 0, "every byte is given back").await;
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn in_flight_counts_streams_until_they_end_or_the_client_leaves() {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let rx = std::sync::Mutex::new(Some(rx));
    let fake = FakeUpstream::always(move || {
        let rx = rx.lock().unwrap().take().expect("one stream");
        Reply::new(200, FakeBody::channel(rx)).header("content-type", "text/event-stream")
    })
    .await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let gauge = || sidecar.metrics().path.in_flight().get();
    let body = serde_json::to_vec(&tools_call(5, None)).unwrap();
    let response = open(
        Method::POST,
        &sidecar.mcp_url(),
        &mcp_headers("tools/call", Some("provision")),
        FakeBody::whole(body),
        false,
    )
    .await;
    tx.send(Ok(Bytes::from(event(
        "\n",
        &crate::support::fake::progress(1),
    ))))
    .await
    .unwrap();
    assert_eq!(gauge(), 1, "a stream in progress is in flight");
    drop(response);
    crate::support::fake::wait_until(|| gauge() == 0, "the gauge returns to zero").await;
    // Refused requests do not leak either.
    let reply = post_mcp(&sidecar.mcp_url(), &json!({"jsonrpc": "1.0"})).await;
    assert_eq!(reply.status, 400);
    assert_eq!(gauge(), 0);
    sidecar.stop().await;
}

/// The review's attack: four concurrent 4 MiB bodies of zeros to a slow tool took the
/// sidecar from 7 MB to 866 MB. Now each is refused after 100,000 values, and bodies that
/// are admitted keep only their binding while the upstream works. Also: a 3 MB `method`
/// costs the log a few hundred bytes, not 4 MB.
#[tokio::test(flavor = "multi_thread")]
async fn amplification_attacks_stay_small_in_memory_and_in_the_log() {
    let slow =
        || Reply::json(complete(json!(5), "ok").to_string()).delayed(Duration::from_millis(1500));
    let fake = FakeUpstream::always(slow).await;
    let process = Process::start(&["--upstream", &fake.base_url()], &[]);
    let url = format!("http://{}/mcp", process.addr);
    let headers = mcp_headers("tools/call", Some("provision"));
    let before = process.peak_rss_mib();
    let started = Instant::now();
    let attack = zeros(4 << 20);
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (url, headers, body) = (url.clone(), headers.clone(), attack.clone());
        tasks.push(tokio::spawn(async move {
            send(Method::POST, &url, &headers, body, T).await.status
        }));
    }
    // And 32 admitted bodies just under the cap, waiting on the slow tool together: their
    // parsed form (~10 MB each) must be gone before the upstream is awaited.
    let admitted = zeros(190_000);
    for _ in 0..32 {
        let (url, headers, body) = (url.clone(), headers.clone(), admitted.clone());
        tasks.push(tokio::spawn(async move {
            send(Method::POST, &url, &headers, body, T).await.status
        }));
    }
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(task.await.unwrap().as_u16());
    }
    assert_eq!(statuses[..4], [413; 4]);
    assert_eq!(statuses[4..], [200; 32]);
    let peak = process.peak_rss_mib();
    eprintln!(
        "peak RSS {peak} MiB (at start {before} MiB) after 4 × 4 MiB zeros + 32 admitted, {:?}",
        started.elapsed()
    );
    assert!(peak < 150, "peak RSS {peak} MiB");

    // Log amplification: a 3 MB method on a request whose state is refused (logged with
    // its method) and on one whose body is refused.
    let logged_before = process.log_len();
    let method = "m".repeat(3 << 20);
    for body in [
        json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"requestState": "v1.x"}}),
        json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": [1]}),
    ] {
        let reply = send(
            Method::POST,
            &url,
            &mcp_headers("x", None)[..2],
            serde_json::to_vec(&body).unwrap(),
            T,
        )
        .await;
        assert_eq!(reply.status, 400, "{}", reply.text());
    }
    std::thread::sleep(Duration::from_millis(300));
    let grew = process.log_len() - logged_before;
    assert!(grew < 4096, "two refusals added {grew} bytes of log");
}

/// Each SSE stream's incomplete event is held against `limits.max_buffered_bytes` while
/// it waits for its blank line: a stream that would pass the budget ends with an internal
/// error (counted as `over_budget`), the others go on, and every byte is given back.
#[tokio::test(flavor = "multi_thread")]
async fn incomplete_sse_events_share_the_memory_budget() {
    let fake = FakeUpstream::start(|request| {
        let mut big = input_required(json!(7), json!(plaintext()));
        big["result"]["inputRequests"]["region"]["params"]["message"] = json!("x".repeat(2500));
        let text = event("\r\n", &big);
        let (head, end) = text.split_at(text.len() - 4);
        let mut steps = vec![
            Step::Data(first_progress().into()),
            Step::Data(Bytes::copy_from_slice(head.as_bytes())),
        ];
        if case_of(request) == "slow" {
            steps.push(Step::Sleep(Duration::from_secs(2)));
        }
        steps.push(Step::Data(Bytes::copy_from_slice(end.as_bytes())));
        Reply::sse(steps)
    })
    .await;
    // Room for one incomplete event (about 2.7 KB), not for two.
    let sidecar = sidecar_with(&fake, |c| {
        c.limits.max_body_bytes = 4096;
        c.limits.max_buffered_bytes = 4096;
    })
    .await;
    let metrics = sidecar.metrics();
    let slow = call_case(&sidecar, "slow", 7);
    let second = async {
        let holding = || metrics.path.buffered_bytes().get() > 2500;
        wait_until(holding, "the slow stream holds its incomplete event").await;
        call_case(&sidecar, "fast", 8).await
    };
    let (slow, second) = tokio::join!(slow, second);

    assert_internal_error(&second.body, 8, "an event past the budget");
    assert!(second.body.starts_with(first_progress().as_bytes()));
    assert_eq!(metrics.path.seal_failure_count(SealFailure::OverBudget), 1);
    // The stream holding its share was not disturbed: its state arrives sealed.
    assert!(slow.body.starts_with(first_progress().as_bytes()));
    token(&last_data(&slow.body)["result"]);
    assert_eq!(metrics.path.sealed_count(), 1);
    wait_until(
        || metrics.path.buffered_bytes().get() == 0,
        "every buffered byte is given back",
    )
    .await;
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_json_body_that_stalls_after_its_head_times_out() {
    // Head and half a body, then nothing: the JSON is read whole before sealing, so the
    // read is bounded by the same timeout as the head.
    let fake = FakeUpstream::always(|| {
        Reply::new(
            200,
            FakeBody::steps(vec![
                Step::Data(Bytes::from_static(b"{\"jsonrpc\":\"2.0\",\"id\":1,")),
                Step::Sleep(Duration::from_secs(30)),
            ]),
        )
        .header("content-type", "application/json")
    })
    .await;
    let mut config = sidecar::config(&fake.base_url());
    config.timeouts.response_head_ms = 400;
    let sidecar = Sidecar::start(config).await;
    let started = Instant::now();
    let reply = post_mcp(&sidecar.mcp_url(), &tools_call(1, None)).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(reply.status, 504, "{}", reply.text());
    assert_eq!(reply.json()["id"], 1);
    assert_eq!(
        sidecar
            .metrics()
            .refusals
            .refused_count(ErrorKind::UpstreamTimeout),
        1
    );
    sidecar.stop().await;
}

/// Third review, finding 2 (the HTTP path): a request body's reservation ended when
/// hyper had taken its last frame, so an upstream that accepts connections and never
/// reads held every byte of every call outside the budget (60 calls of 4 MiB took the
/// sidecar to 301 MiB with a 64 MiB budget, none refused). A body now stays reserved
/// until the upstream answers: past the budget the next call is refused at once with
/// 503 and `Retry-After`, and the budget comes back when the stalled calls end.
#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_that_never_reads_holds_its_bodies_inside_the_budget() {
    // Accepts every connection and never reads from it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut sockets = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            sockets.push(socket);
        }
    });
    let mut c = config(&format!("http://{upstream}"));
    c.limits.max_body_bytes = 512 * 1024;
    c.limits.max_buffered_bytes = 1024 * 1024;
    c.timeouts.response_head_ms = 3_000;
    let sidecar = Sidecar::start(c).await;
    let budget = || sidecar.metrics().path.buffered_bytes().get();
    let pad = "x".repeat(300 * 1024);
    let body = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "provision", "arguments": {"pad": pad}}}))
    .unwrap();
    let headers = mcp_headers("tools/call", Some("provision"));
    // Three bodies fit the budget and are forwarded to an upstream that never reads them.
    let mut stalled = Vec::new();
    for _ in 0..3 {
        let (url, headers, body) = (sidecar.mcp_url(), headers.clone(), body.clone());
        stalled.push(tokio::spawn(async move {
            send(Method::POST, &url, &headers, body, T).await
        }));
    }
    wait_until(|| budget() >= 3 * 300 * 1024, "three bodies held").await;
    // Give hyper time to hand every byte to the sockets (what used to end the
    // reservation): the budget still holds them.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(budget() >= 3 * 300 * 1024, "released early: {}", budget());
    assert!(budget() <= 1024 * 1024);
    let started = Instant::now();
    let refused = send(Method::POST, &sidecar.mcp_url(), &headers, body.clone(), T).await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert!(refused.headers.contains_key("retry-after"));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused at once, not after the head timeout"
    );
    // The stalled calls end at the head timeout, and the budget is whole again.
    for call in stalled {
        assert_eq!(call.await.unwrap().status, 504);
    }
    wait_until(|| budget() == 0, "the budget is returned").await;
    held.abort();
    sidecar.stop().await;
}
