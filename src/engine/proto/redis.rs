//! --proto redis: RESP2 commands from --redis-command (default `PING`),
//! taken in turn; each `__rand_int__` in a command is a number drawn at
//! random in 0..--redis-keys, as redis-benchmark's `-r` draws it (each
//! occurrence its own, twelve digits with leading zeros: the same keys as
//! redis-benchmark's), so that a command is encoded once and its digits
//! filled in place. Replies come in order
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
/// The placeholder of a key number in a command (redis-benchmark's).
pub const KEY: &str = "__rand_int__";
/// Digits of a key number (redis-benchmark's).
const WIDTH: usize = 12;
/// Key numbers are below this (twelve digits).
pub const MOST_KEYS: u64 = 1_000_000_000_000;

/// The queries in a few words, for a report's table.
pub fn describe(commands: &[String]) -> String {
    format!("Redis, {}", commands.join("; "))
}

/// One command, encoded, and where its key numbers go.
struct Template {
    bytes: Vec<u8>,
    holes: Vec<usize>,
}

/// A command's encoding, with `width` zeros where each placeholder was.
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

/// The bytes of `a` around each placeholder.
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
}

impl Redis {
    /// `commands` as given (checked by the command line: each splits).
    pub fn new(commands: &[String], keys: u64) -> Redis {
        let commands = commands
            .iter()
            .map(|c| template(&wire::resp::split_command(c).unwrap_or_default(), WIDTH))
            .collect();
        Redis {
            commands,
            keys: keys.clamp(1, MOST_KEYS),
        }
    }

    /// Appends query `n`: the next command in turn, a key number drawn
    /// for each placeholder. Its key is `n` (replies are matched in order).
    #[inline]
    pub fn encode(&self, n: u64, rng: &mut Pcg64Mcg, out: &mut Vec<u8>) -> u64 {
        let t = &self.commands[(n % self.commands.len() as u64) as usize];
        let at = out.len();
        out.extend_from_slice(&t.bytes);
        for &h in &t.holes {
            let mut k = rng.random_range(0..self.keys);
            for d in out[at + h..at + h + WIDTH].iter_mut().rev() {
                *d = b'0' + (k % 10) as u8;
                k /= 10;
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
        let c = redis(
            &["SET key:__rand_int__ v", "GET key:__rand_int__", "PING"],
            1000,
        );
        let set = sent(&c, 0);
        let text = String::from_utf8(set.clone()).unwrap();
        // Twelve digits, as redis-benchmark writes them, below 1000.
        let key = &text[text.find("key:").unwrap() + 4..][..12];
        assert!(key.bytes().all(|b| b.is_ascii_digit()), "{text}");
        assert!(key.starts_with("000000000"), "{text}");
        assert!(text.starts_with("*3\r\n$3\r\nSET\r\n$16\r\nkey:"), "{text}");
        assert!(text.ends_with("\r\n$1\r\nv\r\n"), "{text}");
        assert!(String::from_utf8(sent(&c, 1))
            .unwrap()
            .starts_with("*2\r\n$3\r\nGET\r\n$16\r\nkey:"));
        assert_eq!(sent(&c, 2), b"*1\r\n$4\r\nPING\r\n");
        assert_eq!(sent(&c, 5), b"*1\r\n$4\r\nPING\r\n");
        // What the server reads is one whole command.
        assert_eq!(wire::resp::frame(&set).unwrap().unwrap().len, set.len());
        // Keys over the whole range, none outside it; each placeholder
        // drawn on its own.
        let c = redis(&["MGET __rand_int__ __rand_int__"], 10);
        let mut r = rng();
        let mut seen = [false; 10];
        let mut apart = false;
        for n in 0..500 {
            let mut out = Vec::new();
            c.encode(n, 0, 0, &mut r, &mut out);
            let text = String::from_utf8(out).unwrap();
            let keys: Vec<&str> = text.split("\r\n").filter(|w| w.len() == 12).collect();
            assert_eq!(keys.len(), 2, "{text}");
            for k in &keys {
                let k: usize = k.parse().unwrap();
                seen[k] = true;
            }
            apart |= keys[0] != keys[1];
        }
        assert!(seen.iter().all(|&s| s) && apart);
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
