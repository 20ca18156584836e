//! Byte strings written on a command line: `\r \n \t \0 \\ \xNN`.

use thiserror::Error;

/// A malformed escape, with its byte offset in the input.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EscapeError {
    #[error("unknown escape \\{1} at offset {0} (use \\r \\n \\t \\0 \\\\ or \\xNN)")]
    Unknown(usize, char),
    #[error("\\x at offset {0} needs two hex digits, as in \\x0a")]
    BadHex(usize),
    #[error("lone backslash at the end (write \\\\ for a backslash)")]
    Trailing,
}

/// Turns `hello\r\n` (as typed) into the bytes it stands for.
pub fn unescape(s: &str) -> Result<Vec<u8>, EscapeError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        let Some(&c) = bytes.get(i + 1) else {
            return Err(EscapeError::Trailing);
        };
        match c {
            b'r' => out.push(b'\r'),
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'0' => out.push(0),
            b'\\' => out.push(b'\\'),
            b'x' => {
                let hex = bytes
                    .get(i + 2..i + 4)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or(EscapeError::BadHex(i))?;
                out.push(hex);
                i += 2;
            }
            _ => {
                let ch = s[i + 1..].chars().next().unwrap_or('?');
                return Err(EscapeError::Unknown(i, ch));
            }
        }
        i += 2;
    }
    Ok(out)
}

/// The inverse of [`unescape`]: printable ASCII as is, the rest escaped.
pub fn escape(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            b'\\' => s.push_str("\\\\"),
            b'\r' => s.push_str("\\r"),
            b'\n' => s.push_str("\\n"),
            b'\t' => s.push_str("\\t"),
            0x20..=0x7e => s.push(b as char),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(unescape(&escape(&all)).unwrap(), all);
        assert_eq!(escape(b"GET /\r\n"), "GET /\\r\\n");
    }

    #[test]
    fn escapes() {
        assert_eq!(unescape(r"a\r\n\t\x41\\\0").unwrap(), b"a\r\n\tA\\\0");
        assert_eq!(unescape("plain").unwrap(), b"plain");
    }

    #[test]
    fn bad_escapes() {
        assert_eq!(unescape(r"\q"), Err(EscapeError::Unknown(0, 'q')));
        assert_eq!(unescape(r"ab\x4"), Err(EscapeError::BadHex(2)));
        assert_eq!(unescape(r"ab\xzz"), Err(EscapeError::BadHex(2)));
        assert_eq!(unescape("ab\\"), Err(EscapeError::Trailing));
        assert_eq!(unescape("\\é"), Err(EscapeError::Unknown(0, 'é')));
    }
}
