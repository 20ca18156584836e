//! The run's latency histograms (HDR, microseconds), the percentiles the
//! JSON shows of them, and their encoding (HdrHistogram V2, base64), by
//! which results of several processes and hosts merge exactly.

use base64::Engine;
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer, V2Serializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Latency percentiles with the shape the JSON promises for
/// `latency.*`: p50..p99.99, max, mean, stdev and the histogram.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Latency {
    pub count: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub p9999: u64,
    pub max: u64,
    pub mean: f64,
    pub stdev: f64,
    pub hdr: String,
}

impl Latency {
    pub fn from_histogram(h: &Histogram<u64>) -> Latency {
        Latency {
            count: h.len(),
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            p9999: h.value_at_quantile(0.9999),
            max: h.max(),
            mean: h.mean(),
            stdev: h.stdev(),
            hdr: encode_histogram(h),
        }
    }
}

/// A histogram of microseconds from 1 µs, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    growing(3)
}

/// An empty histogram of microseconds from 1 µs at `digits` significant
/// digits that grows to the largest value recorded into it or added to
/// it. hdrhistogram writes every bucket of the range it is made with: 1 µs
/// to an hour at 3 digits is 188 kB, made resident before anything is
/// recorded, and a worker keeps a dozen. Grown, a histogram costs 8 kB per
/// doubling of its largest value (2 ms: 16 kB; a second: 96 kB).
pub fn growing<T: hdrhistogram::Counter>(digits: u8) -> Histogram<T> {
    let mut h = Histogram::new_with_bounds(1, 2, digits).expect("valid histogram bounds");
    h.auto(true);
    h
}

/// Recording into, and adding to, a [`growing`] histogram: it grows to
/// the value (hdrhistogram's `saturating_record` clamps to the range made
/// so far, and its `add` grows to the other's largest value, a range that
/// recording the same values would not give: merged and one-place
/// histograms would encode differently).
pub trait Grow<T: hdrhistogram::Counter> {
    fn put(&mut self, v: u64);
    fn put_n(&mut self, v: u64, n: T);
    /// Adds `o`'s counts, grown first as recording its largest would.
    fn take_in(&mut self, o: &Histogram<T>) -> Result<(), hdrhistogram::AdditionError>;
}

impl<T: hdrhistogram::Counter> Grow<T> for Histogram<T> {
    #[inline]
    fn put(&mut self, v: u64) {
        self.put_n(v, T::one());
    }

    #[inline]
    fn put_n(&mut self, v: u64, n: T) {
        if self.record_n(v, n).is_err() {
            // Not growing (made with fixed bounds): its largest value.
            self.saturating_record_n(v, n);
        }
    }

    fn take_in(&mut self, o: &Histogram<T>) -> Result<(), hdrhistogram::AdditionError> {
        if !o.is_empty() && self.high() < o.max() && self.record_n(o.max(), T::zero()).is_err() {
            return Err(hdrhistogram::AdditionError::OtherAddendValueExceedsRange);
        }
        self.add(o)
    }
}

/// Empties `h` if anything was recorded into it. A reset writes every
/// bucket (up to 188 kB at 3 digits), so resetting a histogram nothing
/// touched would make all of its pages resident for nothing.
pub fn clear_if_used<T: hdrhistogram::Counter>(h: &mut Histogram<T>) {
    if !h.is_empty() {
        h.reset();
    }
}

/// The run's latency histograms, listed once: what a worker hands back,
/// and what the workers' join and a merge of results add up.
pub struct Histograms {
    pub connect_time: Histogram<u64>,
    /// Time inside connect() itself (the kernel's port search).
    pub connect_syscall: Histogram<u64>,
    pub tls_handshake: Histogram<u64>,
    /// WebSocket: the opening handshake, request sent to 101 read.
    pub ws_handshake: Histogram<u64>,
    pub response_time: Histogram<u64>,
    pub service_time: Histogram<u64>,
    pub send_lag: Histogram<u64>,
    /// How late the loop itself noticed due queries.
    pub loop_lag: Histogram<u64>,
    /// Response times of answers that came after their query's timeout.
    pub late_time: Histogram<u64>,
    /// --proto push: arrival gaps, jitter, one-way delay (µs).
    pub push_gap: Histogram<u64>,
    pub push_jitter: Histogram<u64>,
    pub push_delay: Histogram<u64>,
}

impl Default for Histograms {
    fn default() -> Self {
        Histograms {
            connect_time: new_histogram(),
            connect_syscall: new_histogram(),
            tls_handshake: new_histogram(),
            ws_handshake: new_histogram(),
            response_time: new_histogram(),
            service_time: new_histogram(),
            send_lag: new_histogram(),
            loop_lag: new_histogram(),
            late_time: new_histogram(),
            push_gap: new_histogram(),
            push_jitter: new_histogram(),
            push_delay: new_histogram(),
        }
    }
}

