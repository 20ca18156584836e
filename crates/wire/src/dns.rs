//! DNS messages (RFC 1035) as throng needs them: TCP framing (a 2-byte
//! length prefix, RFC 1035 4.2.2), queries for the client, and the reference
//! server's answers.
//!
//! Decoding works on slices and checks every offset; names in a question are
//! never followed through compression pointers (a query's question is the
//! first name in the message, so a pointer there is malformed).

use thiserror::Error;

/// Size of the fixed DNS header.
pub const HEADER_LEN: usize = 12;
/// Longest name on the wire, terminating zero included (RFC 1035 3.1).
pub const MAX_NAME_LEN: usize = 255;
/// Longest label (RFC 1035 2.3.4).
pub const MAX_LABEL_LEN: usize = 63;
/// Largest message that fits a TCP frame.
pub const MAX_TCP_MESSAGE: usize = u16::MAX as usize;
/// UDP payload size the reference server advertises in EDNS replies
/// (the DNS flag day 2020 value).
pub const EDNS_UDP_SIZE: u16 = 1232;

/// Response codes throng names in reports.
pub mod rcode {
    pub const NOERROR: u8 = 0;
    pub const FORMERR: u8 = 1;
    pub const SERVFAIL: u8 = 2;
    pub const NXDOMAIN: u8 = 3;
    pub const NOTIMP: u8 = 4;
    pub const REFUSED: u8 = 5;
}

/// Record types throng uses by number.
pub mod rtype {
    pub const A: u16 = 1;
    pub const NS: u16 = 2;
    pub const CNAME: u16 = 5;
    pub const SOA: u16 = 6;
    pub const PTR: u16 = 12;
    pub const MX: u16 = 15;
    pub const TXT: u16 = 16;
    pub const AAAA: u16 = 28;
    pub const SRV: u16 = 33;
    pub const OPT: u16 = 41;
    pub const DS: u16 = 43;
    pub const DNSKEY: u16 = 48;
    pub const SVCB: u16 = 64;
    pub const HTTPS: u16 = 65;
    pub const ANY: u16 = 255;
    pub const CAA: u16 = 257;
}

/// Mnemonics throng reads and writes, with their numbers (any other type
/// is written `TYPEnnn`, RFC 3597).
const RTYPE_NAMES: [(&str, u16); 15] = [
    ("A", rtype::A),
    ("NS", rtype::NS),
    ("CNAME", rtype::CNAME),
    ("SOA", rtype::SOA),
    ("PTR", rtype::PTR),
    ("MX", rtype::MX),
    ("TXT", rtype::TXT),
    ("AAAA", rtype::AAAA),
    ("SRV", rtype::SRV),
    ("DS", rtype::DS),
    ("DNSKEY", rtype::DNSKEY),
    ("SVCB", rtype::SVCB),
    ("HTTPS", rtype::HTTPS),
    ("ANY", rtype::ANY),
    ("CAA", rtype::CAA),
];

/// Class IN.
pub const CLASS_IN: u16 = 1;

const FLAG_QR: u16 = 0x8000;
const FLAG_AA: u16 = 0x0400;
const FLAG_TC: u16 = 0x0200;
const FLAG_RD: u16 = 0x0100;

/// Why a message could not be decoded or encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum DnsError {
    #[error("message shorter than the 12-byte DNS header")]
    ShortHeader,
    #[error("question section is truncated")]
    Truncated,
    #[error("label longer than 63 bytes")]
    LabelTooLong,
    #[error("name longer than 255 bytes")]
    NameTooLong,
    #[error("compression pointer or reserved label type in a question")]
    BadLabelType,
    #[error("empty label inside a name")]
    EmptyLabel,
    #[error(
        "character {0:?} in a name: names are printable ASCII without spaces or backslash escapes"
    )]
    BadCharacter(char),
    #[error("expected exactly one question, found {0}")]
    QuestionCount(u16),
}

