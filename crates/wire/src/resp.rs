//! RESP2, Redis's protocol: a command is an array of bulk strings; a reply
//! is one value of five types (simple string `+`, error `-`, integer `:`,
//! bulk string `$`, array `*`, the last two with a nil form), framed by
//! its type's own rule. Replies come in the order of the commands.
//!
//! [`frame`] finds the whole reply at the front of the bytes without
//! recursion (an array's elements are counted down as they are read), so
//! a nesting of any depth costs no stack.

/// The words that start Redis's error replies, in the order of
/// [`Kind::Error`]'s index; any other word is counted as the last,
/// `other`.
pub const ERROR_WORDS: [&str; 24] = [
    "ERR",
    "WRONGTYPE",
    "OOM",
    "BUSY",
    "NOAUTH",
    "WRONGPASS",
    "NOPERM",
    "LOADING",
    "READONLY",
    "MOVED",
    "ASK",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "CROSSSLOT",
    "EXECABORT",
    "NOSCRIPT",
    "MISCONF",
    "MASTERDOWN",
    "NOREPLICAS",
    "BUSYKEY",
    "UNBLOCKED",
    "NOPROTO",
    "NOTBUSY",
    "other",
];

/// What Redis sends, then closes, to a connection past its `maxclients`:
/// a refusal of the connection, not an answer to a command.
pub const MAX_CLIENTS: &[u8] = b"-ERR max number of clients reached\r\n";

/// The longest line a reply may have (a simple string, an error, a
/// length): Redis's own inline limit is 64 KiB.
pub const MAX_LINE: usize = 64 * 1024;

/// The longest bulk string (Redis's default `proto-max-bulk-len`).
pub const MAX_BULK: u64 = 512 * 1024 * 1024;

/// The most elements of one array.
pub const MAX_ARRAY: u64 = u32::MAX as u64;

/// A reply's type, for the counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Simple,
    Integer,
    Bulk,
    /// A nil bulk string or array (`$-1`, `*-1`): no value.
    Nil,
    Array,
    /// An error reply, by the index of its first word in [`ERROR_WORDS`].
    Error(u8),
}

impl Kind {
    /// Its name in a result's counts.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Simple => "simple_string",
            Kind::Integer => "integer",
            Kind::Bulk => "bulk_string",
            Kind::Nil => "nil",
            Kind::Array => "array",
            Kind::Error(_) => "error",
        }
    }
}

/// The names of the reply types that are not errors, in [`Kind`]'s order.
pub const VALUE_KINDS: [&str; 5] = ["simple_string", "integer", "bulk_string", "nil", "array"];

/// A reply at the front of the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// Its length in bytes, the final CRLF included.
    pub len: usize,
    /// The type of its top-level value.
    pub kind: Kind,
}

/// Bytes that are not RESP2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RespError {
    /// A value starts with a byte that is no RESP2 type.
    Type(u8),
    /// A length or an integer that is not a number in its range.
    Number,
    /// A line with a CR not followed by LF, or a bulk string without its
    /// final CRLF.
    Line,
    /// A line longer than [`MAX_LINE`], a bulk string longer than
    /// [`MAX_BULK`], an array of more than [`MAX_ARRAY`] elements.
    TooLong,
}

/// Frames the reply at the front of `buf`: Ok(None) until it is whole.
pub fn frame(buf: &[u8]) -> Result<Option<Reply>, RespError> {
    let mut at = 0;
    let mut kind = None;
    // Values still to read: the reply, then each array's elements.
    let mut due: u64 = 1;
    while due > 0 {
        due -= 1;
        let Some(&t) = buf.get(at) else {
            return Ok(None);
        };
        let Some(end) = line_end(&buf[at + 1..])? else {
            return Ok(None);
        };
        let line = &buf[at + 1..at + 1 + end];
        at += 1 + end + 2;
        let k = match t {
            b'+' => Kind::Simple,
            b'-' => Kind::Error(error_word(line)),
            b':' => {
                number(line)?;
                Kind::Integer
            }
            b'$' => match number(line)? {
                -1 => Kind::Nil,
                n if n < 0 => return Err(RespError::Number),
                n if n as u64 > MAX_BULK => return Err(RespError::TooLong),
                n => {
                    let n = n as usize;
                    if buf.len() < at + n + 2 {
                        return Ok(None);
                    }
                    if &buf[at + n..at + n + 2] != b"\r\n" {
                        return Err(RespError::Line);
                    }
                    at += n + 2;
                    Kind::Bulk
                }
            },
            b'*' => match number(line)? {
                -1 => Kind::Nil,
                n if n < 0 => return Err(RespError::Number),
                n if n as u64 > MAX_ARRAY => return Err(RespError::TooLong),
                n => {
                    due = due.checked_add(n as u64).ok_or(RespError::Number)?;
                    Kind::Array
                }
            },
            other => return Err(RespError::Type(other)),
        };
        kind.get_or_insert(k);
    }
    Ok(kind.map(|kind| Reply { len: at, kind }))
}

