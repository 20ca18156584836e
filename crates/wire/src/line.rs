//! Line framing and the ping/pong protocol: each line `ping<rest>` is
//! answered `pong<rest>`, so a client can carry a sequence number or a
//! timestamp in `<rest>`; any other line is answered `error\n`.

/// Reply to a line that is not a ping.
pub const ERROR_REPLY: &[u8] = b"error\n";

/// Length of the first complete line in `buf`, its `\n` included.
pub fn find_line(buf: &[u8]) -> Option<usize> {
    buf.iter().position(|&b| b == b'\n').map(|i| i + 1)
}

/// Appends the reply to one line (with or without its final `\n`).
/// Returns true when the line was a ping.
pub fn pong(line: &[u8], out: &mut Vec<u8>) -> bool {
    match line.strip_prefix(b"ping") {
        Some(rest) => {
            out.extend_from_slice(b"pong");
            out.extend_from_slice(rest);
            true
        }
        None => {
            out.extend_from_slice(ERROR_REPLY);
            false
        }
    }
}

/// Appends `ping <seq>\n`.
pub fn build_ping(seq: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(b"ping ");
    push_decimal(seq, out);
    out.push(b'\n');
}

/// The sequence number of a `pong <seq>\n` line, if it is one.
pub fn parse_pong(line: &[u8]) -> Option<u64> {
    let rest = line.strip_prefix(b"pong ")?;
    let digits = rest.strip_suffix(b"\n").unwrap_or(rest);
    let digits = digits.strip_suffix(b"\r").unwrap_or(digits);
    if digits.is_empty() || digits.len() > 20 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    digits.iter().try_fold(0u64, |acc, &d| {
        acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

fn push_decimal(mut v: u64, out: &mut Vec<u8>) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn answer(stream: &[u8], split: usize) -> Vec<u8> {
        let mut pending = Vec::new();
        let mut out = Vec::new();
        for part in [&stream[..split], &stream[split..]] {
            pending.extend_from_slice(part);
            while let Some(n) = find_line(&pending) {
                pong(&pending[..n], &mut out);
                pending.drain(..n);
            }
        }
        out
    }

    #[test]
    fn ping_lines_split_at_every_point() {
        let stream = b"ping 1\nping\r\nhello\nping 3 extra\n";
        for split in 0..=stream.len() {
            assert_eq!(
                answer(stream, split),
                b"pong 1\npong\r\nerror\npong 3 extra\n",
                "split at {split}"
            );
        }
    }

    #[test]
    fn ping_round_trip() {
        let mut out = Vec::new();
        build_ping(12345, &mut out);
        assert_eq!(out, b"ping 12345\n");
        let mut reply = Vec::new();
        assert!(pong(&out, &mut reply));
        assert_eq!(parse_pong(&reply), Some(12345));
        assert_eq!(parse_pong(b"pong x\n"), None);
        assert_eq!(parse_pong(b"error\n"), None);
    }

    proptest! {
        #[test]
        fn any_split_answers_the_same(
            seqs in proptest::collection::vec(any::<u64>(), 1..8),
            split in any::<prop::sample::Index>(),
        ) {
            let mut stream = Vec::new();
            for &s in &seqs {
                build_ping(s, &mut stream);
            }
            let out = answer(&stream, split.index(stream.len() + 1));
            let got: Vec<u64> = out
                .split_inclusive(|&b| b == b'\n')
                .map(|l| parse_pong(l).unwrap())
                .collect();
            prop_assert_eq!(got, seqs);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut out = Vec::new();
            if let Some(n) = find_line(&bytes) {
                pong(&bytes[..n], &mut out);
            }
            let _ = parse_pong(&bytes);
        }
    }
}
