//! A TCP link a test can cut and restore: a forwarder on loopback in front
//! of one port, for example a hub's leafnode listener, so a test severs
//! only that link (the leaf's own clients stay connected to it) instead of
//! stopping a server.
//!
//! [`TcpLink::cut`] closes every connection through it at once and refuses
//! new ones (they are accepted and closed, as a firewall that resets would);
//! [`TcpLink::restore`] lets new connections through again. It runs on its
//! own thread and tokio runtime, and stops on drop.

use std::net::TcpListener;
use std::sync::Arc;

use tokio::sync::{oneshot, watch};

/// A cuttable forwarder from `127.0.0.1:<port>` to `127.0.0.1:<target>`.
pub struct TcpLink {
    port: u16,
    /// `true` while connections may pass.
    up: Arc<watch::Sender<bool>>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TcpLink {
    pub fn start(target: u16) -> TcpLink {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the link's port");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let port = listener.local_addr().expect("the link's address").port();
        let up = Arc::new(watch::Sender::new(true));
        let (stop, stopped) = oneshot::channel();
        let state = up.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the link");
            rt.block_on(forward(listener, target, state, stopped));
        });
        TcpLink {
            port,
            up,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Close every connection through the link and refuse new ones.
    pub fn cut(&self) {
        self.up.send_replace(false);
    }

    /// Let connections through again.
    pub fn restore(&self) {
        self.up.send_replace(true);
    }
}

impl Drop for TcpLink {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn forward(
    listener: TcpListener,
    target: u16,
    up: Arc<watch::Sender<bool>>,
    mut stopped: oneshot::Receiver<()>,
) {
    let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => {
                let Ok((mut client, _)) = accepted else { continue };
                if !*up.borrow() {
                    continue; // dropped: closed at once
                }
                let mut down = up.subscribe();
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = down.wait_for(|up| !*up) => {}
                    }
                });
            }
        }
    }
}
