//! A TCP relay a test can cut: the fault probe between a gateway and its database. Every
//! connection to the relay's address is relayed to the target until [`Relay::cut`],
//! which closes the relayed connections and refuses new ones (accepted and closed at
//! once), as a database that went down does; [`Relay::restore`] relays again.

use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// See the module docs. The relay stops when dropped.
#[derive(Debug)]
pub struct Relay {
    addr: SocketAddr,
    /// `true` while relaying; every relayed connection watches it.
    up: Arc<watch::Sender<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    /// A relay on 127.0.0.1 to `target`.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let up = Arc::new(watch::Sender::new(true));
        let task = tokio::spawn(accept(listener, target, Arc::clone(&up)));
        Self { addr, up, task }
    }

    /// The address to connect to instead of the target.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Closes every relayed connection and refuses new ones.
    pub fn cut(&self) {
        self.up.send_replace(false);
    }

    /// Relays again.
    pub fn restore(&self) {
        self.up.send_replace(true);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.cut();
        self.task.abort();
    }
}

async fn accept(listener: TcpListener, target: SocketAddr, up: Arc<watch::Sender<bool>>) {
    while let Ok((client, _)) = listener.accept().await {
        if !*up.borrow() {
            drop(client);
            continue;
        }
        let mut watching = up.subscribe();
        tokio::spawn(async move {
            let Ok(mut server) = TcpStream::connect(target).await else {
                return;
            };
            let mut client = client;
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                _ = watching.wait_for(|up| !*up) => {}
            }
        });
    }
}
