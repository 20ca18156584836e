//! --proto dns: DNS queries, encoded once at start: each query copies its
//! question (name, type, class in wire format) behind a fresh header and
//! fills its `{rand}` labels in place; over TCP behind a 2-byte length,
//! over UDP as a datagram. Responses are matched by ID, and their RCODE is
//! counted per query type. With no traffic, a DNS query is the probe.

use rand::Rng;
use rand_pcg::Pcg64Mcg;

use super::{Frame, Status};
use crate::scenario::RAND_LABEL_LEN;

/// Its --proto value, and its name in the per-query log.
pub const NAME: &str = "dns";
/// The protocol in a word ("a DNS reply", "DNS queries").
pub const WORD: &str = "DNS";

/// The queries in a few words, for a report's table.
pub fn describe(names: &[String], qtypes: &[u16]) -> String {
    if names.len() > 1 || !qtypes.is_empty() {
        format!("DNS, {} names from a query file", names.len())
    } else {
        format!("DNS, {}", names.first().map_or("", String::as_str))
    }
}

/// The DNS queries of a run, encoded once: each query copies its question
/// behind a fresh header.
pub struct DnsQueries {
    /// Every question (name, type, class) in wire format, one after another.
    pub(super) bytes: Vec<u8>,
    questions: Vec<Question>,
    /// Offsets inside their question of the `{rand}` labels to fill, for
    /// all questions (each question knows its run of entries).
    rand_at: Vec<u16>,
    /// The distinct query types in slot order: RCODEs are counted per slot.
    pub qtypes: Vec<u16>,
    edns: Option<wire::dns::Edns>,
}

/// One question of [`DnsQueries`].
pub(super) struct Question {
    start: u32,
    len: u16,
    /// Index of its type in `qtypes`.
    pub(super) slot: u8,
    /// Its entries in `rand_at`: first, count.
    rand_first: u32,
    rand_count: u8,
}

impl DnsQueries {
    /// Names and types were checked when the scenario was made.
    pub(super) fn new(
        qtype: u16,
        names: &[String],
        qtypes: &[u16],
        edns: Option<wire::dns::Edns>,
    ) -> Self {
        let mut d = DnsQueries {
            bytes: Vec::new(),
            questions: Vec::with_capacity(names.len()),
            rand_at: Vec::new(),
            qtypes: Vec::new(),
            edns,
        };
        let placeholder = "x".repeat(RAND_LABEL_LEN);
        for (i, name) in names.iter().enumerate() {
            let t = qtypes.get(i).copied().unwrap_or(qtype);
            let slot = match d.qtypes.iter().position(|&q| q == t) {
                Some(s) => s,
                None => {
                    d.qtypes.push(t);
                    d.qtypes.len() - 1
                }
            };
            let start = d.bytes.len();
            let rand_first = d.rand_at.len();
            let filled = if name.contains("{rand}") {
                // In wire form every character sits one byte after its
                // place in the text (a label's length byte stands where
                // the dot before it was).
                let mut text = String::with_capacity(name.len());
                let mut rest = name.as_str();
                while let Some(at) = rest.find("{rand}") {
                    text.push_str(&rest[..at]);
                    d.rand_at.push((text.len() + 1) as u16);
                    text.push_str(&placeholder);
                    rest = &rest[at + "{rand}".len()..];
                }
                text.push_str(rest);
                text
            } else {
                name.clone()
            };
            if wire::dns::encode_question(&filled, t, &mut d.bytes).is_err() {
                // Unreachable after the scenario's checks: ask for the
                // root rather than send garbage.
                d.rand_at.truncate(rand_first);
                let _ = wire::dns::encode_question(".", t, &mut d.bytes);
            }
            d.questions.push(Question {
                start: start as u32,
                len: (d.bytes.len() - start) as u16,
                slot: slot as u8,
                rand_first: rand_first as u32,
                rand_count: (d.rand_at.len() - rand_first) as u8,
            });
        }
        d
    }

    pub(super) fn question(&self, n: u64) -> &Question {
        &self.questions[(n % self.questions.len() as u64) as usize]
    }

    /// Appends query `n` (without a TCP length) and returns its ID.
    pub(super) fn encode(&self, n: u64, rng: &mut Pcg64Mcg, out: &mut Vec<u8>) -> u64 {
        let id = n as u16;
        let q = self.question(n);
        let at = out.len() + wire::dns::HEADER_LEN;
        let start = q.start as usize;
        wire::dns::build_query_from(
            id,
            &self.bytes[start..start + usize::from(q.len)],
            self.edns,
            out,
        );
        let first = q.rand_first as usize;
        for &off in &self.rand_at[first..first + usize::from(q.rand_count)] {
            let label = &mut out[at + usize::from(off)..][..RAND_LABEL_LEN];
            for b in label {
                *b = b"abcdefghijklmnopqrstuvwxyz0123456789"[rng.random_range(0..36)];
            }
        }
        u64::from(id)
    }
}

impl DnsQueries {
    /// Appends query `n` as a TCP frame; returns its ID.
    #[inline]
    pub(super) fn encode_frame(&self, n: u64, rng: &mut Pcg64Mcg, out: &mut Vec<u8>) -> u64 {
        let at = wire::dns::begin_tcp_frame(out);
        let id = self.encode(n, rng, out);
        wire::dns::end_tcp_frame(out, at);
        id
    }

    /// Frames the TCP frame at the front of `buf`.
    #[inline]
    pub(super) fn decode(&self, buf: &[u8]) -> Frame {
        let Some(f) = wire::dns::tcp_frame(buf) else {
            return Frame::Incomplete;
        };
        dns_frame(f.message(buf), f.frame_len)
    }
}