/// Where the line at the front of `buf` ends (its CR), once its CRLF is
/// there.
fn line_end(buf: &[u8]) -> Result<Option<usize>, RespError> {
    match buf[..buf.len().min(MAX_LINE + 1)]
        .iter()
        .position(|&b| b == b'\r')
    {
        Some(i) => match buf.get(i + 1) {
            Some(b'\n') => Ok(Some(i)),
            Some(_) => Err(RespError::Line),
            None => Ok(None),
        },
        None if buf.len() > MAX_LINE => Err(RespError::TooLong),
        None => Ok(None),
    }
}

/// A signed decimal of at most 19 digits (RESP's lengths and integers).
fn number(line: &[u8]) -> Result<i64, RespError> {
    let (neg, digits) = match line.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, line),
    };
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(RespError::Number);
    }
    let v = digits
        .iter()
        .try_fold(0i64, |acc, &d| {
            acc.checked_mul(10)?.checked_add(i64::from(d - b'0'))
        })
        .ok_or(RespError::Number)?;
    Ok(if neg { -v } else { v })
}

/// The index in [`ERROR_WORDS`] of an error line's first word.
fn error_word(line: &[u8]) -> u8 {
    let word = line.split(|&b| b == b' ').next().unwrap_or(line);
    ERROR_WORDS[..ERROR_WORDS.len() - 1]
        .iter()
        .position(|w| w.as_bytes() == word)
        .unwrap_or(ERROR_WORDS.len() - 1) as u8
}

