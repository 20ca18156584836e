//! A run's verdict as a value: whether it passed, whose side failed, and
//! the causes named from its counts and evidence, each with the figures it
//! rests on. Computed once (report::judge) where the figures are; the
//! summary renders its hint lines from it, and `limit`, `cluster` and
//! `report` read it. No decision reads a cause's sentence: the codes are
//! the contract (docs/result.md lists them).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Whose doing a cause, or a failed run, is.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// Nobody's: a passing run, or a cause that only informs.
    None,
    /// The server (its process, its limits, its answers).
    Server,
    /// The load generator (its ports, fds, CPU, lateness, its flags).
    Client,
    /// What is between them, or the host's shared tables (routes,
    /// firewalls, connection tracking, TCP memory).
    Network,
    /// The evidence puts it on both (client and server on the same cores).
    Both,
}

impl Side {
    /// Its name in the result (the serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            Side::None => "none",
            Side::Server => "server",
            Side::Client => "client",
            Side::Network => "network",
            Side::Both => "both",
        }
    }
}

/// A cause's code: the public contract of a verdict (docs/result.md).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Code {
    /// The server's process held all the fds its limit allows.
    FdLimit,
    /// The accept queue overflowed or held connections never taken.
    AcceptQueueFull,
    /// The server held a fixed number of connections and left the rest
    /// queued, unanswered.
    SlotsFull,
    /// Connection refused: nothing listening (ECONNREFUSED), or the server
    /// accepted, wrote an error and closed.
    Refused,
    /// The server refused every connection from some source addresses and
    /// served those from others: an access rule (Redis's protected mode,
    /// an allow list), not a cap.
    SourceRefused,
    /// Answers that said failure (HTTP 5xx/4xx, DNS SERVFAIL/REFUSED, an
    /// error reply, a mismatch).
    ErrorAnswers,
    /// DNS response rate limiting: answers truncated or dropped.
    RateLimited,
    /// The server closed connections at a steady time after their last
    /// answer.
    IdleTimeout,
    /// The server closed connections it had taken (a cap of its own).
    ClosedByServer,
    /// The server reset established connections.
    Reset,
    /// connect() succeeded, the first data got a reset: an accept queue
    /// that overflowed, on the wire.
    HalfOpen,
    /// SYNs went unanswered (or were retransmitted after the kernel's 1 s
    /// timeout).
    SynDropped,
    /// Connections or queries the server never answered.
    Unanswered,
    /// Queries it answered late or not at all: it did not keep up.
    NotKeepingUp,
    /// The server was busy on every core it can use.
    ServerCpu,
    /// Its replies wait in Nagle's algorithm for a delayed ACK.
    Nagle,
    /// Queries waited for the server (windows, sockets full).
    ServerPace,
    /// The kernel dropped datagrams at the server's full socket buffer.
    UdpDrops,
    /// The TLS handshake or session failed.
    Tls,
    /// The server speaks another protocol than the client was asked to.
    ProtocolMismatch,
    /// No datagram came back over UDP.
    UdpSilent,
    /// No route to the target.
    Unreachable,
    /// Connection tracking dropped connections (its table full).
    ConntrackFull,
    /// TCP memory pressure on this host.
    TcpMemory,
    /// The client ran out of ephemeral ports, or searched long for one.
    Ports,
    /// The client ran out of fds.
    ClientFds,
    /// connect() failed with another errno (a local firewall, a route).
    ConnectError,
    /// The client sent late: its own delay is in the figures.
    ClientLate,
    /// The client's cores were full.
    ClientCpu,
    /// The client read datagrams too slowly: drops at its own sockets.
    ClientDrops,
    /// Client and server share cores and kept them busy.
    SharedCores,
    /// The embedded server runs in the client's process.
    EmbeddedServer,
    /// The server's latency tail is well above the client's lateness.
    ServerLatency,
    /// Push: the server did not keep its period (messages missing, or
    /// their jitter high).
    PushPeriod,
}

impl Code {
    /// Every code (docs/result.md lists each).
    pub const ALL: [Code; 34] = [
        Code::FdLimit,
        Code::AcceptQueueFull,
        Code::SlotsFull,
        Code::Refused,
        Code::SourceRefused,
        Code::ErrorAnswers,
        Code::RateLimited,
        Code::IdleTimeout,
        Code::ClosedByServer,
        Code::Reset,
        Code::HalfOpen,
        Code::SynDropped,
        Code::Unanswered,
        Code::NotKeepingUp,
        Code::ServerCpu,
        Code::Nagle,
        Code::ServerPace,
        Code::UdpDrops,
        Code::Tls,
        Code::ProtocolMismatch,
        Code::UdpSilent,
        Code::Unreachable,
        Code::ConntrackFull,
        Code::TcpMemory,
        Code::Ports,
        Code::ClientFds,
        Code::ConnectError,
        Code::ClientLate,
        Code::ClientCpu,
        Code::ClientDrops,
        Code::SharedCores,
        Code::EmbeddedServer,
        Code::ServerLatency,
        Code::PushPeriod,
    ];