/// The fixed 12-byte header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub id: u16,
    pub flags: u16,
    pub qdcount: u16,
    pub ancount: u16,
    pub nscount: u16,
    pub arcount: u16,
}

impl Header {
    /// Reads the header at the front of `msg`.
    pub fn parse(msg: &[u8]) -> Result<Header, DnsError> {
        if msg.len() < HEADER_LEN {
            return Err(DnsError::ShortHeader);
        }
        let w = |i: usize| u16::from_be_bytes([msg[i], msg[i + 1]]);
        Ok(Header {
            id: w(0),
            flags: w(2),
            qdcount: w(4),
            ancount: w(6),
            nscount: w(8),
            arcount: w(10),
        })
    }

    /// True for a response (QR bit set).
    pub fn is_response(&self) -> bool {
        self.flags & FLAG_QR != 0
    }

    /// The 4-bit opcode (0 = standard query).
    pub fn opcode(&self) -> u8 {
        ((self.flags >> 11) & 0xf) as u8
    }

    /// The 4-bit response code of the header (no EDNS extension).
    pub fn rcode(&self) -> u8 {
        (self.flags & 0xf) as u8
    }

    /// True when the TC (truncated) bit is set.
    pub fn truncated(&self) -> bool {
        self.flags & FLAG_TC != 0
    }

    fn write(&self, out: &mut Vec<u8>) {
        for v in [
            self.id,
            self.flags,
            self.qdcount,
            self.ancount,
            self.nscount,
            self.arcount,
        ] {
            out.extend_from_slice(&v.to_be_bytes());
        }
    }
}

/// The ID of a message, when at least two bytes are present.
pub fn message_id(msg: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes([*msg.first()?, *msg.get(1)?]))
}

/// A TCP frame found at the front of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpFrame {
    /// Bytes the frame occupies in the buffer, the 2-byte prefix included.
    pub frame_len: usize,
}

impl TcpFrame {
    /// The DNS message inside the frame (without the length prefix).
    pub fn message<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[2..self.frame_len]
    }
}

/// Finds a complete length-prefixed message at the front of `buf`;
/// `None` until all of it has arrived.
pub fn tcp_frame(buf: &[u8]) -> Option<TcpFrame> {
    let len = u16::from_be_bytes([*buf.first()?, *buf.get(1)?]) as usize;
    (buf.len() >= 2 + len).then_some(TcpFrame { frame_len: 2 + len })
}

/// A question decoded from a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Question<'a> {
    /// The name in wire format, the terminating zero included.
    pub name: &'a [u8],
    pub qtype: u16,
    pub qclass: u16,
    /// Offset in the message just past the question.
    pub end: usize,
}

/// Reads the name starting at `start`, refusing compression pointers.
/// Returns the offset just past the name.
fn name_end(msg: &[u8], start: usize) -> Result<usize, DnsError> {
    let mut pos = start;
    loop {
        let len = *msg.get(pos).ok_or(DnsError::Truncated)? as usize;
        if len & 0xc0 != 0 {
            return Err(DnsError::BadLabelType);
        }
        pos += 1 + len;
        if pos - start > MAX_NAME_LEN {
            return Err(DnsError::NameTooLong);
        }
        if len == 0 {
            return Ok(pos);
        }
    }
}

/// Decodes the single question of a query.
pub fn parse_question(msg: &[u8]) -> Result<Question<'_>, DnsError> {
    let header = Header::parse(msg)?;
    if header.qdcount != 1 {
        return Err(DnsError::QuestionCount(header.qdcount));
    }
    let name_end = name_end(msg, HEADER_LEN)?;
    let fixed = msg.get(name_end..name_end + 4).ok_or(DnsError::Truncated)?;
    Ok(Question {
        name: &msg[HEADER_LEN..name_end],
        qtype: u16::from_be_bytes([fixed[0], fixed[1]]),
        qclass: u16::from_be_bytes([fixed[2], fixed[3]]),
        end: name_end + 4,
    })
}