impl Histograms {
    fn each_mut(&mut self) -> [&mut Histogram<u64>; 12] {
        [
            &mut self.connect_time,
            &mut self.connect_syscall,
            &mut self.tls_handshake,
            &mut self.ws_handshake,
            &mut self.response_time,
            &mut self.service_time,
            &mut self.send_lag,
            &mut self.loop_lag,
            &mut self.late_time,
            &mut self.push_gap,
            &mut self.push_jitter,
            &mut self.push_delay,
        ]
    }

    /// Adds another part's (a worker's, a process's, a host's). Refused
    /// when a sum would count more than a result can write (HdrHistogram
    /// V2 writes each count as an i64; the addition saturates at 2^64).
    pub fn merge(&mut self, o: &Histograms) -> anyhow::Result<()> {
        let theirs = [
            &o.connect_time,
            &o.connect_syscall,
            &o.tls_handshake,
            &o.ws_handshake,
            &o.response_time,
            &o.service_time,
            &o.send_lag,
            &o.loop_lag,
            &o.late_time,
            &o.push_gap,
            &o.push_jitter,
            &o.push_delay,
        ];
        for (mine, theirs) in self.each_mut().into_iter().zip(theirs) {
            let writable = (i64::MAX as u64).saturating_sub(mine.len());
            if theirs.len() > writable {
                anyhow::bail!(
                    "adding histograms: {} and {} values make more than one histogram can write (2^63)",
                    mine.len(),
                    theirs.len()
                );
            }
            mine.take_in(theirs)
                .map_err(|e| anyhow::anyhow!("adding histograms: {e:?}"))?;
        }
        Ok(())
    }
}

/// Percentiles of a latency histogram, in microseconds, plus the histogram
/// itself (HdrHistogram V2 compressed, base64) so results merge exactly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Percentiles {
    pub count: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub mean: f64,
    pub hdr: String,
}

impl Percentiles {
    pub fn from_histogram(h: &Histogram<u64>) -> Percentiles {
        Percentiles {
            count: h.len(),
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            mean: h.mean(),
            hdr: encode_histogram(h),
        }
    }
}

/// HdrHistogram V2 compressed encoding, base64.
pub fn encode_histogram(h: &Histogram<u64>) -> String {
    let mut bytes = Vec::new();
    V2DeflateSerializer::new()
        .serialize(&*written(h), &mut bytes)
        .expect("serializing to memory");
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The largest value of the range a result's histograms are written with.
const WRITTEN_HIGH: u64 = 3_600_000_000;

/// `h` as results write it: over 1 µs to an hour whatever it has grown to
/// (readers that add histograms without growing them, older throngs and
/// other HdrHistogram libraries, can add any part to any other, and a
/// histogram's text depends on its values only); wider when a value is
/// past an hour.
fn written(h: &Histogram<u64>) -> std::borrow::Cow<'_, Histogram<u64>> {
    if h.high() >= WRITTEN_HIGH || h.max() > WRITTEN_HIGH {
        return std::borrow::Cow::Borrowed(h);
    }
    let mut w = Histogram::new_with_bounds(1, WRITTEN_HIGH, h.sigfig()).expect("valid bounds");
    w.add(h).expect("within an hour");
    std::borrow::Cow::Owned(w)
}

/// The V2 encoding without compression, base64: for the histogram of one
/// second, encoded every second, where deflate's set-up would cost more
/// than the bytes it saves. [`decode_histogram`] reads both.
/// The serializer and its output are kept from one call to the next (one
/// set a thread): a long run encodes a second's histograms every second,
/// and buffers made anew each time, of a size that varies, would fragment
/// the heap they come from (bench/soak.sh).
pub fn encode_histogram_plain(h: &Histogram<u64>) -> String {
    thread_local! {
        static PLAIN: std::cell::RefCell<(V2Serializer, Vec<u8>)> =
            std::cell::RefCell::new((V2Serializer::new(), Vec::new()));
    }
    PLAIN.with_borrow_mut(|(ser, bytes)| {
        bytes.clear();
        ser.serialize(&*written(h), bytes)
            .expect("serializing to memory");
        let mut text = String::with_capacity(text_capacity(bytes.len().div_ceil(3) * 4));
        base64::engine::general_purpose::STANDARD.encode_string(&bytes, &mut text);
        text
    })
}