    /// Its name in the result (the serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            Code::FdLimit => "fd_limit",
            Code::AcceptQueueFull => "accept_queue_full",
            Code::SlotsFull => "slots_full",
            Code::Refused => "refused",
            Code::SourceRefused => "source_refused",
            Code::ErrorAnswers => "error_answers",
            Code::RateLimited => "rate_limited",
            Code::IdleTimeout => "idle_timeout",
            Code::ClosedByServer => "closed_by_server",
            Code::Reset => "reset",
            Code::HalfOpen => "half_open",
            Code::SynDropped => "syn_dropped",
            Code::Unanswered => "unanswered",
            Code::NotKeepingUp => "not_keeping_up",
            Code::ServerCpu => "server_cpu",
            Code::Nagle => "nagle",
            Code::ServerPace => "server_pace",
            Code::UdpDrops => "udp_drops",
            Code::Tls => "tls",
            Code::ProtocolMismatch => "protocol_mismatch",
            Code::UdpSilent => "udp_silent",
            Code::Unreachable => "unreachable",
            Code::ConntrackFull => "conntrack_full",
            Code::TcpMemory => "tcp_memory",
            Code::Ports => "ports",
            Code::ClientFds => "client_fds",
            Code::ConnectError => "connect_error",
            Code::ClientLate => "client_late",
            Code::ClientCpu => "client_cpu",
            Code::ClientDrops => "client_drops",
            Code::SharedCores => "shared_cores",
            Code::EmbeddedServer => "embedded_server",
            Code::ServerLatency => "server_latency",
            Code::PushPeriod => "push_period",
        }
    }

    /// The side a cause of this code is on, where the code alone says.
    pub fn side(self) -> Side {
        use Code::*;
        match self {
            FdLimit | AcceptQueueFull | SlotsFull | Refused | SourceRefused | ErrorAnswers
            | RateLimited | IdleTimeout | ClosedByServer | Reset | HalfOpen | SynDropped
            | Unanswered | NotKeepingUp | ServerCpu | Nagle | ServerPace | UdpDrops
            | ServerLatency | PushPeriod => Side::Server,
            UdpSilent | Unreachable | ConntrackFull | TcpMemory => Side::Network,
            Ports | ClientFds | ConnectError | ClientLate | ClientCpu | ClientDrops
            | ProtocolMismatch => Side::Client,
            SharedCores | EmbeddedServer => Side::Both,
            Tls => Side::Client,
        }
    }

    /// A cause that says the load generator could not make the load
    /// asked (not a mistake in its flags): a search's step failing for it
    /// found the client's limit, not the server's.
    pub fn is_client_capacity(self) -> bool {
        matches!(
            self,
            Code::Ports | Code::ClientFds | Code::ClientLate | Code::ClientCpu | Code::ClientDrops
        )
    }
}

/// How the summary shows a cause.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// `hint (label): ...`
    #[default]
    Hint,
    /// `warning: ...`
    Warning,
    /// `note: ...` (it informs; it explains no failure).
    Note,
}

/// One cause of a verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Cause {
    pub code: Code,
    pub side: Side,
    /// The summary's label for it (`hint (label): ...`).
    pub label: String,
    #[serde(default)]
    pub level: Level,
    /// The words, rendered from the figures.
    pub sentence: String,
    /// The figures it rests on, by name (counts, µs, %).
    #[serde(default)]
    pub figures: BTreeMap<String, f64>,
}

impl Cause {
    /// A hint of `code` on the code's own side.
    pub fn new(code: Code, label: &str, sentence: impl Into<String>) -> Cause {
        Cause {
            code,
            side: code.side(),
            label: label.into(),
            level: Level::Hint,
            sentence: sentence.into(),
            figures: BTreeMap::new(),
        }
    }

    /// On `side` instead of the code's own.
    pub fn on(mut self, side: Side) -> Cause {
        self.side = side;
        self
    }

    pub fn level(mut self, level: Level) -> Cause {
        self.level = level;
        self
    }

    /// With a figure.
    pub fn with(mut self, name: &str, value: f64) -> Cause {
        self.figures.insert(name.into(), value);
        self
    }

    /// Whether it explains a failure (a note only informs).
    pub fn explains(&self) -> bool {
        self.level != Level::Note && self.side != Side::None
    }
}

/// A run's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Verdict {
    pub pass: bool,
    /// `none` when it passed; else whose side the causes put it on.
    pub side: Side,
    pub causes: Vec<Cause>,
}

