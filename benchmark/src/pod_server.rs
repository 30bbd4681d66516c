//! A TCP server in a lab namespace, answering the benches' measured connections.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use kubenft::netns::Netns;

/// How a server answers the connections it accepts.
#[derive(Clone, Copy)]
pub enum Answering {
    /// On the accepting thread, one connection after another: for short exchanges.
    InTurn,
    /// Each connection on a thread of its own: for connections that stay open.
    ThreadEach,
}

/// A TCP server on `port` of every address of a namespace, running its answer on each accepted
/// connection until dropped.
pub struct Server {
    stop: Arc<AtomicBool>,
    listener: TcpListener,
}

impl Server {
    pub fn start(
        ns: &Netns,
        port: u16,
        answering: Answering,
        answer: fn(TcpStream),
    ) -> Result<Server, String> {
        let listener = ns
            .run(move || TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)))
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("listening on port {port} in {}: {e}", ns.name()))?;
        let accepting = listener.try_clone().map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        // Blocking accepts: a polling loop would add its sleep to every measured connection.
        std::thread::spawn(move || {
            for s in accepting.incoming() {
                if flag.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(s) = s else { continue };
                match answering {
                    Answering::InTurn => answer(s),
                    Answering::ThreadEach => {
                        std::thread::spawn(move || answer(s));
                    }
                }
            }
        });
        Ok(Server { stop, listener })
    }
}

impl Drop for Server {
    /// Ends the accept loop: flag it, then shut the listening socket down, which wakes the
    /// blocked accept with an error whatever namespace this runs in, or whether the server's
    /// namespace is still there.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // SAFETY: shutdown on a socket this server owns; its descriptor stays valid until the
        // listener is dropped, after this.
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RD) };
    }
}