/// Appends `name` ("example.com", "example.com." or "." for the root) in
/// wire format. Names are read as printable ASCII: a space, a control
/// character or a non-ASCII one is a typo or a file in another format, and
/// a backslash would start an escape (RFC 1035 5.1) that throng does not
/// decode, so each of these is refused rather than sent as it stands.
pub fn encode_name(name: &str, out: &mut Vec<u8>) -> Result<(), DnsError> {
    if let Some(c) = name.chars().find(|&c| !c.is_ascii_graphic() || c == '\\') {
        return Err(DnsError::BadCharacter(c));
    }
    let start = out.len();
    let trimmed = name.strip_suffix('.').unwrap_or(name);
    if !trimmed.is_empty() {
        for label in trimmed.split('.') {
            if label.is_empty() {
                out.truncate(start);
                return Err(DnsError::EmptyLabel);
            }
            if label.len() > MAX_LABEL_LEN {
                out.truncate(start);
                return Err(DnsError::LabelTooLong);
            }
            out.push(label.len() as u8);
            out.extend_from_slice(label.as_bytes());
        }
    }
    out.push(0);
    if out.len() - start > MAX_NAME_LEN {
        out.truncate(start);
        return Err(DnsError::NameTooLong);
    }
    Ok(())
}

/// Appends a question: `name` in wire format, `qtype`, class IN. A client
/// encodes each of its questions once and copies the bytes into every
/// query ([`build_query_from`]).
pub fn encode_question(name: &str, qtype: u16, out: &mut Vec<u8>) -> Result<(), DnsError> {
    encode_name(name, out)?;
    out.extend_from_slice(&qtype.to_be_bytes());
    out.extend_from_slice(&CLASS_IN.to_be_bytes());
    Ok(())
}

/// EDNS(0) in a query (RFC 6891): the UDP payload size the client can
/// take, and the DO bit asking for DNSSEC records (RFC 3225).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edns {
    pub udp_size: u16,
    pub dnssec_ok: bool,
}

/// Bytes of the OPT record [`encode_opt`] appends.
pub const OPT_LEN: usize = 11;

/// The DO bit in the OPT record's flags.
const EDNS_DO: u16 = 0x8000;

/// Appends an OPT pseudo-record: root owner, the payload size in the class
/// field, extended RCODE 0, version 0, the flags, no options.
pub fn encode_opt(edns: Edns, out: &mut Vec<u8>) {
    let flags = if edns.dnssec_ok { EDNS_DO } else { 0 };
    out.push(0);
    out.extend_from_slice(&rtype::OPT.to_be_bytes());
    out.extend_from_slice(&edns.udp_size.to_be_bytes());
    out.extend_from_slice(&[0, 0]); // extended RCODE, version
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&[0, 0]); // RDLENGTH: no options
}

/// The header of a standard recursive query of one question.
fn query_header(id: u16, arcount: u16) -> Header {
    Header {
        id,
        flags: FLAG_RD,
        qdcount: 1,
        ancount: 0,
        nscount: 0,
        arcount,
    }
}

/// Appends a standard recursive query with `id` asking `question` (bytes
/// made by [`encode_question`]), with an OPT record when `edns` is given.
pub fn build_query_from(id: u16, question: &[u8], edns: Option<Edns>, out: &mut Vec<u8>) {
    query_header(id, u16::from(edns.is_some())).write(out);
    out.extend_from_slice(question);
    if let Some(e) = edns {
        encode_opt(e, out);
    }
}

/// Starts a TCP frame: a length prefix to fill with [`end_tcp_frame`] once
/// the message is in. Returns where the frame starts.
pub fn begin_tcp_frame(out: &mut Vec<u8>) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0, 0]);
    at
}

/// Fills the length prefix of the frame begun at `at`.
pub fn end_tcp_frame(out: &mut [u8], at: usize) {
    let len = (out.len() - at - 2) as u16;
    out[at..at + 2].copy_from_slice(&len.to_be_bytes());
}