impl Verdict {
    /// The verdict of a run that passed or not, with its causes; the side
    /// follows from the causes that explain (not notes).
    pub fn new(pass: bool, causes: Vec<Cause>) -> Verdict {
        Verdict::weighed(pass, causes, |_| true)
    }

    /// As [`Verdict::new`], the side from the causes `bears` says bear on
    /// what failed (a latency cause does not explain refused connections).
    pub fn weighed(pass: bool, causes: Vec<Cause>, bears: impl Fn(&Cause) -> bool) -> Verdict {
        let side = if pass {
            Side::None
        } else {
            side_of(
                causes
                    .iter()
                    .filter(|c| c.explains() && bears(c))
                    .map(|c| c.side),
            )
        };
        Verdict { pass, side, causes }
    }

    /// The first cause with `code`.
    pub fn cause(&self, code: Code) -> Option<&Cause> {
        self.causes.iter().find(|c| c.code == code)
    }

    pub fn has(&self, code: Code) -> bool {
        self.cause(code).is_some()
    }

    /// The causes with the summary's `label`.
    pub fn labelled<'a>(&'a self, label: &'a str) -> impl Iterator<Item = &'a Cause> + 'a {
        self.causes.iter().filter(move |c| c.label == label)
    }

    /// A failure the client's capacity explains and nothing of the
    /// server's or the network's does.
    pub fn client_limited(&self) -> bool {
        !self.pass
            && self.side == Side::Client
            && self
                .causes
                .iter()
                .any(|c| c.explains() && c.code.is_client_capacity())
    }

    /// The first cause that explains the failure on the server's side (or
    /// the network's).
    pub fn server_cause(&self) -> Option<&Cause> {
        self.causes
            .iter()
            .find(|c| c.explains() && matches!(c.side, Side::Server | Side::Network))
    }
}

/// The side of a failure from its causes' sides: the client alone, the
/// server (or network) alone, both when they are mixed; the server's when
/// nothing on the client's side explains it (the client measured on time:
/// what failed is what it measured).
fn side_of(sides: impl Iterator<Item = Side>) -> Side {
    let (mut client, mut server, mut network, mut both) = (false, false, false, false);
    for s in sides {
        match s {
            Side::Client => client = true,
            Side::Server => server = true,
            Side::Network => network = true,
            Side::Both => both = true,
            Side::None => {}
        }
    }
    match (client, server || network || both) {
        _ if both => Side::Both,
        (true, true) => Side::Both,
        (true, false) => Side::Client,
        (false, _) if network && !server => Side::Network,
        _ => Side::Server,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_passing_run_is_nobodys() {
        let v = Verdict::new(true, vec![Cause::new(Code::ClientLate, "lag", "late")]);
        assert_eq!(v.side, Side::None);
    }

    #[test]
    fn the_side_follows_the_causes_that_explain() {
        let late = Cause::new(Code::ClientLate, "lag", "late");
        let cpu = Cause::new(Code::ServerCpu, "server", "busy");
        let note = Cause::new(Code::ServerLatency, "lag", "tail").level(Level::Note);
        assert_eq!(Verdict::new(false, vec![late.clone()]).side, Side::Client);
        assert!(Verdict::new(false, vec![late.clone()]).client_limited());
        assert_eq!(Verdict::new(false, vec![cpu.clone()]).side, Side::Server);
        assert_eq!(
            Verdict::new(false, vec![late.clone(), cpu.clone()]).side,
            Side::Both
        );
        assert!(!Verdict::new(false, vec![late, cpu]).client_limited());
        // Nothing explains it: what the client measured on time failed.
        assert_eq!(Verdict::new(false, vec![note]).side, Side::Server);
        assert_eq!(Verdict::new(false, vec![]).side, Side::Server);
        let udp = Cause::new(Code::UdpSilent, "udp", "silent");
        assert_eq!(Verdict::new(false, vec![udp]).side, Side::Network);
    }

    #[test]
    fn codes_serialize_as_their_names() {
        for c in [
            Code::FdLimit,
            Code::AcceptQueueFull,
            Code::ClientLate,
            Code::ErrorAnswers,
        ] {
            assert_eq!(
                serde_json::to_value(c).unwrap(),
                serde_json::Value::String(c.as_str().into())
            );
        }
    }

    /// The codes are a public contract: docs/result.md lists each, with
    /// the side its code alone says.
    #[test]
    fn every_code_is_documented_with_its_side() {
        let doc = include_str!("../docs/result.md");
        for c in Code::ALL {
            let side = serde_json::to_value(c.side()).unwrap();
            let row = format!("| `{}` | {} |", c.as_str(), side.as_str().unwrap());
            assert!(doc.contains(&row), "docs/result.md lacks {row}");
        }
    }
}
