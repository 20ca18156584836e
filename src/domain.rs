//! The words a run is described in: what the server answers, how queries
//! travel and what they are made of, how connections open, how a run is
//! sliced. Plain data with their serde names, which are the JSON result's
//! and the child processes' (a contract: never renamed); the flags that
//! choose them are [`crate::cli`]'s, which converts its own value names
//! into these, so a flag's spelling cannot change the schema.
//!
//! The bottom of the module graph beside [`crate::scenario`]: it uses
//! nothing of throng's, and nothing here knows about clap.

use serde::{Deserialize, Serialize};

/// What the reference server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Every byte received is sent back.
    Echo,
    /// Line protocol: `ping<rest>` is answered `pong<rest>`, other lines `error`.
    Pong,
    /// HTTP/1.1: a fixed keep-alive `200 OK` for every request.
    Http,
    /// DNS over TCP (and UDP): one A record for A queries.
    Dns,
    /// Reads and drops everything.
    Discard,
    /// Sends the configured reply for every received chunk that starts with
    /// the configured prefix.
    Fixed,
    /// Sends every client a message each period (`wire::push`), unasked.
    Push,
    /// WebSocket (RFC 6455, `wire::ws`): the upgrade, then every message
    /// sent back as the same type.
    Websocket,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Echo => "echo",
            Mode::Pong => "pong",
            Mode::Http => "http",
            Mode::Dns => "dns",
            Mode::Discard => "discard",
            Mode::Fixed => "fixed",
            Mode::Push => "push",
            Mode::Websocket => "websocket",
        }
    }
}

/// What a push server's TCP clients get its messages over.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum PushOver {
    /// The bare stream: throng's push messages back to back.
    #[default]
    Tcp,
    /// WebSocket: the upgrade, then one text message per push.
    Websocket,
}

impl PushOver {
    pub fn name(self) -> &'static str {
        match self {
            PushOver::Tcp => "tcp",
            PushOver::Websocket => "websocket",
        }
    }
}

/// How connections are opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ConnectMode {
    /// Up to `max_inflight_connects` non-blocking connects at once.
    Async,
    /// One connection at a time, each completed before the next starts.
    Sync,
}

/// How queries travel.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// Persistent TCP connections.
    #[default]
    Tcp,
    /// One connected UDP socket per "connection"; a lost datagram times out.
    Udp,
    /// A new TCP connection for every query.
    TcpPerQuery,
    /// TLS over persistent TCP connections (rustls).
    Tls,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
            Transport::TcpPerQuery => "tcp-per-query",
            Transport::Tls => "tls",
        }
    }
}

/// What queries are made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// DNS: a query for a name and type, matched by ID.
    Dns,
    /// Fixed-size messages (magic, sequence, timestamp, pattern), echoed back.
    Echo,
    /// `ping <seq>` lines answered `pong <seq>`.
    Ping,
    /// HTTP/1.1 requests, responses framed by length or chunks.
    Http,
    /// A given message; each marker in the reply completes the oldest query.
    Raw,
    /// Nothing sent: the server's pushed messages are measured.
    Push,
    /// WebSocket (RFC 6455): the upgrade, then messages echoed back, matched
    /// in order.
    Websocket,
    /// Redis (RESP2): commands, replies framed by type, matched in order.
    Redis,
}

/// How --proto push reads the server's messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PushFormat {
    /// throng server's (`wire::push`): sequence number and send times.
    Throng,
    /// One message per line, its sequence number in decimal at its start.
    Line,
}

/// How open-loop queries are spread over connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Spread {
    Random,
    RoundRobin,
}

/// Inter-arrival times of the open-loop query stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Arrivals {
    /// Exponential gaps (a Poisson process), seeded.
    Poisson,
    /// Equal gaps.
    Constant,
}

/// How many processes a side uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum Processes {
    /// As many as the fd limit requires.
    Auto,
    Count(u64),
}

/// A slice `K/N` of a scenario (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Segment {
    pub index: u64,
    pub count: u64,
}

/// Which run a result is of: shared by every slice of the run, so that
/// `throng merge` can refuse a slice of another run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunId {
    pub id: String,
    pub from: RunIdFrom,
}

/// How a run id was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RunIdFrom {
    /// `--run-id`: the user's, or the one `throng cluster` gave its hosts.
    Flag,
    /// Made at random by the command that runs every slice (one process,
    /// or the parent of `--processes`).
    Generated,
    /// From `--start-at` and the scenario: slices started by hand at one
    /// agreed instant agree on it.
    StartAt,
    /// From the scenario alone (a `--segment` without `--start-at` or
    /// `--run-id`): two runs of one scenario share it.
    Scenario,
}

impl RunId {
    /// A new id: the Unix second and 32 random bits, so ids sort by time.
    pub fn generated() -> RunId {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        RunId {
            id: format!("{now}-{:08x}", rand::random::<u32>()),
            from: RunIdFrom::Generated,
        }
    }
}

impl RunIdFrom {
    /// The word the result file holds.
    pub fn word(self) -> &'static str {
        match self {
            RunIdFrom::Flag => "flag",
            RunIdFrom::Generated => "generated",
            RunIdFrom::StartAt => "start-at",
            RunIdFrom::Scenario => "scenario",
        }
    }
}

/// FNV-1a, 64 bits: a digest of a scenario that every build and host
/// computes alike (std's hashers promise no stability).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Which side of a test a host plays (`throng tune`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Client,
    Server,
    Both,
}

impl Role {
    /// This host runs the client.
    pub fn client(self) -> bool {
        matches!(self, Role::Client | Role::Both)
    }

    /// This host runs the server.
    pub fn server(self) -> bool {
        matches!(self, Role::Server | Role::Both)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names in the JSON result and in a child's plan: a contract.
    #[test]
    fn serde_names_are_the_schema() {
        let name = |v: serde_json::Value| v.as_str().unwrap_or_default().to_string();
        assert_eq!(
            name(serde_json::json!(Transport::TcpPerQuery)),
            "tcp-per-query"
        );
        assert_eq!(name(serde_json::json!(Transport::Tls)), "tls");
        assert_eq!(name(serde_json::json!(Spread::RoundRobin)), "round-robin");
        assert_eq!(name(serde_json::json!(Arrivals::Poisson)), "poisson");
        assert_eq!(name(serde_json::json!(ConnectMode::Async)), "async");
        assert_eq!(name(serde_json::json!(Proto::Dns)), "dns");
        assert_eq!(name(serde_json::json!(Mode::Discard)), "discard");
        assert_eq!(name(serde_json::json!(Role::Both)), "both");
        assert_eq!(
            serde_json::json!(Processes::Count(2)),
            serde_json::json!({"Count": 2})
        );
        assert_eq!(
            serde_json::json!(Segment { index: 1, count: 2 }),
            serde_json::json!({"index": 1, "count": 2})
        );
    }
}
