//! The benchmark's yardsticks for the HTTP stack: the smallest reverse proxies that can be
//! built on tokio, one per way of serving and forwarding a request, with no pipeline at
//! all (issue 29, step 1 of `../shared/research/data-path.md`). Each forwards any request
//! to the upstream with the client's headers minus `Host` and streams the upstream's
//! answer back, so SSE works too. `bench/run.sh`, `bench/instructions.sh` and
//! `bench/diagnose.sh` measure them beside nginx and the gateway, so the gateway's own
//! cost is visible as the distance from each floor, and the choice of data path can be
//! checked again.
//!
//!   cargo run --release -p switchyard-gateway --example floors -- VARIANT LISTEN UPSTREAM [THREADS]
//!   cargo run --release -p switchyard-gateway --example floors -- hyper 127.0.0.1:19194 http://127.0.0.1:19190 2
//!
//! Variants (the research's names in brackets):
//! - `axum` [F1]: axum's router on hyper-util's auto server (HTTP/1 and HTTP/2), hyper-util's
//!   pooled client; the stack the gateway is built on.
//! - `hyper` [F2]: hyper's HTTP/1 server with a plain `service_fn`, hyper-util's pooled client.
//! - `in-task` [F4]: hyper's HTTP/1 server; hyper's low-level HTTP/1 client connections in a
//!   pool of this thread's, each driven by the request that uses it (no connection task).
//! - `raw-client` [F5]: hyper's HTTP/1 server; a hand-written HTTP/1 client ([`raw`]).
//! - `raw` [F6]: a hand-written HTTP/1 server (Content-Length request bodies only) and client:
//!   the lower bound of a proxy on tokio, not a product (no conformance, no timeouts).
//!
//! Every variant runs THREADS threads (default 1), each with its own single-threaded
//! runtime accepting on the same socket, and keeps its upstream connections per thread, as
//! the gateway does: a request never leaves the thread that accepted its connection.

mod hyper_floors;
mod raw;

use std::net::SocketAddr;
use std::sync::Arc;

/// Where requests go: the upstream's address and the `Host` header it is called with.
#[derive(Debug)]
pub struct Upstream {
    pub addr: SocketAddr,
    pub authority: String,
}

impl Upstream {
    fn parse(base: &str) -> Result<Self, String> {
        let authority = base
            .strip_prefix("http://")
            .ok_or_else(|| format!("the upstream must be http://HOST:PORT, not {base}"))?
            .trim_end_matches('/')
            .to_owned();
        let addr = authority
            .parse()
            .map_err(|e| format!("the upstream {authority} is not an IP address and port: {e}"))?;
        Ok(Self { addr, authority })
    }
}

#[derive(Debug, Clone, Copy)]
enum Variant {
    Axum,
    Hyper,
    InTask,
    RawClient,
    Raw,
}

impl Variant {
    fn parse(name: &str) -> Result<Self, String> {
        Ok(match name {
            "axum" => Self::Axum,
            "hyper" => Self::Hyper,
            "in-task" => Self::InTask,
            "raw-client" => Self::RawClient,
            "raw" => Self::Raw,
            other => {
                return Err(format!(
                    "unknown variant {other}: axum, hyper, in-task, raw-client or raw"
                ))
            }
        })
    }
}

/// Serves one accepted connection with `variant`.
async fn serve(variant: Variant, stream: tokio::net::TcpStream, up: Arc<Upstream>) {
    match variant {
        Variant::Axum => hyper_floors::serve_axum(stream, up).await,
        Variant::Hyper => hyper_floors::serve_hyper(stream, up).await,
        Variant::InTask => hyper_floors::serve_in_task(stream, up).await,
        Variant::RawClient => hyper_floors::serve_raw_client(stream, up).await,
        Variant::Raw => raw::serve(stream, up).await,
    }
}

async fn accept_loop(variant: Variant, listener: std::net::TcpListener, up: Arc<Upstream>) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        if stream.set_nodelay(true).is_err() {
            continue;
        }
        tokio::spawn(serve(variant, stream, Arc::clone(&up)));
    }
}

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let variant = Variant::parse(&args.next().unwrap_or_else(|| "axum".to_owned()))?;
    let listen = args.next().unwrap_or_else(|| "127.0.0.1:19194".to_owned());
    let up = Arc::new(Upstream::parse(
        &args
            .next()
            .unwrap_or_else(|| "http://127.0.0.1:19190".to_owned()),
    )?);
    let threads: usize = args
        .next()
        .map_or(Ok(1), |t| t.parse())
        .map_err(|e| format!("THREADS: {e}"))?;
    let listener = std::net::TcpListener::bind(&listen).map_err(|e| format!("{listen}: {e}"))?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let workers = (0..threads.max(1))
        .map(|_| {
            let listener = listener.try_clone().map_err(|e| e.to_string())?;
            let up = Arc::clone(&up);
            std::thread::Builder::new()
                .spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| e.to_string())?;
                    runtime.block_on(accept_loop(variant, listener, up));
                    Ok::<(), String>(())
                })
                .map_err(|e| e.to_string())
        })
        .collect::<Result<Vec<_>, _>>()?;
    for worker in workers {
        worker
            .join()
            .map_err(|_| "a thread panicked".to_owned())??;
    }
    Ok(())
}
