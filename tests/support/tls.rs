//! TLS peers for the tests, all on 127.0.0.1 with free ports and stopped on drop: an
//! HTTPS client (HTTP/1.1 or h2 by ALPN), a TLS terminator in front of a plain fake
//! upstream (an `https://` upstream that records the client certificate it was shown),
//! and a JWKS endpoint whose document can be rotated or taken down.

use super::http::Reply;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// One HTTPS exchange with `config`; `Err` when the handshake or the exchange fails (a
/// server refusing a client certificate in TLS 1.3 is seen on the first read).
pub async fn send(
    config: rustls::ClientConfig,
    h2: bool,
    method: Method,
    url: &str,
    headers: &[(String, String)],
    body: impl Into<Bytes>,
) -> Result<Reply, String> {
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only();
    let connector = if h2 {
        builder.enable_http2().build()
    } else {
        builder.enable_http1().build()
    };
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(h2)
        .build(connector);
    let mut request = Request::builder()
        .method(method)
        .uri(url)
        .body(Full::new(body.into()))
        .unwrap();
    for (name, value) in headers {
        request.headers_mut().append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_bytes(value.as_bytes()).unwrap(),
        );
    }
    let exchange = async {
        let response = client
            .request(request)
            .await
            .map_err(|e| format!("{e:?}"))?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok(Reply {
            status: parts.status,
            version: parts.version,
            headers: parts.headers,
            body,
        })
    };
    tokio::time::timeout(Duration::from_secs(30), exchange)
        .await
        .expect("the exchange finishes in time")
}

/// POST an MCP message over HTTPS with `extra` headers.
pub async fn post_mcp(
    config: rustls::ClientConfig,
    url: &str,
    message: &serde_json::Value,
    extra: &[(&str, &str)],
) -> Result<Reply, String> {
    let method = message["method"].as_str().unwrap_or_default();
    let name = message["params"]["name"].as_str();
    let mut headers = super::http::mcp_headers(method, name);
    headers.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let body = serde_json::to_vec(message).unwrap();
    send(config, false, Method::POST, url, &headers, body).await
}

/// A TLS server in front of a plain address: an `https://` upstream made of a fake one.
pub struct Terminator {
    pub addr: SocketAddr,
    /// The subject of each client certificate presented, `None` for connections without.
    pub clients: Arc<Mutex<Vec<Option<String>>>>,
    task: JoinHandle<()>,
}

impl Terminator {
    pub async fn start(config: rustls::ServerConfig, target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let clients = Arc::new(Mutex::new(Vec::new()));
        let seen = clients.clone();
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, seen) = (acceptor.clone(), seen.clone());
                connections.spawn(async move {
                    let Ok(mut tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let subject = tls.get_ref().1.peer_certificates().and_then(|certs| {
                        let (_, cert) = x509_parser::parse_x509_certificate(&certs[0]).ok()?;
                        Some(cert.subject().to_string())
                    });
                    seen.lock().unwrap().push(subject);
                    let Ok(mut plain) = TcpStream::connect(target).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
        Self {
            addr,
            clients,
            task,
        }
    }
}

impl Drop for Terminator {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An HTTPS endpoint serving a JWKS document; `None` answers 503 (the issuer is down).
pub struct JwksServer {
    pub url: String,
    document: Arc<Mutex<Option<String>>>,
    hits: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl JwksServer {
    pub async fn start(config: rustls::ServerConfig, document: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}/jwks.json", listener.local_addr().unwrap());
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let document = Arc::new(Mutex::new(Some(document.to_owned())));
        let hits = Arc::new(AtomicUsize::new(0));
        let (served, counted) = (document.clone(), hits.clone());
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, served, counted) =
                    (acceptor.clone(), served.clone(), counted.clone());
                connections.spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let service = service_fn(move |_request: Request<Incoming>| {
                        counted.fetch_add(1, Ordering::SeqCst);
                        let body = served.lock().unwrap().clone();
                        let mut response =
                            Response::new(Full::new(Bytes::from(body.clone().unwrap_or_default())));
                        if body.is_none() {
                            *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                        }
                        async move { Ok::<_, Infallible>(response) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Self {
            url,
            document,
            hits,
            task,
        }
    }

    /// Serve `document` from now on; `None`: answer 503.
    pub fn set(&self, document: Option<&str>) {
        *self.document.lock().unwrap() = document.map(str::to_owned);
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for JwksServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