/// The capacity of a second's histogram text: its length rounded up to a
/// multiple of 512 bytes, and past 1,032. glibc keeps up to seven freed
/// blocks of each size below that in a per-thread cache that nothing
/// trims, and the text of one second's histogram is of another length
/// than the last's: made to measure, they would fill that cache size by
/// size, up to ~0.2 MB a process over half an hour (bench/soak.sh).
fn text_capacity(len: usize) -> usize {
    len.max(1033).next_multiple_of(512)
}

/// Reads a second's histogram text (`Sample::hdr`) into a String of
/// [`text_capacity`], as [`encode_histogram_plain`] makes it.
pub fn de_histogram_text<'de, D>(d: D) -> Result<Option<String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    struct Text(String);
    impl<'de> Deserialize<'de> for Text {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Text, D::Error> {
            struct V;
            impl serde::de::Visitor<'_> for V {
                type Value = Text;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a histogram's text (HdrHistogram V2, base64)")
                }
                fn visit_str<E>(self, s: &str) -> Result<Text, E> {
                    let mut t = String::with_capacity(text_capacity(s.len()));
                    t.push_str(s);
                    Ok(Text(t))
                }
            }
            d.deserialize_str(V)
        }
    }
    Ok(Option::<Text>::deserialize(d)?.map(|t| t.0))
}

/// The inverse of [`encode_histogram`] and [`encode_histogram_plain`].
/// The encoding comes from a file (`throng merge`, `report`) or a child
/// process: its header is checked before the decoder sizes anything by it.
/// (Its buffers are kept from one call to the next, as
/// [`encode_histogram_plain`]'s: the parent of --processes decodes its
/// children's seconds every second.)
pub fn decode_histogram(s: &str) -> anyhow::Result<Histogram<u64>> {
    use hdrhistogram::serialization::Deserializer;
    thread_local! {
        static DECODE: std::cell::RefCell<(Deserializer, Vec<u8>)> =
            std::cell::RefCell::new((Deserializer::new(), Vec::new()));
    }
    DECODE.with_borrow_mut(|(de, bytes)| {
        bytes.clear();
        base64::engine::general_purpose::STANDARD.decode_vec(s, bytes)?;
        let plain = checked_v2(bytes).map_err(|e| anyhow::anyhow!("bad HDR histogram: {e}"))?;
        let mut h: Histogram<u64> = de
            .deserialize(&mut &plain[..])
            .map_err(|e| anyhow::anyhow!("bad HDR histogram: {e:?}"))?;
        // As a result's other counts (its reader's bound): a sum of such
        // histograms over any merge short of 1,024 parts writes back.
        if h.len() > crate::units::MAX_COUNT {
            anyhow::bail!(
                "bad HDR histogram: it counts {} values, more than a run counts (at most 2^53)",
                h.len()
            );
        }
        // Its range is what its writer had grown to: another part's
        // larger values, added to it, grow it further.
        h.auto(true);
        Ok(h)
    })
}

