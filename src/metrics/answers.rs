//! What an answer said, judged: which answers are successes (the
//! protocol's own, --ok-rcodes, --ok-status), the failures by name, and
//! the names of RCODEs and query types in reports.

use super::*;

/// Answers that count as successes beyond each protocol's own (DNS
/// NOERROR and NXDOMAIN, HTTP 2xx and 3xx, an echo that validates, a pong
/// with its number): --ok-rcodes and --ok-status.
#[derive(Debug, Clone, Copy, Default)]
pub struct OkAnswers<'a> {
    pub rcodes: &'a [u8],
    pub status: &'a [u16],
}

/// [`OkAnswers`] owned, for the hot path: whether one answer failed.
#[derive(Debug, Clone, Default)]
pub struct OkMask {
    /// Bit r: RCODE r is a success (NOERROR and NXDOMAIN always).
    rcodes: u16,
    status: Vec<u16>,
}

impl OkMask {
    pub fn new(ok: OkAnswers) -> OkMask {
        let rcodes = (0..16u16)
            .filter(|&r| ok.rcode(usize::from(r)))
            .fold(0, |m, r| m | 1 << r);
        OkMask {
            rcodes,
            status: ok.status.to_vec(),
        }
    }

    /// Whether an answer with this RCODE failed.
    #[inline]
    pub fn rcode_failed(&self, rcode: u8) -> bool {
        self.rcodes & (1 << (rcode & 15)) == 0
    }

    /// Whether an answer with this HTTP status failed.
    #[inline]
    pub fn status_failed(&self, code: u16) -> bool {
        !(200..400).contains(&code) && !self.status.contains(&code)
    }
}

impl OkAnswers<'_> {
    fn rcode(&self, r: usize) -> bool {
        r == 0 || r == 3 || self.rcodes.iter().any(|&o| usize::from(o) == r)
    }

    fn status(&self, c: usize) -> bool {
        (200..400).contains(&c) || self.status.iter().any(|&o| usize::from(o) == c)
    }
}

impl StatusCounts {
    /// Answers that were successes.
    pub fn successes(&self, ok: OkAnswers) -> u64 {
        let rcodes: u64 = (0..16)
            .filter(|&r| ok.rcode(r))
            .map(|r| self.rcodes[r])
            .sum();
        let http: u64 = (0..self.http.len())
            .filter(|&c| ok.status(c))
            .map(|c| self.http[c])
            .sum();
        let redis: u64 = self.redis[..wire::resp::VALUE_KINDS.len()].iter().sum();
        self.ok + self.echoed + rcodes + http + redis
    }

    /// Answers that were failures, by what they said: an RCODE's name,
    /// `http_<code>`, `mismatch`, `redis_<error word>`.
    pub fn failures(&self, ok: OkAnswers) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        let mut rcodes = [0; 16];
        for (r, n) in rcodes.iter_mut().enumerate() {
            if !ok.rcode(r) {
                *n = self.rcodes[r];
            }
        }
        m.extend(named_rcodes(&rcodes));
        for (c, &n) in self.http.iter().enumerate() {
            if n > 0 && !ok.status(c) {
                m.insert(format!("http_{c}"), n);
            }
        }
        if self.mismatch > 0 {
            m.insert("mismatch".into(), self.mismatch);
        }
        let values = wire::resp::VALUE_KINDS.len();
        for (word, &n) in wire::resp::ERROR_WORDS.iter().zip(&self.redis[values..]) {
            if n > 0 {
                m.insert(format!("{REDIS_FAILED}{word}"), n);
            }
        }
        m
    }
}

/// The prefix of a Redis error reply's first word in `failed_answers`
/// (`redis_WRONGTYPE`).
pub const REDIS_FAILED: &str = "redis_";

/// Code of an RCODE name as [`StatusCounts::rcode_map`] writes it
/// (`REFUSED`, `RCODE9`), or a number.
pub fn rcode_of(name: &str) -> Option<usize> {
    match name.to_ascii_uppercase().as_str() {
        "NOERROR" => Some(0),
        "FORMERR" => Some(1),
        "SERVFAIL" => Some(2),
        "NXDOMAIN" => Some(3),
        "NOTIMP" => Some(4),
        "REFUSED" => Some(5),
        n => n
            .strip_prefix("RCODE")
            .unwrap_or(n)
            .parse()
            .ok()
            .filter(|&c: &usize| c < 16),
    }
}

/// The name of a query type in reports: its mnemonic or `TYPEnnn`.
pub fn qtype_name(t: u16) -> String {
    match wire::dns::rtype_name(t) {
        Some(m) => m.to_string(),
        None => format!("TYPE{t}"),
    }
}

/// Non-zero RCODE counts by name (`RCODEn` for the unnamed ones).
pub(super) fn named_rcodes(counts: &[u64; 16]) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for (code, &n) in counts.iter().enumerate() {
        if n > 0 {
            let name = wire::dns::rcode_name(code as u8);
            let key = if name == "other" {
                format!("RCODE{code}")
            } else {
                name.to_string()
            };
            *m.entry(key).or_default() += n;
        }
    }
    m
}
