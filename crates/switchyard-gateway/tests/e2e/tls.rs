//! The gateway's own HTTP/1.1 upstream client over TLS (issue 29): an upstream behind
//! TLS whose certificate a private CA signed is called, and its connection kept, when
//! the gateway trusts that CA (`SWITCHYARD_UPSTREAM_CA_FILE`); a certificate no trusted
//! CA signed is refused and nothing reaches the upstream. The TLS side is a relay in
//! front of the mock provider, with the test certificates of `tests/fixtures/tls`.
//!
//! The trusted CAs are the process's (one gateway per process in production), so every
//! gateway of these tests trusts the test CA: the refusal is shown with a self-signed
//! certificate.

use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use switchyard_test_support::*;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::TlsAcceptor;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");

/// A TLS endpoint for `localhost` that relays every connection to the mock.
struct TlsRelay {
    url: String,
    /// TLS handshakes completed.
    handshakes: Arc<AtomicUsize>,
}

impl TlsRelay {
    /// Listens on a port of its own, in front of `mock` (`http://127.0.0.1:port`), with
    /// the certificate `name` of the fixtures.
    fn start(mock: &str, name: &str) -> Self {
        let certs = CertificateDer::pem_file_iter(format!("{FIXTURES}/{name}.pem"))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(format!("{FIXTURES}/{name}.key")).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let listener = TcpListener::from_std(listener).unwrap();
        let upstream = mock.trim_start_matches("http://").to_owned();
        let handshakes = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&handshakes);
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, upstream, counted) =
                    (acceptor.clone(), upstream.clone(), Arc::clone(&counted));
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    counted.fetch_add(1, Ordering::SeqCst);
                    let mut plain = TcpStream::connect(&upstream).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
        Self {
            url: format!("https://localhost:{port}"),
            handshakes,
        }
    }
}

/// A harness trusting the test CA, whose standard providers are reached through a TLS
/// relay with the certificate `name`.
async fn behind_tls(name: &str) -> (Harness, TlsRelay) {
    let relay = Mutex::new(None);
    let ca = format!("{FIXTURES}/ca.pem");
    let h = Harness::start_with(
        |mock| {
            let r = TlsRelay::start(mock, name);
            let config = Config::standard(&r.url);
            *relay.lock().unwrap() = Some(r);
            config
        },
        &[("SWITCHYARD_UPSTREAM_CA_FILE", &ca)],
    )
    .await;
    let relay = relay.into_inner().unwrap().unwrap();
    (h, relay)
}

#[tokio::test]
async fn an_upstream_behind_tls_signed_by_a_trusted_private_ca_is_called_on_one_kept_connection() {
    let (h, relay) = behind_tls("localhost").await;
    for _ in 0..3 {
        let (status, body) =
            status_and_json(h.chat(chat_body("alpha/mock-small", false)).await).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["object"], "chat.completion");
    }
    let streamed = h.chat(chat_body("alpha/mock-small", true)).await;
    assert_eq!(streamed.status(), 200);
    let text = streamed.text().await.unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let (status, _) = status_and_json(h.chat(chat_body("alpha/mock-small", false)).await).await;
    assert_eq!(status, 200);
    let seen = h.mock_requests().await;
    assert_eq!(seen.len(), 5);
    assert!(
        seen.iter().all(|r| r["credential"] == CRED_ALPHA),
        "{seen:?}"
    );
    assert_eq!(relay.handshakes.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_certificate_no_trusted_ca_signed_is_refused() {
    let (h, relay) = behind_tls("self-signed").await;
    let (status, body) = status_and_json(h.chat(chat_body("alpha/mock-small", false)).await).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(
        body["error"]["code"],
        Value::from("upstream_unavailable"),
        "{body}"
    );
    assert_eq!(relay.handshakes.load(Ordering::SeqCst), 0);
    assert!(h.mock_requests().await.is_empty());
}