/// The plain V2 encoding of `bytes` (inflated if it is the compressed one),
/// refused when its header promises more than it holds. The decoder would
/// allocate the header's payload length (up to 4 GiB) and a counts array as
/// large as its bounds and digits ask; throng writes 2 or 3 digits, whose
/// counts array is under 512 KiB for any bounds, and its plain encoding
/// (at most 9 bytes a count) under [`MAX_PLAIN`].
fn checked_v2(bytes: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, String> {
    use std::io::Read;
    const PLAIN: u32 = 0x1c84_9313;
    const DEFLATE: u32 = 0x1c84_9314;
    const HEADER: usize = 40;
    const MAX_PLAIN: usize = 1 << 20;
    let word = |b: &[u8], at: usize| {
        b.get(at..at + 4)
            .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
    };
    let plain = match word(bytes, 0) {
        Some(PLAIN) => std::borrow::Cow::Borrowed(bytes),
        Some(DEFLATE) => {
            let len = word(bytes, 4).ok_or("cut short in its header")? as usize;
            let body = bytes
                .get(8..)
                .and_then(|b| b.get(..len))
                .ok_or_else(|| format!("compressed length {len} runs past its end"))?;
            let mut out = Vec::new();
            flate2::read::ZlibDecoder::new(body)
                .take(MAX_PLAIN as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| format!("does not inflate: {e}"))?;
            if out.len() > MAX_PLAIN {
                return Err(format!("inflates past {MAX_PLAIN} bytes"));
            }
            std::borrow::Cow::Owned(out)
        }
        _ => return Err("not an HdrHistogram V2 encoding".into()),
    };
    if plain.len() < HEADER {
        return Err("cut short in its header".into());
    }
    let payload = word(&plain, 4).unwrap_or(0) as usize;
    if payload > plain.len() - HEADER {
        return Err(format!(
            "payload length {payload} runs past its end ({} bytes)",
            plain.len() - HEADER
        ));
    }
    let digits = word(&plain, 12).unwrap_or(0);
    if digits > 3 {
        return Err(format!(
            "{digits} significant digits (throng writes 2 or 3)"
        ));
    }
    Ok(plain)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_round_trips() {
        let mut h = new_histogram();
        for v in [10, 100, 1000, 10_000] {
            h.record(v).unwrap();
        }
        let back = decode_histogram(&encode_histogram(&h)).unwrap();
        assert_eq!(back.len(), 4);
        assert_eq!(back.max(), h.max());
        let p = Percentiles::from_histogram(&h);
        assert_eq!(p.count, 4);
        assert!(p.p50 >= 100 && p.p50 <= 1001);
        let back = decode_histogram(&encode_histogram_plain(&h)).unwrap();
        assert_eq!(back.len(), 4);
    }

    /// A second's histogram text, encoded or read from JSON, has a
    /// capacity past the allocator's per-thread cache sizes, in steps of
    /// 512 bytes (see `text_capacity`), and reads back as it was.
    #[test]
    fn histogram_texts_are_not_made_to_measure() {
        #[derive(Deserialize)]
        struct S {
            #[serde(default, deserialize_with = "de_histogram_text")]
            hdr: Option<String>,
        }
        let mut h = new_histogram();
        for v in 1..300 {
            h.record(v * 37).unwrap();
        }
        let text = encode_histogram_plain(&h);
        assert!(
            text.capacity() > 1032 && text.capacity().is_multiple_of(512),
            "{}",
            text.capacity()
        );
        assert_eq!(
            encode_histogram_plain(&decode_histogram(&text).unwrap()),
            text
        );
        // Written over 1 µs to an hour, whatever it grew to (`written`).
        assert_eq!(decode_histogram(&text).unwrap().high(), 3_600_000_000);
        let json = format!("{{\"hdr\":\"{text}\"}}");
        let back: S = serde_json::from_str(&json).unwrap();
        let back = back.hdr.unwrap();
        assert_eq!(back, text);
        assert!(back.capacity() > 1032 && back.capacity().is_multiple_of(512));
        let back: S = serde_json::from_value(serde_json::json!({ "hdr": text })).unwrap();
        assert_eq!(back.hdr.as_deref(), Some(&text[..]));
        let none: S = serde_json::from_str("{}").unwrap();
        assert_eq!(none.hdr, None);
        let null: S = serde_json::from_str("{\"hdr\":null}").unwrap();
        assert_eq!(null.hdr, None);
    }

    /// A header that promises a 4 GiB payload, or a counts array of 5
    /// digits up to 2^62, is refused before anything is sized by it (the
    /// decoder would allocate both, and `throng merge` of such a file
    /// would run out of memory).
    #[test]
    fn hostile_headers_are_refused_before_allocating() {
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let mut h = new_histogram();
        h.record(100).unwrap();
        let mut plain = Vec::new();
        V2Serializer::new().serialize(&h, &mut plain).unwrap();
        let mut huge = plain.clone();
        huge[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        let e = decode_histogram(&b64(&huge)).unwrap_err().to_string();
        assert!(e.contains("payload length 4294967295 runs past"), "{e}");
        let mut digits = plain.clone();
        digits[12..16].copy_from_slice(&5u32.to_be_bytes());
        digits[24..32].copy_from_slice(&(1u64 << 62).to_be_bytes());
        let e = decode_histogram(&b64(&digits)).unwrap_err().to_string();
        assert!(e.contains("5 significant digits"), "{e}");
        // The same inside the compressed encoding.
        // V2's compressed encoding of `inner`: cookie, length, zlib.
        let compressed = |inner: &[u8]| {
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
            std::io::Write::write_all(&mut z, inner).unwrap();
            let z = z.finish().unwrap();
            let mut out = 0x1c84_9314u32.to_be_bytes().to_vec();
            out.extend((z.len() as u32).to_be_bytes());
            out.extend(&z);
            out
        };
        let mut deflated = compressed(&huge);
        let e = decode_histogram(&b64(&deflated)).unwrap_err().to_string();
        assert!(e.contains("payload length 4294967295 runs past"), "{e}");
        // A compressed length past the end, a bomb, a short header.
        deflated[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        let e = decode_histogram(&b64(&deflated)).unwrap_err().to_string();
        assert!(e.contains("runs past its end"), "{e}");
        let bomb = compressed(&vec![0u8; 8 << 20]);
        let e = decode_histogram(&b64(&bomb)).unwrap_err().to_string();
        assert!(e.contains("inflates past"), "{e}");
        let e = decode_histogram(&b64(&plain[..20]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cut short"), "{e}");
    }
}
