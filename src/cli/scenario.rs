//! From the client's flags to a [`Scenario`]: the checks that need more
//! than one flag or a file a flag names (query files, messages, schedules).
//! Errors are usage errors (exit code 2) that name the flag and say what to
//! give instead.

use std::net::{IpAddr, SocketAddr};

use super::ClientArgs;
use crate::domain::{ConnectMode, Proto, PushFormat, PushOver, Transport};
use crate::scenario::{
    check_name, parse_phases, parse_query_file, End, Model, Phase, PushListen, Query, Ramp,
    Scenario, TlsOptions, Traffic, WsUpgrade, DEFAULT_CONNECT_RATE, ECHO_HEADER, MAX_DATAGRAM,
    MAX_QTYPES,
};
use crate::usage::UsageError;

/// The longest --slack: beyond it the batch is a pause, not pacing.
const MAX_SLACK: std::time::Duration = std::time::Duration::from_secs(1);

fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

/// A byte string in the escaped form a user types, for JSON.
fn escaped(bytes: &[u8]) -> String {
    wire::escape::escape(bytes)
}

impl ClientArgs {
    /// Builds the scenario from the flags, resolved targets and the chosen
    /// source addresses.
    pub fn scenario(
        &self,
        targets: Vec<SocketAddr>,
        embedded_server: bool,
        sources: Vec<IpAddr>,
    ) -> anyhow::Result<Scenario> {
        let schedule = match &self.connections_schedule {
            Some(spec) => Some(
                parse_phases(spec).map_err(|e| usage(format!("--connections-schedule: {e}")))?,
            ),
            None => None,
        };
        let connections = match &schedule {
            Some(p) => p
                .iter()
                .map(|p| p.from.max(p.to))
                .fold(0.0, f64::max)
                .ceil() as u64,
            None if self.transport == Transport::TcpPerQuery => self.concurrency,
            None => self.connections,
        };
        if connections == 0 {
            return Err(usage("--connections must be at least 1, e.g. -c 10k"));
        }
        if embedded_server && self.proto == Proto::Redis {
            return Err(usage(
                "--proto redis needs a Redis server's address, e.g. `throng client 127.0.0.1:6379 \
                 --proto redis`: throng's embedded server does not speak RESP",
            ));
        }
        let ramp = match (self.batch_size, self.batch_delay) {
            (Some(size), Some(delay)) => {
                if delay.is_zero() {
                    return Err(usage("--batch-delay must be above 0, e.g. 100ms"));
                }
                Ramp::Batch {
                    size,
                    delay_s: delay.as_secs_f64(),
                }
            }
            _ => Ramp::Rate {
                per_second: self.connect_rate.unwrap_or(DEFAULT_CONNECT_RATE),
            },
        };
        if self.connect_timeout.is_zero() {
            return Err(usage("--connect-timeout must be above 0, e.g. 3s"));
        }
        if self.lifetime.is_some_and(|l| l.is_zero()) {
            return Err(usage("--lifetime must be above 0, e.g. 30s"));
        }
        let traffic = self.traffic()?;
        let push = self.push_listen()?;
        // With traffic its first answer verifies; without, one query of
        // the run's protocol does (raw needs a marker to know an answer;
        // push, the server's first message).
        let probe = if self.proto == Proto::Websocket && traffic.is_none() {
            // The upgrade verifies a WebSocket connection; after it, the
            // server's frames are read as the queries' would be (pings,
            // closes), and no probe is sent.
            Some(self.query()?)
        } else if self.verify && !self.no_verify && traffic.is_none() && push.is_none() {
            match self.query()? {
                Query::Raw { marker: None, .. } => None,
                q => Some(q),
            }
        } else {
            None
        };
        let tls = self.tls(traffic.as_ref())?;
        let end = if self.hold {
            End::Hold
        } else if self.pause {
            End::Pause
        } else {
            End::Duration {
                seconds: traffic
                    .as_ref()
                    .and_then(Traffic::schedule_seconds)
                    .unwrap_or(self.duration.as_secs_f64()),
            }
        };
        let stop_on = self
            .stop_on
            .iter()
            .map(|c| crate::scenario::StopOn::parse(c).map_err(usage))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let verifies_in_ramp = probe.is_some() || tls.is_some();
        if let Some(c) = stop_on
            .iter()
            .find(|c| matches!(c, crate::scenario::StopOn::VerifyStall { .. }))
        {
            if !verifies_in_ramp {
                return Err(usage(format!(
                    "--stop-on {}: nothing verifies connections during this ramp (with queries \
                     the first answer does, after the ramp; --no-verify and raw without \
                     --marker send no probe): use --stop-on failed=PERCENT",
                    c.describe()
                )));
            }
        }
        let workers = match (self.connect_mode, self.workers) {
            // One connection at a time: one loop is all it can use.
            (ConnectMode::Sync, _) => 1,
            (_, Some(n)) => n as usize,
            (_, None) => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        let workers = workers.min(connections as usize).max(1);
        Ok(Scenario {
            targets,
            target_names: self.targets.clone(),
            embedded_server,
            connections,
            ramp,
            connect_mode: self.connect_mode,
            max_inflight_connects: match self.connect_mode {
                ConnectMode::Sync => 1,
                ConnectMode::Async => self.max_inflight_connects,
            },
            connect_timeout_s: self.connect_timeout.as_secs_f64(),
            sources,
            end,
            lifetime_s: self.lifetime.map(|l| l.as_secs_f64()),
            reconnect: self.reconnect && !self.no_reconnect,
            // Queries keep their connections: one the server closes with
            // nothing in flight (a keep-alive limit, an idle timeout) is
            // replaced unless asked otherwise (a closed loop would lose its
            // concurrency, an open loop its rate). Failures are replaced
            // only with --reconnect: a server that resets every connection
            // would otherwise be dialled in a loop.
            replace_closed: !self.no_reconnect
                && traffic.is_some()
                && self.transport != Transport::TcpPerQuery,
            preallocate: self.preallocate && schedule.is_none(),
            connections_schedule: schedule,
            traffic,
            control: self.control.is_some(),
            segment: self.segment,
            workers,
            verify: self.verify && !self.no_verify,
            probe,
            max_failures: self.max_failures,
            transport: self.transport,
            tls,
            push,
            stop_on,
            websocket: self.websocket()?,
        })
    }

    /// --proto push's settings (None for the other protocols).
    fn push_listen(&self) -> anyhow::Result<Option<PushListen>> {
        let defaults = crate::scenario::PushListen::default_every();
        if self.proto != Proto::Push {
            if self.every != defaults || self.clock_sync || self.push_format != PushFormat::Throng {
                return Err(usage(
                    "--every, --push-format and --clock-sync only apply to --proto push; \
                     add --proto push",
                ));
            }
            return Ok(None);
        }
        if self.every.is_zero() {
            return Err(usage("--every must be above 0, e.g. 20ms"));
        }
        if !matches!(
            self.transport,
            Transport::Tcp | Transport::Udp | Transport::Tls
        ) {
            return Err(usage(
                "--proto push works over --transport tcp, udp or tls (a connection listens \
                 for the whole run)",
            ));
        }
        Ok(Some(PushListen {
            format: self.push_format,
            every_s: self.every.as_secs_f64(),
            clock_sync: self.clock_sync,
            burst: self.burst,
        }))
    }

    /// The WebSocket upgrade each connection makes, when --proto websocket
    /// or --push-over websocket asks for one.
    fn websocket(&self) -> anyhow::Result<Option<WsUpgrade>> {
        let ws = self.proto == Proto::Websocket
            || self.proto == Proto::Push && self.push_over == PushOver::Websocket;
        if self.push_over == PushOver::Websocket && self.proto != Proto::Push {
            return Err(usage(
                "--push-over only applies to --proto push; for queries over WebSocket use \
                 --proto websocket",
            ));
        }
        if !ws {
            if self.ws_path != "/"
                || !self.ws_header.is_empty()
                || self.ws_subprotocol.is_some()
                || self.ws_binary
            {
                return Err(usage(
                    "--ws-path, --ws-header, --ws-subprotocol and --ws-binary only apply to \
                     --proto websocket (or --proto push --push-over websocket)",
                ));
            }
            return Ok(None);
        }
        if !matches!(self.transport, Transport::Tcp | Transport::Tls) {
            return Err(usage(
                "WebSocket works over --transport tcp or tls (wss); \
                 choose one of them",
            ));
        }
        let printable = |v: &str| v.bytes().all(|b| (0x20..0x7f).contains(&b));
        if !self.ws_path.starts_with('/') || !printable(&self.ws_path) || self.ws_path.contains(' ')
        {
            return Err(usage(format!(
                "--ws-path '{}' is not a request target; e.g. / or /chat?room=1",
                self.ws_path
            )));
        }
        let mut headers = Vec::new();
        for h in &self.ws_header {
            let Some((name, value)) = h.split_once(':') else {
                return Err(usage(format!(
                    "--ws-header '{h}' has no ':'; give NAME:VALUE, e.g. 'Origin:http://x'"
                )));
            };
            let (name, value) = (name.trim(), value.trim());
            let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            if name.is_empty() || !name.bytes().all(token) || !printable(value) {
                return Err(usage(format!(
                    "--ws-header '{h}' is not a header line; give NAME:VALUE, e.g. \
                     'Origin:http://x'"
                )));
            }
            headers.push((name.to_string(), value.to_string()));
        }
        if let Some(p) = &self.ws_subprotocol {
            if p.is_empty() || !printable(p) {
                return Err(usage("--ws-subprotocol is empty or not printable ASCII"));
            }
        }
        Ok(Some(WsUpgrade {
            path: self.ws_path.clone(),
            headers,
            subprotocol: self.ws_subprotocol.clone(),
        }))
    }

    /// --proto websocket's query: the message of -m, --message-file or
    /// --size bytes, text or --ws-binary.
    fn ws_query(&self) -> anyhow::Result<Query> {
        let message = match (&self.message, &self.message_file) {
            (Some(m), _) => {
                wire::escape::unescape(m).map_err(|e| usage(format!("--message: {e}")))?
            }
            (None, Some(f)) => std::fs::read(f)
                .map_err(|e| usage(format!("--message-file {}: {e}", f.display())))?,
            (None, None) => {
                if self.size == 0 || self.size > wire::ws::MAX_WS_MESSAGE {
                    return Err(usage(
                        "--size must be 1..=1MiB for websocket (a message of that many \
                         bytes)",
                    ));
                }
                vec![b'w'; self.size as usize]
            }
        };
        if message.len() as u64 > wire::ws::MAX_WS_MESSAGE {
            return Err(usage(
                "the WebSocket message is over 1 MiB (the most a reader accepts)",
            ));
        }
        Ok(Query::WebSocket {
            message: escaped(&message),
            binary: self.ws_binary,
        })
    }

    /// The query of `--proto` and its flags (the traffic's, and the
    /// verification probe's when there is no traffic).
    pub fn query(&self) -> anyhow::Result<Query> {
        if !self.redis_command.is_empty() && self.proto != Proto::Redis {
            return Err(usage(format!(
                "--redis-command is for --proto redis (this run is --proto {})",
                crate::engine::proto::name(self.proto)
            )));
        }
        Ok(match self.proto {
            Proto::Dns => {
                let qtype = wire::dns::rtype_from_name(&self.qtype).ok_or_else(|| {
                    usage(format!(
                        "--qtype '{}' is not a record type; e.g. A, AAAA, MX, TYPE65",
                        self.qtype
                    ))
                })?;
                let (names, qtypes) = match &self.qnames {
                    Some(f) => {
                        let text = std::fs::read_to_string(f)
                            .map_err(|e| usage(format!("--qnames {}: {e}", f.display())))?;
                        let (names, qtypes) = parse_query_file(&text, qtype)
                            .map_err(|e| usage(format!("--qnames {} {e}", f.display())))?;
                        if names.is_empty() {
                            return Err(usage(format!(
                            "--qnames {}: no queries in the file; give one `NAME [TYPE]` per line",
                            f.display()
                        )));
                        }
                        (names, qtypes)
                    }
                    None => {
                        check_name(&self.qname)
                            .map_err(|e| usage(format!("--qname '{}': {e}", self.qname)))?;
                        (vec![self.qname.clone()], Vec::new())
                    }
                };
                let distinct: std::collections::BTreeSet<u16> = qtypes.iter().copied().collect();
                if distinct.len() > MAX_QTYPES {
                    return Err(usage(format!(
                    "--qnames: {} different record types; at most {MAX_QTYPES} are counted apart",
                    distinct.len()
                )));
                }
                let edns = match (self.edns, self.dnssec_ok) {
                (Some(size), _) if size < 512 => {
                    return Err(usage(format!(
                        "--edns {size}: below 512, which servers read as 512 (RFC 6891); e.g. --edns 1232"
                    )))
                }
                (Some(size), _) => Some(size),
                (None, true) => Some(wire::dns::EDNS_UDP_SIZE),
                (None, false) => None,
            };
                Query::Dns {
                    qtype,
                    names,
                    qtypes,
                    edns,
                    dnssec_ok: self.dnssec_ok,
                }
            }
            Proto::Echo => {
                if self.size < ECHO_HEADER as u64 || self.size > 1 << 20 {
                    return Err(usage(format!(
                    "--size must be {}..=1MiB for echo (magic, sequence and timestamp need {} bytes)",
                    ECHO_HEADER,
                    ECHO_HEADER
                )));
                }
                Query::Echo {
                    size: self.size as usize,
                    validate: self.validate,
                }
            }
            Proto::Ping => Query::Ping,
            Proto::Http => {
                let request =
                    match &self.http_request {
                        Some(r) => {
                            let bytes = wire::escape::unescape(r)
                                .map_err(|e| usage(format!("--http-request: {e}")))?;
                            match wire::http::parse_request_head(&bytes) {
                                Ok(Some(h))
                                    if h.head_len == bytes.len()
                                        || h.body != wire::http::Body::Length(0) => {}
                                _ => return Err(usage(
                                    "--http-request is not one complete HTTP/1.1 request; e.g. \
                                 'GET /index.html HTTP/1.1\\r\\nHost: example\\r\\n\\r\\n'",
                                )),
                            }
                            escaped(&bytes)
                        }
                        None => String::new(),
                    };
                Query::Http { request }
            }
            Proto::Push => {
                return Err(usage(
                    "--proto push sends no queries: it listens to what the server pushes",
                ))
            }
            Proto::Websocket => self.ws_query()?,
            Proto::Redis => {
                let commands = if self.redis_command.is_empty() {
                    vec![crate::engine::proto::REDIS_DEFAULT_COMMAND.to_string()]
                } else {
                    self.redis_command.clone()
                };
                for c in &commands {
                    match wire::resp::split_command(c) {
                        Ok(words) if words.is_empty() => {
                            return Err(usage(
                                "--redis-command is empty; e.g. 'GET key:__rand_int__'",
                            ))
                        }
                        Ok(_) => {}
                        Err(e) => {
                            return Err(usage(format!(
                                "--redis-command: {e}; quote a word with spaces as redis-cli does: \
                                 'SET k \"a b\"'"
                            )))
                        }
                    }
                }
                if self.redis_keys > crate::engine::proto::REDIS_MOST_KEYS {
                    return Err(usage(format!(
                        "--redis-keys {}: __rand_int__ has twelve digits; at most 10^12",
                        self.redis_keys
                    )));
                }
                Query::Redis {
                    commands,
                    keys: self.redis_keys,
                }
            }
            Proto::Raw => {
                let message = match (&self.message, &self.message_file) {
                    (Some(m), _) => {
                        wire::escape::unescape(m).map_err(|e| usage(format!("--message: {e}")))?
                    }
                    (None, Some(f)) => std::fs::read(f)
                        .map_err(|e| usage(format!("--message-file {}: {e}", f.display())))?,
                    (None, None) => {
                        return Err(usage(
                            "--proto raw needs --message STRING or --message-file FILE",
                        ))
                    }
                };
                if message.is_empty() {
                    return Err(usage("--message is empty"));
                }
                let unesc = |flag: &str, v: &Option<String>| -> anyhow::Result<Option<String>> {
                    v.as_ref()
                        .map(|s| {
                            wire::escape::unescape(s)
                                .map(|b| escaped(&b))
                                .map_err(|e| usage(format!("{flag}: {e}")))
                        })
                        .transpose()
                };
                let marker = unesc("--marker", &self.marker)?;
                if marker.as_deref() == Some("") {
                    return Err(usage("--marker is empty"));
                }
                Query::Raw {
                    message: escaped(&message),
                    first_message: unesc("--first-message", &self.first_message)?,
                    marker,
                }
            }
        })
    }

    /// The query traffic the flags ask for (None: connections only).
    pub fn traffic(&self) -> anyhow::Result<Option<Traffic>> {
        let schedule = match (&self.schedule, &self.schedule_file) {
            (Some(s), _) => Some(parse_phases(s).map_err(|e| usage(format!("--schedule: {e}")))?),
            (None, Some(f)) => {
                let text = if f.as_os_str() == "-" {
                    std::io::read_to_string(std::io::stdin())
                } else {
                    std::fs::read_to_string(f)
                }
                .map_err(|e| usage(format!("--schedule-file {}: {e}", f.display())))?;
                let spec: Vec<&str> = text
                    .lines()
                    .map(|l| l.split('#').next().unwrap_or("").trim())
                    .filter(|l| !l.is_empty())
                    .collect();
                Some(
                    parse_phases(&spec.join(","))
                        .map_err(|e| usage(format!("--schedule-file {}: {e}", f.display())))?,
                )
            }
            (None, None) => None,
        };
        let model = if let Some(phases) = schedule {
            Model::OpenLoop {
                phases,
                arrivals: self.arrivals,
                spread: self.spread,
            }
        } else if let Some(r) = self.rate {
            Model::OpenLoop {
                phases: vec![Phase {
                    seconds: self.duration.as_secs_f64().max(1e-9),
                    from: r,
                    to: r,
                }],
                arrivals: self.arrivals,
                spread: self.spread,
            }
        } else if let Some(i) = self.interval {
            if i.is_zero() {
                return Err(usage("--interval must be above 0, e.g. 5s"));
            }
            Model::Interval {
                every_s: i.as_secs_f64(),
            }
        } else if self.closed_loop {
            Model::ClosedLoop {
                think_s: self.think.unwrap_or_default().as_secs_f64(),
            }
        } else {
            if self.slack.is_some() {
                return Err(usage(
                    "--slack gathers paced queries and this run sends none: add a rate \
                     (-r 20k), --interval or --closed-loop, or drop --slack",
                ));
            }
            return Ok(None);
        };
        if self.proto == Proto::Push {
            return Err(usage(
                "--proto push sends no queries: drop -r/--rate, --schedule, --interval and \
                 --closed-loop (the server sets the pace; --every says what it is)",
            ));
        }
        let query = self.query()?;
        if self.validate && self.proto != Proto::Echo {
            return Err(usage("--validate only applies to --proto echo"));
        }
        if self.timeout.is_zero() {
            return Err(usage("--timeout must be above 0, e.g. 5s"));
        }
        let slack = self.slack.unwrap_or_default();
        if slack > MAX_SLACK || slack >= self.timeout {
            return Err(usage(format!(
                "--slack {} would hold every query that long before it is sent; give less \
                 than --timeout ({}) and at most {}, e.g. --slack 1ms",
                crate::units::format_duration(slack),
                crate::units::format_duration(self.timeout),
                crate::units::format_duration(MAX_SLACK),
            )));
        }
        let window = match (self.window, &model) {
            (Some(k), _) => Some(k),
            (None, Model::ClosedLoop { .. }) => Some(1),
            (None, _) => None,
        };
        Ok(Some(Traffic {
            proto: self.proto,
            query,
            model,
            window,
            messages: self.messages,
            queries: self.queries,
            max_queries_per_conn: self.max_queries_per_conn,
            timeout_s: self.timeout.as_secs_f64(),
            close_on_timeout: self.close_on_timeout,
            drain_s: self
                .drain
                .unwrap_or(self.timeout)
                .min(self.timeout)
                .as_secs_f64(),
            slack_s: slack.as_secs_f64(),
            seed: self.seed,
            ok_rcodes: self
                .ok_rcodes
                .iter()
                .map(|r| {
                    crate::metrics::rcode_of(r.trim())
                        .map(|c| c as u8)
                        .ok_or_else(|| {
                            usage(format!(
                                "--ok-rcodes '{r}' is not an RCODE; give names or numbers: \
                                 NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP, REFUSED, 0-15"
                            ))
                        })
                })
                .collect::<anyhow::Result<_>>()?,
            ok_status: self
                .ok_status
                .iter()
                .map(|&c| {
                    if (100..600).contains(&c) {
                        Ok(c)
                    } else {
                        Err(usage(format!(
                            "--ok-status {c} is not an HTTP status; give codes from 100 to 599"
                        )))
                    }
                })
                .collect::<anyhow::Result<_>>()?,
        }))
    }

    /// Checks the flags that only some transports take, and returns the TLS
    /// settings when the transport is TLS.
    fn tls(&self, traffic: Option<&Traffic>) -> anyhow::Result<Option<TlsOptions>> {
        let tls_flags = [
            ("--tls-ca", self.tls_ca.is_some()),
            ("--tls-insecure", self.tls_insecure),
            ("--sni", self.sni.is_some()),
            ("--alpn", !self.alpn.is_empty()),
            ("--tls-resume", self.tls_resume),
        ];
        if self.transport != Transport::Tls {
            if let Some((flag, _)) = tls_flags.iter().find(|(_, set)| *set) {
                return Err(usage(format!(
                    "{flag} applies to --transport tls (or dot); add --transport tls"
                )));
            }
        }
        match self.transport {
            Transport::Udp => {
                if let Some(t) = traffic {
                    match &t.query {
                    Query::Http { .. } => {
                        return Err(usage(
                            "--proto http needs a byte stream: use --transport tcp, tls or tcp-per-query",
                        ))
                    }
                    Query::Redis { .. } => {
                        return Err(usage(
                            "--proto redis needs a byte stream (Redis has no UDP): use --transport tcp, tls or tcp-per-query",
                        ))
                    }
                    Query::Echo { size, .. } if *size as u64 > MAX_DATAGRAM => {
                        return Err(usage(format!(
                            "--size {size} does not fit in a UDP datagram (at most {MAX_DATAGRAM} bytes)"
                        )))
                    }
                    Query::Raw {
                        first_message: Some(_),
                        ..
                    } => {
                        return Err(usage(
                            "--first-message needs a connection: use --transport tcp or tls",
                        ))
                    }
                    _ => {}
                }
                }
            }
            Transport::TcpPerQuery => {
                let Some(t) = traffic else {
                    return Err(usage(
                        "--transport tcp-per-query opens a connection per query: give a rate \
                     (-r 1k), a --schedule or --closed-loop",
                    ));
                };
                if matches!(t.model, Model::Interval { .. }) {
                    return Err(usage(
                        "--interval paces persistent connections; with tcp-per-query give a rate \
                     (-r) or --closed-loop",
                    ));
                }
                for (flag, set) in [
                    (
                        "--max-queries-per-conn",
                        self.max_queries_per_conn.is_some(),
                    ),
                    ("--messages", self.messages.is_some()),
                    (
                        "--connections-schedule",
                        self.connections_schedule.is_some(),
                    ),
                    ("--lifetime", self.lifetime.is_some()),
                ] {
                    if set {
                        return Err(usage(format!(
                            "{flag} does not apply to --transport tcp-per-query (one query per \
                         connection); use --concurrency N for connections at once"
                        )));
                    }
                }
            }
            Transport::Tls => {
                if let Some(ca) = &self.tls_ca {
                    if !ca.is_file() {
                        let what = if ca.exists() {
                            "not a regular file"
                        } else {
                            "no such file"
                        };
                        return Err(usage(format!(
                            "--tls-ca {}: {what}; give the PEM file of the CA (or the \
                         self-signed certificate) that signed the server's certificate",
                            ca.display()
                        )));
                    }
                }
                return Ok(Some(TlsOptions {
                    ca: self.tls_ca.clone(),
                    insecure: self.tls_insecure,
                    sni: self.sni.clone(),
                    alpn: self.alpn.clone(),
                    resume: self.tls_resume,
                }));
            }
            Transport::Tcp => {}
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Segment;

    #[test]
    fn slices_add_up_to_the_whole() {
        let args = <super::super::Cli as clap::Parser>::parse_from([
            "throng",
            "client",
            "127.0.0.1:1",
            "-c",
            "10003",
            "-r",
            "1000",
            "--connect-rate",
            "999",
        ]);
        let super::super::Command::Client(a) = args.command else {
            panic!()
        };
        let sources = (1..=5).map(|i| IpAddr::from([127, 0, 0, i])).collect();
        let whole = a
            .scenario(vec!["127.0.0.1:1".parse().unwrap()], false, sources)
            .unwrap();
        let slices: Vec<Scenario> = (1..=3)
            .map(|index| whole.slice(Segment { index, count: 3 }))
            .collect();
        assert_eq!(slices.iter().map(|s| s.connections).sum::<u64>(), 10_003);
        let rate: f64 = slices.iter().map(|s| s.ramp.rate()).sum();
        assert!((rate - 999.0).abs() < 1e-9);
        let qps: f64 = slices
            .iter()
            .map(|s| s.traffic.as_ref().unwrap().rate_at(0.5, 0))
            .sum();
        assert!((qps - 1000.0).abs() < 1e-9);
        let mut all: Vec<IpAddr> = slices.iter().flat_map(|s| s.sources.clone()).collect();
        all.sort();
        assert_eq!(all.len(), 5, "each source in exactly one slice");
        assert_ne!(
            slices[0].traffic.as_ref().unwrap().seed,
            slices[1].traffic.as_ref().unwrap().seed
        );
        let mut recorded = whole.clone();
        recorded.segment = Some(Segment { index: 3, count: 3 });
        assert_eq!(recorded.identity(), whole.identity());
        assert_ne!(slices[2].identity(), whole.identity());
    }
}