/// Appends a standard recursive query for (`name`, `qtype`, IN) with `id`.
pub fn build_query(id: u16, name: &str, qtype: u16, out: &mut Vec<u8>) -> Result<(), DnsError> {
    let start = out.len();
    query_header(id, 0).write(out);
    if let Err(e) = encode_question(name, qtype, out) {
        out.truncate(start);
        return Err(e);
    }
    Ok(())
}

/// Appends a query as a TCP frame (length prefix filled in afterwards).
pub fn build_tcp_query(id: u16, name: &str, qtype: u16, out: &mut Vec<u8>) -> Result<(), DnsError> {
    let start = begin_tcp_frame(out);
    if let Err(e) = build_query(id, name, qtype, out) {
        out.truncate(start);
        return Err(e);
    }
    end_tcp_frame(out, start);
    Ok(())
}

/// How the reference server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answerer {
    /// Address given in every A answer.
    pub a: [u8; 4],
    /// TTL of that answer, in seconds.
    pub ttl: u32,
}

/// The transport a message came over; it changes how a response that was
/// sent to the server is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Over TCP a misdirected response gets FORMERR: the peer is a client.
    Tcp,
    /// Over UDP it is dropped: answering responses invites reply loops
    /// between two servers (and reflection).
    Udp,
}

/// What [`Answerer::respond`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// An answer (NOERROR, with or without records) was appended.
    Answered,
    /// A FORMERR or NOTIMP reply was appended.
    Rejected(u8),
    /// Nothing was appended: a response arrived over UDP.
    Ignored,
}

impl Answerer {
    /// Appends the reply to `query`. Errors only when not even the header
    /// can be read; the caller then drops the datagram or the connection.
    pub fn respond(
        &self,
        query: &[u8],
        transport: Transport,
        out: &mut Vec<u8>,
    ) -> Result<Outcome, DnsError> {
        let h = Header::parse(query)?;
        let opcode_bits = h.flags & 0x7800;
        let reply_flags = FLAG_QR | opcode_bits | (h.flags & FLAG_RD);
        if h.is_response() {
            if transport == Transport::Udp {
                return Ok(Outcome::Ignored);
            }
            reject(h.id, reply_flags, rcode::FORMERR, out);
            return Ok(Outcome::Rejected(rcode::FORMERR));
        }
        if h.opcode() != 0 {
            reject(h.id, reply_flags, rcode::NOTIMP, out);
            return Ok(Outcome::Rejected(rcode::NOTIMP));
        }
        let q = match parse_question(query) {
            Ok(q) => q,
            Err(_) => {
                reject(h.id, reply_flags, rcode::FORMERR, out);
                return Ok(Outcome::Rejected(rcode::FORMERR));
            }
        };
        let edns = has_opt(query, &h, q.end);
        let answer = q.qtype == rtype::A && q.qclass == CLASS_IN;
        Header {
            id: h.id,
            flags: reply_flags | FLAG_AA,
            qdcount: 1,
            ancount: answer as u16,
            nscount: 0,
            arcount: edns as u16,
        }
        .write(out);
        out.extend_from_slice(&query[HEADER_LEN..q.end]);
        if answer {
            // Name: pointer to the question's name at offset 12.
            out.extend_from_slice(&[0xc0, HEADER_LEN as u8]);
            out.extend_from_slice(&rtype::A.to_be_bytes());
            out.extend_from_slice(&CLASS_IN.to_be_bytes());
            out.extend_from_slice(&self.ttl.to_be_bytes());
            out.extend_from_slice(&4u16.to_be_bytes());
            out.extend_from_slice(&self.a);
        }
        if edns {
            out.push(0); // root name
            out.extend_from_slice(&rtype::OPT.to_be_bytes());
            out.extend_from_slice(&EDNS_UDP_SIZE.to_be_bytes());
            out.extend_from_slice(&[0, 0, 0, 0]); // ext rcode, version, flags
            out.extend_from_slice(&[0, 0]); // no options
        }
        Ok(Outcome::Answered)
    }
}