/// Appends a command, each argument a bulk string.
pub fn build_command<A: AsRef<[u8]>>(args: &[A], out: &mut Vec<u8>) {
    out.push(b'*');
    out.extend_from_slice(args.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    for a in args {
        let a = a.as_ref();
        out.push(b'$');
        out.extend_from_slice(a.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// Splits a command line as redis-cli does: words apart by spaces, a
/// word in double quotes may hold spaces and the escapes `\"`, `\\`,
/// `\n`, `\r`, `\t` and `\xHH`; in single quotes, only `\'`.
pub fn split_command(line: &str) -> Result<Vec<Vec<u8>>, String> {
    let mut words = Vec::new();
    let b = line.as_bytes();
    let mut i = 0;
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == b.len() {
            return Ok(words);
        }
        let mut w = Vec::new();
        while i < b.len() && !b[i].is_ascii_whitespace() {
            match b[i] {
                q @ (b'"' | b'\'') => {
                    i += 1;
                    loop {
                        let Some(&c) = b.get(i) else {
                            return Err(format!("unbalanced quotes in {line:?}"));
                        };
                        i += 1;
                        if c == q {
                            break;
                        }
                        if c != b'\\' || i == b.len() {
                            w.push(c);
                            continue;
                        }
                        let e = b[i];
                        i += 1;
                        if q == b'\'' {
                            if e != b'\'' {
                                w.push(b'\\');
                            }
                            w.push(e);
                            continue;
                        }
                        match e {
                            b'n' => w.push(b'\n'),
                            b'r' => w.push(b'\r'),
                            b't' => w.push(b'\t'),
                            b'x' => {
                                let hex = b
                                    .get(i..i + 2)
                                    .and_then(|h| std::str::from_utf8(h).ok())
                                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                                    .ok_or_else(|| {
                                        format!("\\x needs two hex digits in {line:?}")
                                    })?;
                                w.push(hex);
                                i += 2;
                            }
                            e => w.push(e),
                        }
                    }
                    if i < b.len() && !b[i].is_ascii_whitespace() {
                        return Err(format!("a closing quote must end its word in {line:?}"));
                    }
                }
                c => {
                    w.push(c);
                    i += 1;
                }
            }
        }
        words.push(w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn whole(b: &[u8]) -> Reply {
        frame(b)
            .unwrap()
            .unwrap_or_else(|| panic!("incomplete: {b:?}"))
    }

    #[test]
    fn each_type_framed_whole() {
        assert_eq!(whole(b"+PONG\r\n").kind, Kind::Simple);
        assert_eq!(whole(b":-42\r\n").kind, Kind::Integer);
        assert_eq!(
            whole(b"$3\r\nabc\r\n"),
            Reply {
                len: 9,
                kind: Kind::Bulk
            }
        );
        assert_eq!(whole(b"$0\r\n\r\n").kind, Kind::Bulk);
        assert_eq!(
            whole(b"$-1\r\n"),
            Reply {
                len: 5,
                kind: Kind::Nil
            }
        );
        assert_eq!(whole(b"*-1\r\n").kind, Kind::Nil);
        assert_eq!(whole(b"*0\r\n").kind, Kind::Array);
        let nested = b"*2\r\n*2\r\n:1\r\n$-1\r\n$2\r\nhi\r\n+after\r\n";
        assert_eq!(
            whole(nested),
            Reply {
                len: nested.len() - 8,
                kind: Kind::Array
            }
        );
        // A bulk string may hold CRLF: its length frames it.
        assert_eq!(whole(b"$4\r\n\r\n\r\n\r\n").len, 10);
    }

    #[test]
    fn errors_by_their_first_word() {
        let word = |b: &[u8]| match whole(b).kind {
            Kind::Error(i) => ERROR_WORDS[usize::from(i)],
            k => panic!("{k:?}"),
        };
        assert_eq!(word(b"-ERR unknown command 'FOO'\r\n"), "ERR");
        assert_eq!(word(b"-WRONGTYPE Operation against a key\r\n"), "WRONGTYPE");
        assert_eq!(word(b"-OOM command not allowed\r\n"), "OOM");
        assert_eq!(word(b"-MOVED 3999 127.0.0.1:6381\r\n"), "MOVED");
        assert_eq!(word(b"-BUSY\r\n"), "BUSY");
        assert_eq!(word(b"-Error of a module\r\n"), "other");
        assert_eq!(word(MAX_CLIENTS), "ERR");
    }

    #[test]
    fn what_is_not_resp_is_named() {
        assert_eq!(frame(b"PONG\r\n"), Err(RespError::Type(b'P')));
        assert_eq!(frame(b"$x\r\n"), Err(RespError::Number));
        assert_eq!(frame(b"$-2\r\n"), Err(RespError::Number));
        assert_eq!(frame(b":\r\n"), Err(RespError::Number));
        assert_eq!(frame(b"$3\r\nabcd\r\n"), Err(RespError::Line));
        assert_eq!(frame(b"+OK\rX"), Err(RespError::Line));
        assert_eq!(frame(b"$536870913\r\n"), Err(RespError::TooLong));
        let long = [b"+".as_slice(), &vec![b'a'; MAX_LINE + 1]].concat();
        assert_eq!(frame(&long), Err(RespError::TooLong));
        assert_eq!(frame(b"*4294967296\r\n"), Err(RespError::TooLong));
    }

    #[test]
    fn commands_split_as_redis_cli_does() {
        let words = |l| split_command(l).unwrap();
        assert_eq!(words("GET key:{n}"), [b"GET".to_vec(), b"key:{n}".to_vec()]);
        assert_eq!(
            words(r#"SET k "a b\"\x41\n""#),
            [b"SET".to_vec(), b"k".to_vec(), b"a b\"A\n".to_vec()]
        );
        assert_eq!(
            words(r"SET k 'it\'s \n'"),
            [b"SET".to_vec(), b"k".to_vec(), b"it's \\n".to_vec()]
        );
        assert!(words("  ").is_empty());
        assert!(split_command("SET k \"open").is_err());
        assert!(split_command("SET k \"a\"b").is_err());
        assert!(split_command(r#"SET k "\x4""#).is_err());
    }

    #[test]
    fn a_command_is_an_array_of_bulk_strings() {
        let mut out = Vec::new();
        build_command(&["SET", "k", ""], &mut out);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
        // A server reads a command as a reply is framed: an array.
        assert_eq!(
            whole(&out),
            Reply {
                len: out.len(),
                kind: Kind::Array
            }
        );
    }

    /// A reply built from a tree of values, and its top-level kind.
    fn value() -> impl Strategy<Value = Vec<u8>> {
        let leaf = prop_oneof![
            "[a-zA-Z ]{0,12}".prop_map(|s| format!("+{s}\r\n").into_bytes()),
            "[A-Z]{1,6}( [a-z]{0,8})?".prop_map(|s| format!("-{s}\r\n").into_bytes()),
            any::<i64>().prop_map(|n| format!(":{n}\r\n").into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(|b| {
                let mut v = format!("${}\r\n", b.len()).into_bytes();
                v.extend_from_slice(&b);
                v.extend_from_slice(b"\r\n");
                v
            }),
            Just(b"$-1\r\n".to_vec()),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            proptest::collection::vec(inner, 0..6).prop_map(|items| {
                let mut v = format!("*{}\r\n", items.len()).into_bytes();
                for i in items {
                    v.extend_from_slice(&i);
                }
                v
            })
        })
    }

    proptest! {
        #[test]
        fn a_reply_is_framed_at_its_end_and_not_before(
            replies in proptest::collection::vec(value(), 1..4)
        ) {
            let stream = replies.concat();
            let first = replies[0].len();
            prop_assert_eq!(frame(&stream).unwrap().map(|r| r.len), Some(first));
            for cut in 0..first {
                prop_assert_eq!(frame(&stream[..cut]), Ok(None), "cut at {}", cut);
            }
        }

        #[test]
        fn no_input_panics(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(Some(r)) = frame(&b) {
                prop_assert!(r.len <= b.len());
            }
        }
    }
}
