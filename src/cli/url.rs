//! URL targets: `http://HOST[:PORT]/PATH`, `https://`, `ws://`, `wss://`
//! set the protocol, the transport, the port and the path (and the TLS
//! name); `tcp://`, `udp://`, `tls://` set the transport. A target with
//! no `://` is HOST:PORT. A URL whose parts say otherwise than
//! a flag given is refused, naming both.

use crate::domain::{Proto, Transport};

/// What a URL's scheme says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scheme {
    Http,
    Https,
    Ws,
    Wss,
    Tcp,
    Udp,
    Tls,
}

impl Scheme {
    fn parse(s: &str) -> Option<Scheme> {
        Some(match s.to_ascii_lowercase().as_str() {
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            "ws" => Scheme::Ws,
            "wss" => Scheme::Wss,
            "tcp" => Scheme::Tcp,
            "udp" => Scheme::Udp,
            "tls" => Scheme::Tls,
            _ => return None,
        })
    }

    fn proto(self) -> Option<Proto> {
        match self {
            Scheme::Http | Scheme::Https => Some(Proto::Http),
            Scheme::Ws | Scheme::Wss => Some(Proto::Websocket),
            _ => None,
        }
    }

    fn transport(self) -> Transport {
        match self {
            Scheme::Https | Scheme::Wss | Scheme::Tls => Transport::Tls,
            Scheme::Udp => Transport::Udp,
            _ => Transport::Tcp,
        }
    }

    fn default_port(self) -> Option<u16> {
        match self {
            Scheme::Http | Scheme::Ws => Some(80),
            Scheme::Https | Scheme::Wss => Some(443),
            _ => None,
        }
    }
}

/// A URL target, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    scheme: Scheme,
    /// The host as a target writes it (an IPv6 address in brackets).
    host: String,
    port: u16,
    /// The path and query, from its `/` (`/` when none).
    path: String,
}

impl Url {
    /// `t` as a URL; None when it is no URL (no `://`).
    pub fn parse(t: &str) -> Result<Option<Url>, String> {
        let Some((scheme, rest)) = t.split_once("://") else {
            return Ok(None);
        };
        let scheme = Scheme::parse(scheme).ok_or_else(|| {
            format!(
                "target '{t}': '{scheme}://' is not a scheme throng speaks; give http://, \
                 https://, ws://, wss://, tcp://, udp://, tls:// or HOST:PORT"
            )
        })?;
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) if rest[i..].starts_with('/') => (&rest[..i], rest[i..].to_string()),
            Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
            None => (rest, "/".to_string()),
        };
        let path = path.split('#').next().unwrap_or("/").to_string();
        if authority.contains('@') {
            return Err(format!("target '{t}': credentials in a URL are not taken"));
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.is_empty() && (!h.contains(':') || h.ends_with(']')) => {
                let port = p
                    .parse::<u16>()
                    .map_err(|_| format!("target '{t}': '{p}' is not a port"))?;
                (h.to_string(), port)
            }
            _ => {
                let port = scheme.default_port().ok_or_else(|| {
                    format!("target '{t}': a {scheme:?} URL needs its port, e.g. tcp://HOST:PORT")
                })?;
                (authority.to_string(), port)
            }
        };
        if host.is_empty() || (host.contains(':') && !host.starts_with('[')) {
            return Err(format!(
                "target '{t}': no host, or an IPv6 address without brackets ([::1])"
            ));
        }
        if scheme.proto().is_none() && path != "/" {
            return Err(format!(
                "target '{t}': a {} URL has no path; give {}://{host}:{port}",
                format!("{scheme:?}").to_lowercase(),
                format!("{scheme:?}").to_lowercase()
            ));
        }
        Ok(Some(Url {
            scheme,
            host,
            port,
            path,
        }))
    }

    /// The target as HOST:PORT.
    pub fn target(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// The TLS name to send (SNI): the host, when it is a name.
    pub fn tls_name(&self) -> Option<String> {
        let ip = self
            .host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>();
        (self.scheme.transport() == Transport::Tls && ip.is_err()).then(|| self.host.clone())
    }
}

/// `--proto`'s word for `p`.
fn proto_name(p: Proto) -> String {
    format!("{p:?}").to_lowercase()
}

/// What URL targets set, over the flags given: the targets as HOST:PORT,
/// the protocol, the transport, the HTTP request or WebSocket path, the
/// TLS name. (`proto`, `transport`: the flags' values, their defaults
/// when not given.)
pub struct Applied {
    pub targets: Vec<String>,
    pub proto: Proto,
    pub transport: Transport,
    pub http_request: Option<String>,
    pub ws_path: String,
    pub sni: Option<String>,
}

/// The flags a URL can set, as given.
pub struct Given<'a> {
    pub targets: &'a [String],
    pub proto: Proto,
    pub transport: Transport,
    pub http_request: Option<&'a str>,
    pub ws_path: &'a str,
    pub sni: Option<&'a str>,
}