fn reject(id: u16, flags: u16, rcode: u8, out: &mut Vec<u8>) {
    Header {
        id,
        flags: flags | rcode as u16,
        qdcount: 0,
        ancount: 0,
        nscount: 0,
        arcount: 0,
    }
    .write(out);
}

/// True when the first additional record right after the question is an
/// OPT record (the usual layout of a query with EDNS).
fn has_opt(msg: &[u8], h: &Header, question_end: usize) -> bool {
    if h.ancount != 0 || h.nscount != 0 || h.arcount == 0 {
        return false;
    }
    msg.get(question_end..question_end + 3)
        .is_some_and(|rr| rr[0] == 0 && u16::from_be_bytes([rr[1], rr[2]]) == rtype::OPT)
}

/// What a client needs from a response: which query it answers and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseInfo {
    pub id: u16,
    /// QR bit: false when an echo server sent the query back.
    pub is_response: bool,
    pub rcode: u8,
    pub truncated: bool,
    pub answers: u16,
}

/// Reads the header fields a client counts.
pub fn response_info(msg: &[u8]) -> Result<ResponseInfo, DnsError> {
    let h = Header::parse(msg)?;
    Ok(ResponseInfo {
        id: h.id,
        is_response: h.is_response(),
        rcode: h.rcode(),
        truncated: h.truncated(),
        answers: h.ancount,
    })
}

/// Name of a response code, for reports.
pub fn rcode_name(rcode: u8) -> &'static str {
    match rcode {
        rcode::NOERROR => "NOERROR",
        rcode::FORMERR => "FORMERR",
        rcode::SERVFAIL => "SERVFAIL",
        rcode::NXDOMAIN => "NXDOMAIN",
        rcode::NOTIMP => "NOTIMP",
        rcode::REFUSED => "REFUSED",
        _ => "other",
    }
}

