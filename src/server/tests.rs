//! What an open connection costs while it lasts.

use super::*;
use crate::registry::Registry;
use prometheus::IntGauge;

/// A loopback connection: the accepted end, its peer's address, and the client's end
/// (kept open while the test runs).
async fn accepted_pair() -> (tokio::net::TcpStream, SocketAddr, tokio::net::TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let client = tokio::net::TcpStream::connect(listener.local_addr().expect("address"));
    let (client, accepted) = tokio::join!(client, listener.accept());
    let (stream, peer) = accepted.expect("accepted");
    (stream, peer, client.expect("connected"))
}

/// A connection's task lives as long as the connection, so every open one (an idle SSE
/// stream is one) pays its size: hyper's connection and the deadline's wait, and what
/// serving needs. Anything laid beside them (a TLS handshake's state kept after it
/// ended, a copy of the builder) is paid by every connection for its whole life: at
/// 75e13de the task grew by 1.5 KB so, and jemalloc's next class made it 1.7 KiB a
/// stream (docs/performance.md, "Issue 34, step by step").
#[tokio::test]
async fn a_connections_task_is_its_connection_and_little_more() {
    let (stream, peer, _client) = accepted_pair().await;
    let (bare_stream, _, _bare_client) = accepted_pair().await;
    let registry = Registry::new();
    let gauge = IntGauge::new("open_connections", "open").expect("gauge");
    let slots = Arc::new(Slots::default());
    let clock = Clock::new(Duration::from_secs(5), Duration::from_secs(5));
    let builder = Arc::new(auto::Builder::new(TokioExecutor::new()));
    let handler =
        |_: Request<Incoming>, _: ConnectionFacts| async { Response::new(body::full("")) };
    let accepted = Accepted {
        stream,
        peer,
        clock: clock.clone(),
        handler,
        name: "test",
        refusals: Arc::new(RefusalMetrics::register(&registry)),
        tls: None,
        builder: builder.clone(),
        held: (
            Arc::new(Semaphore::new(1))
                .try_acquire_owned()
                .expect("a permit"),
            Held::take(&gauge),
            slots.list(peer_key(peer.ip()), clock),
        ),
    };
    let task = accepted.run();
    // The same connection with nothing around it: hyper's own future on the same boxed
    // stream (without the deadline's `Watched` around it) and a service of the same shape.
    let io: Box<dyn Io> = Box::new(bare_stream);
    let bare = builder.serve_connection(
        TokioIo::new(io),
        service_fn(|_: Request<Incoming>| async {
            Ok::<_, Infallible>(Response::new(body::full("")))
        }),
    );
    let (task, bare) = (size_of_val(&task), size_of_val(&bare));
    assert!(
        task <= bare + 1024,
        "a connection's task is {task} bytes, its connection {bare}: {} bytes beside it",
        task - bare
    );
}