/// Applies the URL targets among `g.targets` (all of them URLs of one
/// scheme and path, or none). Err: the conflict, in words.
pub fn apply(g: &Given) -> Result<Applied, String> {
    let mut urls = Vec::new();
    for t in g.targets {
        if let Some(u) = Url::parse(t)? {
            urls.push((t, u));
        }
    }
    let mut out = Applied {
        targets: g.targets.to_vec(),
        proto: g.proto,
        transport: g.transport,
        http_request: g.http_request.map(str::to_string),
        ws_path: g.ws_path.to_string(),
        sni: g.sni.map(str::to_string),
    };
    let Some((first, u)) = urls.first() else {
        return Ok(out);
    };
    if urls.len() != g.targets.len() {
        return Err(format!(
            "target '{first}' is a URL and others are HOST:PORT: give every target one way"
        ));
    }
    if let Some((t, _)) = urls
        .iter()
        .find(|(_, v)| v.scheme != u.scheme || v.path != u.path)
    {
        return Err(format!(
            "targets '{first}' and '{t}' differ in scheme or path: one run sends one request"
        ));
    }
    let scheme = format!("{:?}", u.scheme).to_lowercase();
    if let Some(p) = u.scheme.proto() {
        // --proto dns is the default: a URL sets it, another given says no.
        if g.proto != p && g.proto != Proto::Dns {
            return Err(format!(
                "target '{first}' says --proto {} ({scheme}://) and --proto {} says otherwise: \
                 drop one",
                proto_name(p),
                proto_name(g.proto)
            ));
        }
        out.proto = p;
    }
    let want = u.scheme.transport();
    let fits = g.transport == want
        || g.transport == Transport::Tcp
        || (want == Transport::Tcp && g.transport == Transport::TcpPerQuery);
    if !fits {
        return Err(format!(
            "target '{first}' says --transport {} ({scheme}://) and --transport {} says \
             otherwise: drop one",
            want.name(),
            g.transport.name()
        ));
    }
    if g.transport == Transport::Tcp {
        out.transport = want;
    }
    match u.scheme.proto() {
        Some(Proto::Http) if u.path != "/" || g.http_request.is_none() => {
            if g.http_request.is_some() {
                return Err(format!(
                    "target '{first}' has the path {} and --http-request sends its own: drop one",
                    u.path
                ));
            }
            if u.path != "/" {
                out.http_request = Some(format!(
                    "GET {} HTTP/1.1\\r\\nHost: {}\\r\\nUser-Agent: throng\\r\\n\\r\\n",
                    u.path, u.host
                ));
            }
        }
        Some(Proto::Websocket) if u.path != "/" => {
            if g.ws_path != "/" && g.ws_path != u.path {
                return Err(format!(
                    "target '{first}' has the path {} and --ws-path {} says otherwise: drop one",
                    u.path, g.ws_path
                ));
            }
            out.ws_path = u.path.clone();
        }
        _ => {}
    }
    if out.sni.is_none() {
        out.sni = u.tls_name();
    }
    out.targets = urls.iter().map(|(_, u)| u.target()).collect();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn given(targets: &[String]) -> Given<'_> {
        Given {
            targets,
            proto: Proto::Dns,
            transport: Transport::Tcp,
            http_request: None,
            ws_path: "/",
            sni: None,
        }
    }

    fn one(t: &str) -> Applied {
        let targets = [t.to_string()];
        apply(&given(&targets)).unwrap()
    }

    #[test]
    fn schemes_set_protocol_transport_port_and_path() {
        let a = one("http://127.0.0.1:8080/");
        assert_eq!(a.targets, ["127.0.0.1:8080"]);
        assert_eq!((a.proto, a.transport), (Proto::Http, Transport::Tcp));
        assert_eq!(a.http_request, None);
        let a = one("https://example.com/index.html?x=1");
        assert_eq!(a.targets, ["example.com:443"]);
        assert_eq!((a.proto, a.transport), (Proto::Http, Transport::Tls));
        assert_eq!(a.sni.as_deref(), Some("example.com"));
        let r = a.http_request.unwrap();
        assert!(r.starts_with("GET /index.html?x=1 HTTP/1.1\\r\\nHost: example.com\\r\\n"));
        let a = one("ws://[::1]:9000/chat");
        assert_eq!(a.targets, ["[::1]:9000"]);
        assert_eq!((a.proto, a.ws_path.as_str()), (Proto::Websocket, "/chat"));
        let a = one("wss://127.0.0.1/");
        assert_eq!((a.transport, a.sni), (Transport::Tls, None));
        assert_eq!(one("udp://127.0.0.1:53").transport, Transport::Udp);
        assert_eq!(one("tls://127.0.0.1:853").proto, Proto::Dns);
        assert_eq!(one("127.0.0.1:53").targets, ["127.0.0.1:53"]);
    }

    #[test]
    fn conflicts_and_bad_urls_are_refused_naming_both() {
        let t = ["https://127.0.0.1/".to_string()];
        let mut g = given(&t);
        g.transport = Transport::Udp;
        let e = apply(&g).err().unwrap();
        assert!(
            e.contains("--transport tls") && e.contains("--transport udp"),
            "{e}"
        );
        let t = ["http://127.0.0.1/".to_string()];
        let mut g = given(&t);
        g.proto = Proto::Echo;
        let e = apply(&g).err().unwrap();
        assert!(
            e.contains("--proto http") && e.contains("--proto echo"),
            "{e}"
        );
        let t = ["http://127.0.0.1/a".to_string()];
        let mut g = given(&t);
        g.http_request = Some("GET / HTTP/1.1\\r\\n\\r\\n");
        assert!(apply(&g).err().unwrap().contains("--http-request"));
        for bad in [
            "gopher://h/",
            "tcp://h",
            "tcp://h:1/x",
            "http://::1/",
            "http://u@h/",
        ] {
            let t = [bad.to_string()];
            assert!(apply(&given(&t)).is_err(), "{bad}");
        }
        let t = ["http://a/".to_string(), "127.0.0.1:1".to_string()];
        assert!(apply(&given(&t)).is_err());
    }
}
