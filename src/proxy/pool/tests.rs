//! The pool against real connections: a hyper server on a loopback port that counts the
//! connections it accepted and the requests it answered, and raw sockets for an upstream
//! that misbehaves.

use super::*;
use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// How a test upstream answers `/stream`: the body's chunks come from this channel.
type Chunks = Arc<Mutex<Option<mpsc::Receiver<Bytes>>>>;

struct Upstream {
    uri: Uri,
    connections: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
    /// Connections the server saw end.
    closed: Arc<AtomicUsize>,
    chunks: Chunks,
}

/// A keep-alive HTTP/1.1 upstream: `/stream` streams what the test sends, every other
/// path answers `ok`.
async fn upstream() -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(AtomicUsize::new(0));
    let closed = Arc::new(AtomicUsize::new(0));
    let chunks: Chunks = Arc::default();
    let (c, r, d, s) = (
        connections.clone(),
        requests.clone(),
        closed.clone(),
        chunks.clone(),
    );
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            c.fetch_add(1, Ordering::SeqCst);
            let (r, d, s) = (r.clone(), d.clone(), s.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    r.fetch_add(1, Ordering::SeqCst);
                    let s = s.clone();
                    async move {
                        let body = if request.uri().path() == "/stream" {
                            let rx = s.lock().unwrap().take().expect("one stream at a time");
                            let frames = futures_util::stream::unfold(rx, |mut rx| async move {
                                let chunk = rx.recv().await?;
                                Some((Ok::<_, Infallible>(Frame::data(chunk)), rx))
                            });
                            StreamBody::new(frames).boxed()
                        } else {
                            http_body_util::Full::new(Bytes::from_static(b"ok")).boxed()
                        };
                        Ok::<_, Infallible>(Response::new(body))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
                d.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    Upstream {
        uri: format!("http://{address}/").parse().unwrap(),
        connections,
        requests,
        closed,
        chunks,
    }
}

fn pool(target: &Uri, idle_timeout: Duration, max_idle: usize) -> Pool<HttpConnector> {
    let limits = Limits {
        idle_timeout,
        max_idle,
    };
    Pool::new(HttpConnector::new(), target.clone(), limits)
}

fn get(path: &'static str) -> Request<ProxyBody> {
    Request::get(path)
        .body(crate::body::full(Bytes::new()))
        .unwrap()
}

async fn text(response: Response<Incoming>) -> Bytes {
    response.into_body().collect().await.unwrap().to_bytes()
}

/// Wait (bounded) until `done` holds.
async fn eventually(what: &str, done: impl Fn() -> bool) {
    for _ in 0..200 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what}: not within 2 s");
}

#[tokio::test]
async fn an_idle_connection_is_taken_again() {
    let up = upstream().await;
    let pool = pool(&up.uri, Duration::from_secs(30), 4);
    for _ in 0..5 {
        let response = pool.send(get("/")).await.unwrap();
        assert_eq!(text(response).await, "ok");
    }
    assert_eq!(up.connections.load(Ordering::SeqCst), 1);
    assert_eq!(up.requests.load(Ordering::SeqCst), 5);
    assert_eq!(pool.idle_count(), 1);
}

#[tokio::test]
async fn no_connection_is_kept_beyond_the_bound() {
    let up = upstream().await;
    let pool = pool(&up.uri, Duration::from_secs(30), 0);
    for _ in 0..3 {
        text(pool.send(get("/")).await.unwrap()).await;
    }
    assert_eq!(up.connections.load(Ordering::SeqCst), 3);
    assert_eq!(pool.idle_count(), 0);
    eventually("every connection closed", || {
        up.closed.load(Ordering::SeqCst) == 3
    })
    .await;

    // Two answers open at once need two connections; one is kept of the two.
    let pool = super::tests::pool(&up.uri, Duration::from_secs(30), 1);
    let (a, b) = tokio::join!(pool.send(get("/")), pool.send(get("/")));
    let (a, b) = (a.unwrap(), b.unwrap());
    text(a).await;
    text(b).await;
    assert_eq!(up.connections.load(Ordering::SeqCst), 5);
    eventually("one kept", || pool.idle_count() == 1).await;
}