/// A DNS message of a `len`-byte frame: matched by its ID; a query that
/// came back (QR clear) is "echoed".
pub(super) fn dns_frame(message: &[u8], len: usize) -> Frame {
    match wire::dns::response_info(message) {
        Ok(info) => Frame::Response {
            len,
            key: Some(u64::from(info.id)),
            status: if info.is_response {
                Status::Rcode {
                    rcode: info.rcode,
                    truncated: info.truncated,
                }
            } else {
                Status::Echoed
            },
            close: false,
        },
        Err(_) => Frame::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::super::*;
    use crate::scenario::RAND_LABEL_LEN;

    fn dns(names: &[&str], qtypes: &[u16], edns: Option<u16>) -> Codec {
        Codec::new(
            &Query::Dns {
                qtype: 1,
                names: names.iter().map(|n| n.to_string()).collect(),
                qtypes: qtypes.to_vec(),
                edns,
                dnssec_ok: edns.is_some(),
            },
            &[],
            false,
        )
    }

    #[test]
    fn dns_queries_take_each_line_its_name_and_type() {
        use hickory_proto::op::Message;
        use hickory_proto::serialize::binary::BinDecodable;
        let c = dns(&["a.example", "b.example", "c.example"], &[1, 28, 1], None);
        assert_eq!(c.qtypes(), [1, 28]);
        let Codec::Dns(d) = &c else { panic!() };
        for n in 0..6u64 {
            let mut out = Vec::new();
            d.encode(n, &mut rng(), &mut out);
            let m = Message::from_bytes(&out).unwrap();
            let want = ["a.example.", "b.example.", "c.example."][n as usize % 3];
            assert_eq!(m.queries[0].name().to_ascii(), want);
            let t = u16::from(m.queries[0].query_type());
            assert_eq!(t, [1, 28, 1][n as usize % 3]);
            assert_eq!(c.qtypes()[usize::from(c.qtype_slot(n))], t);
            assert_eq!(m.id, n as u16);
            assert!(m.edns.is_none());
        }
    }

    #[test]
    fn dns_rand_labels_are_filled_in_place() {
        use hickory_proto::op::Message;
        use hickory_proto::serialize::binary::BinDecodable;
        let c = dns(&["x{rand}.{rand}.example"], &[], Some(4096));
        let mut r = rng();
        let mut seen = Vec::new();
        for n in 0..2 {
            let mut out = Vec::new();
            c.encode(n, 0, 0, &mut r, &mut out);
            let m = Message::from_bytes(&out[2..]).unwrap();
            let name = m.queries[0].name().to_ascii();
            let labels: Vec<&str> = name.split('.').collect();
            assert_eq!(labels.len(), 4, "{name}");
            assert_eq!(labels[0].len(), 1 + RAND_LABEL_LEN, "{name}");
            assert!(labels[0].starts_with('x'));
            assert_eq!(labels[1].len(), RAND_LABEL_LEN);
            assert!(!name.contains('{'));
            let e = m.edns.expect("OPT");
            assert_eq!(e.max_payload(), 4096);
            assert!(e.flags().dnssec_ok);
            seen.push(name);
        }
        assert_ne!(seen[0], seen[1], "fresh labels each query");
    }

    #[test]
    fn dns_names_with_several_rand_labels_stay_valid_and_random() {
        use hickory_proto::op::Message;
        use hickory_proto::serialize::binary::BinDecodable;
        let names = ["{rand}", "a{rand}b.{rand}.{rand}x.example", "plain.example"];
        let c = dns(&names, &[], None);
        let Codec::Dns(d) = &c else { panic!() };
        let template = d.bytes.clone();
        let mut r = rng();
        let mut seen = std::collections::HashSet::new();
        for n in 0..300u64 {
            let mut out = Vec::new();
            d.encode(n, &mut r, &mut out);
            let m = Message::from_bytes(&out).unwrap();
            let name = m.queries[0].name().to_ascii();
            let labels: Vec<&str> = name.trim_end_matches('.').split('.').collect();
            let rand = |l: &str| {
                l.len() == RAND_LABEL_LEN
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            };
            match n % 3 {
                0 => assert!(labels.len() == 1 && rand(labels[0]), "{name}"),
                1 => {
                    assert_eq!(labels.len(), 4, "{name}");
                    let l0 = labels[0];
                    assert!(l0.starts_with('a') && l0.ends_with('b'), "{name}");
                    assert!(rand(&l0[1..l0.len() - 1]), "{name}");
                    assert!(rand(labels[1]), "{name}");
                    assert!(labels[2].ends_with('x') && rand(&labels[2][..RAND_LABEL_LEN]));
                    assert_eq!(labels[3], "example");
                }
                _ => assert_eq!(name, "plain.example."),
            }
            if n % 3 != 2 {
                assert!(seen.insert(name), "a name came twice");
            }
        }
        // Filled in the query, not in the questions encoded at start.
        assert_eq!(d.bytes, template);
        assert!(template
            .windows(RAND_LABEL_LEN)
            .any(|w| w == [b'x'; RAND_LABEL_LEN]));
    }

    #[test]
    fn dns_query_echoed_back_is_echoed() {
        let c = dns(&["{rand}.example.com"], &[], None);
        assert!(matches!(
            round_trip(&c, 3),
            Frame::Response {
                key: Some(3),
                status: Status::Echoed,
                ..
            }
        ));
    }
}