/// Record type from its mnemonic ("A", "aaaa", any case) or number
/// ("TYPE65", "65").
pub fn rtype_from_name(name: &str) -> Option<u16> {
    let known = RTYPE_NAMES
        .iter()
        .find(|(m, _)| m.eq_ignore_ascii_case(name))
        .map(|&(_, t)| t);
    known.or_else(|| {
        let digits = match name.get(..4) {
            Some(p) if p.eq_ignore_ascii_case("TYPE") => &name[4..],
            _ => name,
        };
        // Digits only: u16's parser would take a leading '+'.
        (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
            .then(|| digits.parse().ok())
            .flatten()
    })
}

/// The mnemonic of a record type throng knows by name (others: `TYPEnnn`).
pub fn rtype_name(t: u16) -> Option<&'static str> {
    RTYPE_NAMES.iter().find(|&&(_, n)| n == t).map(|&(m, _)| m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::{Message, MessageType, ResponseCode};
    use hickory_proto::rr::{RData, RecordType};
    use hickory_proto::serialize::binary::BinDecodable;

    const ANSWERER: Answerer = Answerer {
        a: [192, 0, 2, 1],
        ttl: 60,
    };

    fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
        let mut q = Vec::new();
        build_query(id, name, qtype, &mut q).unwrap();
        q
    }

    fn reply(q: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        ANSWERER.respond(q, Transport::Tcp, &mut out).unwrap();
        out
    }

    #[test]
    fn query_parses_with_hickory() {
        let q = query(0x1234, "www.example.com", rtype::AAAA);
        let m = Message::from_bytes(&q).unwrap();
        assert_eq!(m.id, 0x1234);
        assert_eq!(m.message_type, MessageType::Query);
        assert!(m.recursion_desired);
        assert_eq!(m.queries.len(), 1);
        assert_eq!(m.queries[0].name().to_ascii(), "www.example.com.");
        assert_eq!(m.queries[0].query_type(), RecordType::AAAA);
    }

    #[test]
    fn a_query_gets_one_a_record() {
        let q = query(7, "example.com", rtype::A);
        let m = Message::from_bytes(&reply(&q)).unwrap();
        assert_eq!(m.id, 7);
        assert_eq!(m.message_type, MessageType::Response);
        assert_eq!(m.response_code, ResponseCode::NoError);
        assert_eq!(m.queries[0].name().to_ascii(), "example.com.");
        assert_eq!(m.answers.len(), 1);
        assert_eq!(m.answers[0].ttl, 60);
        match &m.answers[0].data {
            RData::A(a) => assert_eq!(a.0.octets(), [192, 0, 2, 1]),
            other => panic!("expected an A record, got {other:?}"),
        }
    }

    #[test]
    fn aaaa_query_gets_noerror_without_answer() {
        let q = query(9, "example.com", rtype::AAAA);
        let m = Message::from_bytes(&reply(&q)).unwrap();
        assert_eq!(m.response_code, ResponseCode::NoError);
        assert!(m.answers.is_empty());
        assert_eq!(m.queries[0].query_type(), RecordType::AAAA);
    }

    #[test]
    fn edns_query_gets_opt_back() {
        let mut q = query(11, "example.com", rtype::A);
        q[11] = 1; // arcount
        q.extend_from_slice(&[0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0]);
        let m = Message::from_bytes(&reply(&q)).unwrap();
        let edns = m.edns.expect("OPT record in the reply");
        assert_eq!(edns.max_payload(), EDNS_UDP_SIZE);
        assert_eq!(m.answers.len(), 1);
    }

    #[test]
    fn response_is_formerr_over_tcp_and_dropped_over_udp() {
        let q = query(1, "example.com", rtype::A);
        let r = reply(&q);
        let mut out = Vec::new();
        assert_eq!(
            ANSWERER.respond(&r, Transport::Udp, &mut out),
            Ok(Outcome::Ignored)
        );
        assert!(out.is_empty());
        assert_eq!(
            ANSWERER.respond(&r, Transport::Tcp, &mut out),
            Ok(Outcome::Rejected(rcode::FORMERR))
        );
        assert_eq!(Message::from_bytes(&out).unwrap().id, 1);
    }

    #[test]
    fn bad_question_gets_formerr() {
        let mut q = query(5, "example.com", rtype::A);
        q[12] = 0xc0; // compression pointer as first label
        let mut out = Vec::new();
        assert_eq!(
            ANSWERER.respond(&q, Transport::Tcp, &mut out),
            Ok(Outcome::Rejected(rcode::FORMERR))
        );
        let m = Message::from_bytes(&out).unwrap();
        assert_eq!(m.id, 5);
        assert_eq!(m.response_code, ResponseCode::FormErr);
    }

    #[test]
    fn two_questions_get_formerr() {
        let mut q = query(5, "example.com", rtype::A);
        q[5] = 2;
        let mut out = Vec::new();
        assert_eq!(
            ANSWERER.respond(&q, Transport::Tcp, &mut out),
            Ok(Outcome::Rejected(rcode::FORMERR))
        );
    }

    #[test]
    fn truncated_question_gets_formerr() {
        let q = query(5, "example.com", rtype::A);
        for cut in HEADER_LEN..q.len() {
            let mut out = Vec::new();
            assert_eq!(
                ANSWERER.respond(&q[..cut], Transport::Tcp, &mut out),
                Ok(Outcome::Rejected(rcode::FORMERR)),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn other_opcode_gets_notimp() {
        let mut q = query(5, "example.com", rtype::A);
        q[2] |= 4 << 3; // NOTIFY
        let mut out = Vec::new();
        assert_eq!(
            ANSWERER.respond(&q, Transport::Tcp, &mut out),
            Ok(Outcome::Rejected(rcode::NOTIMP))
        );
        let m = Message::from_bytes(&out).unwrap();
        assert_eq!(m.response_code, ResponseCode::NotImp);
    }

    #[test]
    fn short_header_is_an_error() {
        for len in 0..HEADER_LEN {
            let mut out = Vec::new();
            assert_eq!(
                ANSWERER.respond(&vec![0; len], Transport::Tcp, &mut out),
                Err(DnsError::ShortHeader)
            );
            assert!(out.is_empty());
        }
    }

    #[test]
    fn encode_name_limits() {
        let mut out = Vec::new();
        assert_eq!(
            encode_name(&"a".repeat(64), &mut out),
            Err(DnsError::LabelTooLong)
        );
        assert_eq!(encode_name("a..b", &mut out), Err(DnsError::EmptyLabel));
        let long = vec!["a".repeat(63); 4].join(".");
        assert_eq!(encode_name(&long, &mut out), Err(DnsError::NameTooLong));
        assert!(out.is_empty());
        encode_name(".", &mut out).unwrap();
        assert_eq!(out, [0]);
    }

    #[test]
    fn tcp_frames_split_at_every_point() {
        let mut stream = Vec::new();
        for id in 0..3u16 {
            build_tcp_query(id, "example.org", rtype::A, &mut stream).unwrap();
        }
        for split in 0..=stream.len() {
            let ids = decode_split(&stream, split);
            assert_eq!(ids, [0, 1, 2], "split at {split}");
        }
    }

    /// Feeds `stream` in two parts, keeping the partial tail like a
    /// connection does, and returns the IDs of the frames found.
    fn decode_split(stream: &[u8], split: usize) -> Vec<u16> {
        let mut pending = Vec::new();
        let mut ids = Vec::new();
        for part in [&stream[..split], &stream[split..]] {
            pending.extend_from_slice(part);
            while let Some(f) = tcp_frame(&pending) {
                ids.push(response_info(f.message(&pending)).unwrap().id);
                pending.drain(..f.frame_len);
            }
        }
        assert!(pending.is_empty());
        ids
    }

    #[test]
    fn rtype_names() {
        assert_eq!(rtype_from_name("aaaa"), Some(rtype::AAAA));
        assert_eq!(rtype_from_name("TYPE65"), Some(65));
        assert_eq!(rtype_from_name("type65"), Some(65));
        assert_eq!(rtype_from_name("99"), Some(99));
        assert_eq!(rtype_from_name("nope"), None);
        assert_eq!(rtype_from_name("TYPE70000"), None);
        assert_eq!(rtype_from_name("TYPE"), None);
        assert_eq!(rtype_from_name("+5"), None);
        for (m, t) in RTYPE_NAMES {
            assert_eq!(rtype_from_name(m), Some(t));
            assert_eq!(rtype_name(t), Some(m));
            // The same number as hickory gives the mnemonic.
            assert_eq!(u16::from(m.parse::<RecordType>().unwrap()), t, "{m}");
        }
        assert_eq!(rtype_name(999), None);
    }

    #[test]
    fn names_with_spaces_controls_or_escapes_are_refused() {
        for (name, c) in [
            ("www.example.com A", ' '),
            ("a\\.b", '\\'),
            ("tab\there", '\t'),
            ("café.example", 'é'),
        ] {
            let mut out = Vec::new();
            assert_eq!(
                encode_name(name, &mut out),
                Err(DnsError::BadCharacter(c)),
                "{name:?}"
            );
            assert!(out.is_empty());
        }
        let mut out = Vec::new();
        encode_name("_sip._tcp.*.example-1.com", &mut out).unwrap();
    }

    fn query_with(id: u16, name: &str, qtype: u16, edns: Option<Edns>) -> Vec<u8> {
        let mut question = Vec::new();
        encode_question(name, qtype, &mut question).unwrap();
        let mut q = Vec::new();
        build_query_from(id, &question, edns, &mut q);
        q
    }

    #[test]
    fn query_from_a_question_is_the_plain_query() {
        assert_eq!(
            query_with(77, "www.example.com", rtype::MX, None),
            query(77, "www.example.com", rtype::MX)
        );
        let m = Message::from_bytes(&query_with(77, "a.b", rtype::HTTPS, None)).unwrap();
        assert!(m.edns.is_none());
        assert_eq!(m.queries[0].query_type(), RecordType::HTTPS);
    }

    #[test]
    fn edns_opt_record_parses_with_hickory() {
        for (udp_size, dnssec_ok) in [(1232, false), (4096, true), (512, true)] {
            let edns = Edns {
                udp_size,
                dnssec_ok,
            };
            let q = query_with(3, "example.org", rtype::AAAA, Some(edns));
            assert_eq!(
                q.len(),
                query(3, "example.org", rtype::AAAA).len() + OPT_LEN
            );
            let m = Message::from_bytes(&q).unwrap();
            assert_eq!(m.queries[0].query_type(), RecordType::AAAA);
            assert!(
                m.additionals.is_empty(),
                "the OPT record is not an additional"
            );
            let e = m.edns.expect("an OPT record");
            assert_eq!(e.max_payload(), udp_size);
            assert_eq!(e.version(), 0);
            assert_eq!(e.flags().dnssec_ok, dnssec_ok);
            assert_eq!(e.rcode_high(), 0);
        }
    }

    #[test]
    fn edns_query_is_answered_with_edns() {
        let edns = Edns {
            udp_size: 1232,
            dnssec_ok: true,
        };
        let q = query_with(4, "example.com", rtype::A, Some(edns));
        let m = Message::from_bytes(&reply(&q)).unwrap();
        assert_eq!(m.answers.len(), 1);
        assert!(m.edns.is_some());
    }

    #[test]
    fn tcp_frame_helpers_fill_the_length() {
        let mut out = vec![9];
        let at = begin_tcp_frame(&mut out);
        build_query_from(1, &[0, 0, 1, 0, 1], None, &mut out);
        end_tcp_frame(&mut out, at);
        let f = tcp_frame(&out[1..]).unwrap();
        assert_eq!(f.frame_len, out.len() - 1);
        assert_eq!(Message::from_bytes(f.message(&out[1..])).unwrap().id, 1);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn label() -> impl Strategy<Value = String> {
            "[a-z0-9][a-z0-9-]{0,19}"
        }

        proptest! {
            #[test]
            fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
                let mut out = Vec::new();
                let _ = ANSWERER.respond(&bytes, Transport::Tcp, &mut out);
                let _ = parse_question(&bytes);
                let _ = response_info(&bytes);
                let _ = tcp_frame(&bytes);
                // Whatever we answer must itself be a valid DNS message.
                if !out.is_empty() {
                    prop_assert!(Message::from_bytes(&out).is_ok());
                }
            }

            #[test]
            fn replies_agree_with_hickory(
                labels in proptest::collection::vec(label(), 1..5),
                id in any::<u16>(),
                qtype in prop_oneof![Just(rtype::A), Just(rtype::AAAA), Just(rtype::MX), 1u16..300],
            ) {
                let name = labels.join(".");
                let q = query(id, &name, qtype);
                let m = Message::from_bytes(&reply(&q)).unwrap();
                prop_assert_eq!(m.id, id);
                prop_assert_eq!(m.queries[0].name().to_ascii(), format!("{name}."));
                prop_assert_eq!(u16::from(m.queries[0].query_type()), qtype);
                prop_assert_eq!(m.answers.len(), usize::from(qtype == rtype::A));
            }

            #[test]
            fn any_split_decodes_the_same(
                ids in proptest::collection::vec(any::<u16>(), 1..6),
                split in any::<prop::sample::Index>(),
            ) {
                let mut stream = Vec::new();
                for &id in &ids {
                    build_tcp_query(id, "split.example", rtype::A, &mut stream).unwrap();
                }
                let at = split.index(stream.len() + 1);
                prop_assert_eq!(decode_split(&stream, at), ids);
            }
        }
    }
}
