//! Row D: the floor of the sidecar's own stack. A reverse proxy built from the same parts
//! and settings as mcp-state-guard (a multi-thread tokio runtime, hyper-util's `auto`
//! server, hyper-util's pooled legacy client with a TCP connector, jemalloc: the
//! harness's allocator, `main.rs`) that only forwards:
//! no parsing, no crypto, no headers changed, bodies streamed both ways. What it costs
//! per request is what any hyper-based proxy costs on this machine before it does
//! anything; the sidecar cannot be faster than this row.

use http::Uri;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use std::convert::Infallible;
use tokio::net::TcpListener;

/// Serve on 127.0.0.1:`port` in front of 127.0.0.1:`upstream` until killed, or until
/// SIGTERM, on which it returns (as the sidecar exits on it: an instrumented build
/// writes its profile only on a normal exit, `train.rs`).
pub fn run(port: u16, upstream: u16) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async move {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("the proxy port is free");
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client: Client<_, Incoming> = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .build(connector);
        let mut server = auto::Builder::new(TokioExecutor::new());
        server.http1().timer(TokioTimer::new());
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("a SIGTERM handler");
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = terminate.recv() => return,
            };
            let Ok((stream, _)) = accepted else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let (client, server) = (client.clone(), server.clone());
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<Incoming>| {
                    let client = client.clone();
                    async move { Ok::<_, Infallible>(forward(&client, request, upstream).await) }
                });
                let _ = server.serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
}

async fn forward(
    client: &Client<HttpConnector, Incoming>,
    request: Request<Incoming>,
    upstream: u16,
) -> Response<http_body_util::Either<Incoming, http_body_util::Empty<bytes::Bytes>>> {
    use http_body_util::Either;
    let (mut parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    parts.uri =
        Uri::try_from(format!("http://127.0.0.1:{upstream}{path}")).expect("a valid upstream URI");
    match client.request(Request::from_parts(parts, body)).await {
        Ok(response) => response.map(Either::Left),
        Err(_) => Response::builder()
            .status(502)
            .body(Either::Right(http_body_util::Empty::new()))
            .expect("a valid response"),
    }
}
