//! --proto redis: RESP2 commands from --redis-command (default `PING`),
//! taken in turn; each `{n}` in a command is a key number drawn at random
//! in 0..--redis-keys, written with a fixed width so that a command is
//! encoded once and its digits filled in place. Replies come in order
//! (pipelined through --window); each is framed by its type, and an
//! error reply is a failed answer, counted by its first word.

use rand::Rng;
use rand_pcg::Pcg64Mcg;

use super::{Frame, Status};

/// Its --proto value, and its name in the per-query log.
pub const NAME: &str = "redis";
/// The protocol in sentences.
pub const WORD: &str = "Redis";
/// The command sent when none is given.
pub const DEFAULT_COMMAND: &str = "PING";
/// The placeholder of a key number in a command.
pub const KEY: &str = "{n}";

/// The queries in a few words, for a report's table.
pub fn words(commands: &[String]) -> String {
    format!("Redis, {}", commands.join("; "))
}

/// One command, encoded, and where its key numbers go.
struct Template {
    bytes: Vec<u8>,
    holes: Vec<usize>,
}

/// A command's encoding, with `width` zeros where each `{n}` was.
fn template(args: &[Vec<u8>], width: usize) -> Template {
    let mut bytes = format!("*{}\r\n", args.len()).into_bytes();
    let mut holes = Vec::new();
    for a in args {
        let parts: Vec<&[u8]> = split_at_keys(a);
        let len = a.len() - (parts.len() - 1) * KEY.len() + (parts.len() - 1) * width;
        bytes.extend_from_slice(format!("${len}\r\n").as_bytes());
        for (i, p) in parts.iter().enumerate() {
            if i > 0 {
                holes.push(bytes.len());
                bytes.resize(bytes.len() + width, b'0');
            }
            bytes.extend_from_slice(p);
        }
        bytes.extend_from_slice(b"\r\n");
    }
    Template { bytes, holes }
}

/// The bytes of `a` around each `{n}`.
fn split_at_keys(a: &[u8]) -> Vec<&[u8]> {
    let key = KEY.as_bytes();
    let mut parts = Vec::new();
    let mut from = 0;
    let mut i = 0;
    while i + key.len() <= a.len() {
        if &a[i..i + key.len()] == key {
            parts.push(&a[from..i]);
            i += key.len();
            from = i;
        } else {
            i += 1;
        }
    }
    parts.push(&a[from..]);
    parts
}

pub struct Redis {
    commands: Vec<Template>,
    keys: u64,
    width: usize,
}

impl Redis {
    /// `commands` as given (checked by the command line: each splits).
    pub fn new(commands: &[String], keys: u64) -> Redis {
        let keys = keys.max(1);
        let width = (keys - 1).to_string().len();
        let commands = commands
            .iter()
            .map(|c| template(&wire::resp::split_command(c).unwrap_or_default(), width))
            .collect();
        Redis {
            commands,
            keys,
            width,
        }
    }

    /// Appends query `n`: the next command in turn, its key numbers
    /// drawn. Its key is `n` (replies are matched in order).
    #[inline]
    pub fn encode(&self, n: u64, rng: &mut Pcg64Mcg, out: &mut Vec<u8>) -> u64 {
        let t = &self.commands[(n % self.commands.len() as u64) as usize];
        let at = out.len();
        out.extend_from_slice(&t.bytes);
        if !t.holes.is_empty() {
            let mut k = rng.random_range(0..self.keys);
            let mut digits = [b'0'; 20];
            for d in digits[..self.width].iter_mut().rev() {
                *d = b'0' + (k % 10) as u8;
                k /= 10;
            }
            for &h in &t.holes {
                out[at + h..at + h + self.width].copy_from_slice(&digits[..self.width]);
            }
        }
        n
    }

    /// Frames the reply at the front of `buf`. Redis's refusal of a
    /// connection past its maxclients is no reply: it is kept, for the
    /// close that follows it to name.
    #[inline]
    pub fn decode(&self, buf: &[u8]) -> Frame {
        match wire::resp::frame(buf) {
            Ok(None) => Frame::Incomplete,
            Ok(Some(_)) if buf.starts_with(wire::resp::MAX_CLIENTS) => Frame::Incomplete,
            Ok(Some(r)) => Frame::Response {
                len: r.len,
                key: None,
                status: Status::Redis(r.kind),
                close: false,
            },
            Err(wire::resp::RespError::TooLong) => Frame::Oversized,
            Err(_) => Frame::Malformed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::super::*;
    use super::*;
    use wire::resp::Kind;

    fn redis(commands: &[&str], keys: u64) -> Codec {
        let commands: Vec<String> = commands.iter().map(|c| c.to_string()).collect();
        Codec::Redis(Redis::new(&commands, keys))
    }

    fn sent(c: &Codec, n: u64) -> Vec<u8> {
        let mut out = b"before".to_vec();
        c.encode(n, 0, 0, &mut rng(), &mut out);
        out.split_off(6)
    }

    #[test]
    fn commands_taken_in_turn_with_their_keys_drawn() {
        let c = redis(&["SET key:{n} v:{n}", "GET key:{n}", "PING"], 1000);
        let set = sent(&c, 0);
        let text = String::from_utf8(set.clone()).unwrap();
        // One key for the command, three digits for 0..1000.
        let key = &text[text.find("key:").unwrap() + 4..][..3];
        assert!(key.bytes().all(|b| b.is_ascii_digit()), "{text}");
        assert!(text.starts_with("*3\r\n$3\r\nSET\r\n$7\r\nkey:"), "{text}");
        assert!(text.ends_with(&format!("$5\r\nv:{key}\r\n")), "{text}");
        assert!(String::from_utf8(sent(&c, 1))
            .unwrap()
            .starts_with("*2\r\n$3\r\nGET\r\n$7\r\nkey:"));
        assert_eq!(sent(&c, 2), b"*1\r\n$4\r\nPING\r\n");
        assert_eq!(sent(&c, 5), b"*1\r\n$4\r\nPING\r\n");
        // What the server reads is one whole command.
        assert_eq!(wire::resp::frame(&set).unwrap().unwrap().len, set.len());
        // Keys over the whole range, none outside it.
        let c = redis(&["GET {n}"], 10);
        let mut r = rng();
        let mut seen = [false; 10];
        for n in 0..500 {
            let mut out = Vec::new();
            c.encode(n, 0, 0, &mut r, &mut out);
            let k = out[out.len() - 3];
            seen[usize::from(k - b'0')] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn replies_by_type_and_errors_as_answers() {
        let c = redis(&["PING"], 1);
        let status = |b: &[u8]| match fresh(&c, b) {
            Frame::Response { status, len, .. } if len == b.len() => status,
            f => panic!("{f:?}"),
        };
        assert_eq!(status(b"+PONG\r\n"), Status::Redis(Kind::Simple));
        assert_eq!(status(b"$-1\r\n"), Status::Redis(Kind::Nil));
        assert_eq!(status(b"-WRONGTYPE x\r\n"), Status::Redis(Kind::Error(1)));
        assert_eq!(fresh(&c, b"+PON"), Frame::Incomplete);
        assert_eq!(fresh(&c, b"HTTP/1.1 400\r\n"), Frame::Malformed);
        // The refusal waits for its close.
        assert_eq!(fresh(&c, wire::resp::MAX_CLIENTS), Frame::Incomplete);
        same_frames_at_every_read_size(
            &c,
            b"+PONG\r\n$3\r\nabc\r\n*2\r\n:1\r\n$-1\r\n-ERR no\r\n+",
            4,
        );
    }
}
