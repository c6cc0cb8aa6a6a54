//! A loopback TCP proxy that holds each chunk it passes on for a delay set at run time:
//! a slow or hanging store in front of a real one (durable_cold_s3.rs puts it before
//! s3s-fs).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A loopback TCP proxy in front of `upstream`: each chunk read, either way, is held
/// `delay_ms` before it is passed on. `held` counts the chunks being held now.
pub struct SlowProxy {
    port: u16,
    delay_ms: Arc<AtomicU64>,
    held: Arc<AtomicU64>,
}

impl SlowProxy {
    pub async fn start(upstream: u16) -> SlowProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let delay_ms = Arc::new(AtomicU64::new(0));
        let held = Arc::new(AtomicU64::new(0));
        let (delay, count) = (delay_ms.clone(), held.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                else {
                    continue;
                };
                let (client_r, client_w) = client.into_split();
                let (server_r, server_w) = server.into_split();
                tokio::spawn(pipe(client_r, server_w, delay.clone(), count.clone()));
                tokio::spawn(pipe(server_r, client_w, delay.clone(), count.clone()));
            }
        });
        SlowProxy {
            port,
            delay_ms,
            held,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn set_delay(&self, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    pub fn held(&self) -> u64 {
        self.held.load(Ordering::SeqCst)
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay_ms: Arc<AtomicU64>,
    held: Arc<AtomicU64>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        held.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(delay_ms.load(Ordering::SeqCst))).await;
        held.fetch_sub(1, Ordering::SeqCst);
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
