//! The floors served by hyper (F1 with axum in front, F2, F4, F5): they differ in what is
//! in front of the handler and in how the upstream is called.

use crate::raw;
use crate::Upstream;
use bytes::Bytes;
use http::uri::{Authority, Scheme};
use http::{header, HeaderValue, Request, Response, StatusCode, Uri};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1 as client_h1;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::cell::RefCell;
use std::convert::Infallible;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::net::TcpStream;

type Pooled = Client<HttpConnector, Full<Bytes>>;

thread_local! {
    /// This thread's hyper-util client, so its pooled connections' tasks run here.
    static POOLED: Pooled = {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Client::builder(TokioExecutor::new()).build(connector)
    };
}

/// An empty answer with `code`.
fn answer<B>(code: StatusCode) -> Response<Either<B, Full<Bytes>>> {
    let mut r = Response::new(Either::Right(Full::new(Bytes::new())));
    *r.status_mut() = code;
    r
}

/// The client's request, its body read whole, with the upstream's absolute URI (for
/// hyper-util's client, which writes `Host` from it) or its path and an explicit `Host`.
async fn forwarded<B: Body>(
    request: Request<B>,
    up: &Upstream,
    absolute: bool,
) -> Option<Request<Full<Bytes>>> {
    let (mut parts, body) = request.into_parts();
    let body = body.collect().await.ok()?.to_bytes();
    parts.headers.remove(header::CONNECTION);
    if absolute {
        parts.headers.remove(header::HOST);
        let mut uri = std::mem::take(&mut parts.uri).into_parts();
        uri.scheme = Some(Scheme::HTTP);
        uri.authority = Some(
            Authority::from_maybe_shared(Bytes::copy_from_slice(up.authority.as_bytes())).ok()?,
        );
        parts.uri = Uri::from_parts(uri).ok()?;
    } else {
        parts
            .headers
            .insert(header::HOST, HeaderValue::from_str(&up.authority).ok()?);
    }
    parts.version = http::Version::HTTP_11;
    Some(Request::from_parts(parts, Full::new(body)))
}

/// F2's handler: hyper-util's pooled client of this thread.
async fn via_pool(
    request: Request<Incoming>,
    up: Arc<Upstream>,
) -> Result<Response<Either<Incoming, Full<Bytes>>>, Infallible> {
    let Some(request) = forwarded(request, &up, true).await else {
        return Ok(answer(StatusCode::BAD_REQUEST));
    };
    Ok(match POOLED.with(|c| c.request(request)).await {
        Ok(r) => r.map(Either::Left),
        Err(_) => answer(StatusCode::BAD_GATEWAY),
    })
}

