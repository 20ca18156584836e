//! The transport, decided once at start (wrk's `struct sock`): plain TCP,
//! TLS over TCP, or UDP. It makes each connection's socket and starts its
//! connect, turns TCP into a TLS session once it is up, and knows how
//! datagrams are batched; a connection's [`Link`] then reads, queues and
//! flushes by the kind it was made as. (tcp-per-query is TCP paced one
//! query per connection: the traffic's business, see `mode::PerQuery`.)

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::{TcpStream, UdpSocket};
use socket2::Socket;

pub(super) mod link;
mod socket;

use crate::domain::Transport;
use crate::scenario::Scenario;
use link::Link;

/// The client's TLS settings, shared by the workers.
pub struct TlsClient {
    pub config: Arc<rustls::ClientConfig>,
    /// The server name of each target.
    pub names: Vec<rustls::pki_types::ServerName<'static>>,
}

pub(super) enum ClientTransport {
    Tcp,
    Tls(Arc<TlsClient>),
    /// `slot`: bytes per datagram in a recvmmsg batch.
    Udp {
        slot: usize,
    },
}

/// A connection's socket, made and its connect started.
pub(super) struct Dialed {
    pub link: Result<Link, i32>,
    /// Just before connect().
    pub at: Instant,
    /// TCP: how long connect() took (the kernel's port search is inside).
    pub call: Option<Duration>,
}

impl ClientTransport {
    pub fn new(sc: &Scenario, tls: Option<Arc<TlsClient>>) -> ClientTransport {
        match (sc.transport, tls) {
            (Transport::Udp, _) => ClientTransport::Udp {
                slot: datagram_slot(sc),
            },
            (_, Some(tls)) => ClientTransport::Tls(tls),
            (_, None) => ClientTransport::Tcp,
        }
    }

    #[inline]
    pub fn is_udp(&self) -> bool {
        matches!(self, ClientTransport::Udp { .. })
    }

    #[inline]
    pub fn is_tls(&self) -> bool {
        matches!(self, ClientTransport::Tls(_))
    }

    /// Bytes per datagram slot in a recvmmsg batch (2048 for streams,
    /// which read none).
    #[inline]
    pub fn slot(&self) -> usize {
        match self {
            ClientTransport::Udp { slot } => *slot,
            _ => 2048,
        }
    }

    /// The worker's read buffer: eight datagram slots when they are
    /// large, else 64 KiB.
    pub fn scratch_len(&self) -> usize {
        match self {
            ClientTransport::Udp { slot } if *slot > 2048 => 8 * slot,
            _ => 64 * 1024,
        }
    }

    /// A socket made and bound before the start (--preallocate).
    pub fn prepare(&self, target: SocketAddr, source: Option<IpAddr>) -> Result<Socket, i32> {
        if self.is_udp() {
            socket::udp(target, source)
        } else {
            socket::prepare(target, source)
        }
    }

    /// Makes a connection's socket (or takes `made`, one made before the
    /// start) and starts its connect to `target`. UDP's is connected
    /// at once: "connected" is only its peer address.
    pub fn connect(
        &self,
        target: SocketAddr,
        source: Option<IpAddr>,
        made: Option<Socket>,
    ) -> Dialed {
        let udp = self.is_udp();
        let sock = match made {
            Some(s) => Ok(s),
            None if udp => socket::udp(target, source),
            None => socket::prepare(target, source),
        };
        // Connect time counts from just before connect(), not from when
        // the attempt was due (the schedule's lag is the ramp's business).
        let at = Instant::now();
        if udp {
            let link = sock.map(|s| Link::Udp(UdpSocket::from_std(s.into())));
            return Dialed {
                link,
                at,
                call: None,
            };
        }
        let r = sock.and_then(|s| socket::start(&s, target).map(|()| s));
        Dialed {
            link: r.map(|s| Link::Tcp(TcpStream::from_std(s.into()))),
            at,
            call: Some(at.elapsed()),
        }
    }

    /// TCP is up: over TLS, its link carries a session from now on (to
    /// the server name of target `target`). None when the transport is not
    /// TLS; the session's error when it cannot be made.
    pub fn secure(&self, link: &mut Link, target: u32) -> Option<Result<(), rustls::Error>> {
        let ClientTransport::Tls(tls) = self else {
            return None;
        };
        let name = tls.names[target as usize % tls.names.len()].clone();
        Some(
            rustls::ClientConnection::new(tls.config.clone(), name).map(|mut c| {
                // Queries are bounded by --window and sealed every turn; a
                // limit here would drop them silently.
                c.set_buffer_limit(None);
                link.start_tls(c);
            }),
        )
    }
}

/// Bytes per datagram slot in a recvmmsg batch: room for the largest
/// answer the run's query can bring.
fn datagram_slot(sc: &Scenario) -> usize {
    let q = sc.traffic.as_ref().map(|t| &t.query);
    super::proto::datagram_slot(q, sc.push.is_some())
}