#[tokio::test]
async fn an_idle_connection_is_closed_after_the_timeout() {
    let up = upstream().await;
    let pool = pool(&up.uri, Duration::from_millis(100), 4);
    text(pool.send(get("/")).await.unwrap()).await;
    assert_eq!(pool.idle_count(), 1);
    // The sweep closes it without any request coming.
    eventually("the sweep closed it", || {
        up.closed.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(pool.idle_count(), 0);
    // With nothing left to sweep, the sweep's task ends; the next idle connection
    // starts it again, and it closes that one too.
    let sweeping = || pool.idle.sweeping.load(Ordering::SeqCst);
    eventually("the sweep ended", || !sweeping()).await;
    text(pool.send(get("/")).await.unwrap()).await;
    assert_eq!(up.connections.load(Ordering::SeqCst), 2);
    assert!(sweeping());
    eventually("the second one closed", || {
        up.closed.load(Ordering::SeqCst) == 2
    })
    .await;
    eventually("the sweep ended again", || !sweeping()).await;
}

#[tokio::test]
async fn an_expired_connection_is_never_taken() {
    let up = upstream().await;
    // A sweep that would come long after: the checkout itself refuses the stale one.
    let pool = pool(&up.uri, Duration::from_millis(100), 4);
    text(pool.send(get("/")).await.unwrap()).await;
    let idle = pool.idle.clone();
    idle.stack.lock().unwrap()[0].since -= Duration::from_millis(200);
    text(pool.send(get("/")).await.unwrap()).await;
    assert_eq!(up.connections.load(Ordering::SeqCst), 2);
}

/// A streamed answer keeps its connection until its end; then it goes back.
#[tokio::test]
async fn a_connection_goes_back_when_its_answer_was_read_to_the_end() {
    let up = upstream().await;
    let (tx, rx) = mpsc::channel(4);
    *up.chunks.lock().unwrap() = Some(rx);
    let pool = pool(&up.uri, Duration::from_secs(30), 4);
    let mut stream = pool.send(get("/stream")).await.unwrap().into_body();
    tx.send(Bytes::from_static(b"one")).await.unwrap();
    let first = stream.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, "one");
    assert_eq!(pool.idle_count(), 0, "busy while its answer streams");
    // Meanwhile another request gets a connection of its own.
    text(pool.send(get("/")).await.unwrap()).await;
    assert_eq!(up.connections.load(Ordering::SeqCst), 2);
    drop(tx);
    assert!(stream.frame().await.is_none());
    eventually("both kept", || pool.idle_count() == 2).await;
}

/// An answer dropped before its end closes its connection: it is never put back.
#[tokio::test]
async fn an_abandoned_answer_closes_its_connection() {
    let up = upstream().await;
    let (tx, rx) = mpsc::channel(4);
    *up.chunks.lock().unwrap() = Some(rx);
    let pool = pool(&up.uri, Duration::from_secs(30), 4);
    let mut stream = pool.send(get("/stream")).await.unwrap().into_body();
    tx.send(Bytes::from_static(b"one")).await.unwrap();
    stream.frame().await.unwrap().unwrap();
    drop(stream);
    eventually("the server saw it close", || {
        up.closed.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(pool.idle_count(), 0);
    text(pool.send(get("/")).await.unwrap()).await;
    assert_eq!(up.connections.load(Ordering::SeqCst), 2);
}

/// A raw upstream that reads one request a connection, counts it, writes `answer`
/// (nothing if empty) and closes the connection without saying so.
async fn closing_upstream(answer: &'static [u8]) -> (Uri, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target: Uri = format!("http://{}/", listener.local_addr().unwrap())
        .parse()
        .unwrap();
    let requests = Arc::new(AtomicUsize::new(0));
    let seen = requests.clone();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buffer = vec![0; 4096];
            let n = socket.read(&mut buffer).await.unwrap();
            assert!(buffer[..n].starts_with(b"GET / HTTP/1.1\r\n"));
            seen.fetch_add(1, Ordering::SeqCst);
            socket.write_all(answer).await.unwrap();
            drop(socket);
        }
    });
    (target, requests)
}

/// An upstream that answers once and then closes the connection without saying so:
/// the next request goes on a new connection, and the upstream sees it once.
#[tokio::test]
async fn a_connection_the_upstream_closed_is_not_used() {
    let (target, requests) =
        closing_upstream(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
    let pool = pool(&target, Duration::from_secs(30), 4);
    text(pool.send(get("/")).await.unwrap()).await;
    // However soon the close is noticed, the second request is answered.
    let second = pool.send(get("/")).await.unwrap();
    assert_eq!(text(second).await, "ok");
    assert_eq!(requests.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_refused_connection_is_a_connect_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let target: Uri = format!("http://{}/", listener.local_addr().unwrap())
        .parse()
        .unwrap();
    drop(listener);
    let pool = pool(&target, Duration::from_secs(30), 4);
    let error = pool.send(get("/")).await.unwrap_err();
    assert!(matches!(error, UpstreamError::Connect(_)), "{error:?}");
    let refused = crate::error::ProxyError::UpstreamUnavailable(error);
    assert!(refused.never_sent());
}

/// An upstream that reads the request and closes without an answer: an exchange error,
/// and the request counts as sent (nothing is given back, nothing sent twice).
#[tokio::test]
async fn a_request_lost_after_it_was_written_is_not_sent_again() {
    let (target, requests) = closing_upstream(b"").await;
    let pool = pool(&target, Duration::from_secs(30), 4);
    let error = pool.send(get("/")).await.unwrap_err();
    assert!(matches!(error, UpstreamError::Exchange(_)), "{error:?}");
    let refused = crate::error::ProxyError::UpstreamUnavailable(error);
    assert!(!refused.never_sent());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(requests.load(Ordering::SeqCst), 1);
}