/// F1: axum's router in front of F2's handler, on hyper-util's auto server.
pub(crate) async fn serve_axum(stream: TcpStream, up: Arc<Upstream>) {
    let app = axum::Router::new()
        .route(
            "/v1/chat/completions",
            axum::routing::post(
                |axum::extract::State(up): axum::extract::State<Arc<Upstream>>,
                 request: axum::extract::Request| async move {
                    let Some(request) = forwarded(request, &up, true).await else {
                        return axum::response::IntoResponse::into_response(
                            StatusCode::BAD_REQUEST,
                        );
                    };
                    match POOLED.with(|c| c.request(request)).await {
                        Ok(r) => r.map(axum::body::Body::new),
                        Err(_) => {
                            axum::response::IntoResponse::into_response(StatusCode::BAD_GATEWAY)
                        }
                    }
                },
            ),
        )
        .with_state(up);
    let service = hyper_util::service::TowerToHyperService::new(app);
    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

async fn serve_h1<S, B>(stream: TcpStream, service: S)
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>,
    B: Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// F2: hyper's HTTP/1 server, hyper-util's client.
pub(crate) async fn serve_hyper(stream: TcpStream, up: Arc<Upstream>) {
    serve_h1(stream, service_fn(move |r| via_pool(r, Arc::clone(&up)))).await;
}

type Sender = client_h1::SendRequest<Full<Bytes>>;
type Connection = Pin<Box<client_h1::Connection<TokioIo<TcpStream>, Full<Bytes>>>>;

thread_local! {
    /// F4's idle upstream connections of this thread.
    static IDLE: RefCell<Vec<(Sender, Connection)>> = const { RefCell::new(Vec::new()) };
}

/// Polls a connection the request's task drives; `false` once it has ended.
fn drive(conn: &mut Connection, cx: &mut Context<'_>) -> bool {
    conn.as_mut().poll(cx).is_pending()
}

/// An idle connection of this thread's, ready for a request, or a new one.
async fn checkout(up: &Upstream) -> Option<(Sender, Connection)> {
    while let Some((mut sender, mut conn)) = IDLE.with(|idle| idle.borrow_mut().pop()) {
        let ready = poll_fn(|cx| {
            if !drive(&mut conn, cx) {
                return Poll::Ready(false);
            }
            sender.poll_ready(cx).map(|r| r.is_ok())
        })
        .await;
        if ready {
            return Some((sender, conn));
        }
    }
    let stream = TcpStream::connect(up.addr).await.ok()?;
    stream.set_nodelay(true).ok()?;
    let (sender, conn) = client_h1::handshake(TokioIo::new(stream)).await.ok()?;
    Some((sender, Box::pin(conn)))
}

/// F4's answer body: polls the upstream connection before the body it feeds, and puts
/// the connection back at the body's end.
struct Driven {
    body: Incoming,
    lease: Option<(Sender, Connection)>,
}

impl Driven {
    fn release(&mut self) {
        if let Some(lease) = self.lease.take() {
            IDLE.with(|idle| idle.borrow_mut().push(lease));
        }
    }
}

impl Body for Driven {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        if let Some((_, conn)) = this.lease.as_mut() {
            if !drive(conn, cx) {
                this.lease = None;
            }
        }
        let frame = ready!(Pin::new(&mut this.body).poll_frame(cx));
        if frame.is_none() || this.body.is_end_stream() {
            this.release();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }
}

/// F4's handler: the upstream connection driven in this request's task.
async fn in_task(
    request: Request<Incoming>,
    up: Arc<Upstream>,
) -> Result<Response<Either<Driven, Full<Bytes>>>, Infallible> {
    let Some(request) = forwarded(request, &up, false).await else {
        return Ok(answer(StatusCode::BAD_REQUEST));
    };
    let Some((mut sender, mut conn)) = checkout(&up).await else {
        return Ok(answer(StatusCode::BAD_GATEWAY));
    };
    let mut sent = std::pin::pin!(sender.send_request(request));
    let mut alive = true;
    let result = poll_fn(|cx| {
        if alive {
            alive = drive(&mut conn, cx);
        }
        sent.as_mut().poll(cx)
    })
    .await;
    Ok(match result {
        Ok(r) => r.map(|body| {
            Either::Left(Driven {
                body,
                lease: alive.then_some((sender, conn)),
            })
        }),
        Err(_) => answer(StatusCode::BAD_GATEWAY),
    })
}

/// F4: hyper's HTTP/1 server and low-level client, no connection task.
pub(crate) async fn serve_in_task(stream: TcpStream, up: Arc<Upstream>) {
    serve_h1(stream, service_fn(move |r| in_task(r, Arc::clone(&up)))).await;
}

/// F5's handler: the hand-written client.
async fn via_raw(
    request: Request<Incoming>,
    up: Arc<Upstream>,
) -> Result<Response<Either<raw::RawBody, Full<Bytes>>>, Infallible> {
    let (parts, body) = request.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return Ok(answer(StatusCode::BAD_REQUEST));
    };
    let mut out = Vec::with_capacity(1024 + body.len());
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(
        parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .as_bytes(),
    );
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in &parts.headers {
        if !raw::skipped(name.as_str().as_bytes()) {
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
    raw::finish_request(&mut out, &up, &body);
    let Ok(upstream) = raw::send(&up, &out).await else {
        return Ok(answer(StatusCode::BAD_GATEWAY));
    };
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut head = httparse::Response::new(&mut headers);
    if head.parse(&upstream.head).is_err() {
        return Ok(answer(StatusCode::BAD_GATEWAY));
    }
    let mut response = Response::builder().status(head.code.unwrap_or(502));
    for h in head.headers.iter() {
        if !h.name.eq_ignore_ascii_case("connection") && !h.name.eq_ignore_ascii_case("keep-alive")
        {
            response = response.header(h.name, h.value);
        }
    }
    Ok(response
        .body(Either::Left(upstream.body))
        .unwrap_or_else(|_| answer(StatusCode::BAD_GATEWAY)))
}

/// F5: hyper's HTTP/1 server, the hand-written client.
pub(crate) async fn serve_raw_client(stream: TcpStream, up: Arc<Upstream>) {
    serve_h1(stream, service_fn(move |r| via_raw(r, Arc::clone(&up)))).await;
}
