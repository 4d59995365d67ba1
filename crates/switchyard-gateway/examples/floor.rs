//! The benchmark's yardstick for the HTTP stack itself: the smallest reverse proxy that
//! can be built from the crates the gateway is built on (axum on hyper, hyper-util's
//! pooled client, a single-threaded tokio runtime), with no pipeline at all. It forwards
//! `POST /v1/chat/completions` with the client's headers and returns the upstream's
//! answer. `bench/run.sh` and `bench/instructions.sh` measure it beside nginx and the
//! gateway, so the gateway's own cost is visible as the distance from this floor.
//!
//!   cargo run --release -p switchyard-gateway --example floor -- 127.0.0.1:19194 http://127.0.0.1:19190

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::sync::Arc;

#[derive(Debug, Clone)]
struct Upstream {
    client: Client<HttpConnector, Full<Bytes>>,
    url: Arc<str>,
}

async fn proxy(State(up): State<Upstream>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let mut forward = http::Request::post(&*up.url);
    for (name, value) in &parts.headers {
        if name != header::HOST {
            forward = forward.header(name, value);
        }
    }
    let Ok(forward) = forward.body(Full::new(body)) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let Ok(answer) = up.client.request(forward).await else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    let (parts, body) = answer.into_parts();
    match body.collect().await {
        Ok(b) => Response::from_parts(parts, Body::from(b.to_bytes())),
        Err(_) => StatusCode::BAD_GATEWAY.into_response(),
    }
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let listen = args.next().unwrap_or_else(|| "127.0.0.1:19194".to_owned());
    let base = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:19190".to_owned());
    let upstream = Upstream {
        client: Client::builder(TokioExecutor::new()).build_http(),
        url: format!("{base}/v1/chat/completions").into(),
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let app = axum::Router::new()
                .route("/v1/chat/completions", axum::routing::post(proxy))
                .with_state(upstream);
            let listener = tokio::net::TcpListener::bind(&listen).await?;
            axum::serve(listener, app).await
        })
}
