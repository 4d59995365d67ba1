//! HTTP/1 heads between the bytes read and http's types, for the gateway's own server
//! (`edge`) and client (`client`): where a head's parts are in the read buffer, the
//! header map built from them as slices of what was read (no copies), the few fields a
//! direct route reads kept as those slices without any map ([`Fields`]), the fields an
//! answer carries as numbers beside its map ([`Late`]), and the decimal numbers a head
//! writes.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use switchyard_core::http1;

/// Where a part of a head (a field's name or value, a request's target) is in the bytes
/// read.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Span {
    start: usize,
    end: usize,
}

impl Span {
    /// `part`, a slice of the buffer starting at address `base`. An empty part may not
    /// point into the buffer: it is the empty span.
    pub(crate) fn of(part: &[u8], base: usize) -> Self {
        if part.is_empty() {
            return Self::default();
        }
        let start = (part.as_ptr() as usize).wrapping_sub(base);
        Self {
            start,
            end: start + part.len(),
        }
    }

    pub(crate) fn range(self) -> std::ops::Range<usize> {
        self.start..self.end
    }
}

/// Records into `spans` where each of `fields` (parsed from the buffer starting at
/// address `base`) has its name and value.
pub(crate) fn record(spans: &mut Vec<(Span, Span)>, fields: &[http1::Header<'_>], base: usize) {
    spans.clear();
    spans.extend(fields.iter().map(|field| {
        (
            Span::of(field.name.as_bytes(), base),
            Span::of(field.value, base),
        )
    }));
}

/// The fields at `spans` of `read` (the head, as read): `None` when a name or value is
/// not one http takes.
pub(crate) fn header_map(read: &Bytes, spans: &[(Span, Span)]) -> Option<HeaderMap> {
    let mut headers = HeaderMap::with_capacity(spans.len());
    for &(name, value) in spans {
        let name = HeaderName::from_bytes(read.get(name.range())?).ok()?;
        headers.append(name, value_at(read, value)?);
    }
    Some(headers)
}

/// What the reader of an answer head does with one of its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// Passes over it.
    Skip,
    /// Reads it from the header map, under this name.
    Map(HeaderName),
    /// Reads it where it is in the head ([`Kept`]), unconverted, under the reader's
    /// number for it (so the name is compared only here).
    Keep(u8),
}

/// Which fields of an answer head a reader reads, by the name they were sent as (in any
/// case), and how.
pub type Reads = fn(&[u8]) -> Read;

/// Fields of an answer head kept where they are in it ([`Read::Keep`]): a field read
/// as text needs no copy into http's types.
#[derive(Debug)]
pub struct Kept {
    head: Bytes,
    /// Each kept field's number and where its value is.
    at: Vec<(u8, Span)>,
}

impl Kept {
    /// Each kept field's number and value, in the order sent.
    pub fn fields(&self) -> impl Iterator<Item = (u8, &[u8])> {
        self.at
            .iter()
            .filter_map(|&(number, value)| Some((number, self.head.get(value.range())?)))
    }
}

/// The fields at `spans` of `read` that `reads` maps, under its name for them, and those
/// it keeps (boxed, as the answer's body carries them: most answers keep none); the
/// others are passed over unconverted (httparse has checked every name and value
/// already): converting a field into http's types costs about 550 instructions, and a
/// head carries many fields its reader never reads. `None` when a value is not one http
/// takes.
pub(crate) fn header_map_of(
    read: &Bytes,
    spans: &[(Span, Span)],
    reads: Reads,
) -> Option<(HeaderMap, Option<Box<Kept>>)> {
    let mut headers = HeaderMap::new();
    let mut at = Vec::new();
    for (i, &(name, value)) in spans.iter().enumerate() {
        match reads(read.get(name.range())?) {
            Read::Skip => {}
            Read::Map(name) => {
                headers.append(name, value_at(read, value)?);
            }
            Read::Keep(number) => {
                // Room for every field left at the first kept: one allocation.
                if at.capacity() == 0 {
                    at.reserve_exact(spans.len() - i);
                }
                at.push((number, value));
            }
        }
    }
    let kept = (!at.is_empty()).then(|| {
        Box::new(Kept {
            head: read.clone(),
            at,
        })
    });
    Some((headers, kept))
}

/// Which fields of a request head a route reads: its number for the field sent as the
/// given name (in any case), below [`MAX_READ`]; `None` for a field it does not read.
pub type Numbers = fn(&[u8]) -> Option<usize>;

/// Most fields a route numbers.
pub const MAX_READ: usize = 20;

/// Where a field kept in [`Fields`] is in its buffer; [`ABSENT`] for one not sent.
type At = (u32, u32);

const ABSENT: At = (u32::MAX, 0);

/// The fields of a request head its route reads, by the route's [`Numbers`]: the first
/// value of each, kept as where it is in one buffer (the head as read, or the values
/// copied out of a header map). No header map is built: a map costs two allocations
/// and a hash per field, and a route reads a few fixed names. Small, since a request's
/// future carries it.
#[derive(Debug, Clone)]
pub struct Fields {
    buf: Bytes,
    at: [At; MAX_READ],
}

impl Default for Fields {
    fn default() -> Self {
        Self {
            buf: Bytes::new(),
            at: [ABSENT; MAX_READ],
        }
    }
}

impl Fields {
    /// The fields at `spans` of `read` (the head, as read) that `numbers` numbers.
    /// httparse has checked every value already.
    pub(crate) fn of_head(read: &Bytes, spans: &[(Span, Span)], numbers: Numbers) -> Self {
        let mut at = [ABSENT; MAX_READ];
        for &(name, value) in spans {
            if let Some(i) = read.get(name.range()).and_then(numbers) {
                keep(&mut at, i, value.range());
            }
        }
        Self {
            buf: read.clone(),
            at,
        }
    }

    /// The fields of `headers` that `numbers` numbers (the request of a route reached
    /// through the router, or over HTTP/2).
    pub fn of_map(headers: &HeaderMap, numbers: Numbers) -> Self {
        let mut buf = Vec::new();
        let mut at = [ABSENT; MAX_READ];
        for (name, value) in headers {
            let Some(i) = numbers(name.as_str().as_bytes()) else {
                continue;
            };
            let range = buf.len()..buf.len().saturating_add(value.len());
            if keep(&mut at, i, range) {
                buf.extend_from_slice(value.as_bytes());
            }
        }
        Self {
            buf: Bytes::from(buf),
            at,
        }
    }

    /// The value of field `i`, as sent.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let &(start, end) = self.at.get(i)?;
        self.buf.get(start as usize..end as usize)
    }

    /// The value of field `i` as text, when it is visible ASCII (http's rule for a
    /// value read as a string).
    pub fn text(&self, i: usize) -> Option<&str> {
        self.get(i).and_then(visible_text)
    }

    /// The value of field `i` to send on (no copy).
    pub fn value(&self, i: usize) -> Option<HeaderValue> {
        let value = self.get(i)?;
        HeaderValue::from_maybe_shared(self.buf.slice_ref(value)).ok()
    }
}

/// Keeps `range` as field `i`'s value unless it has one already (the first value of a
/// repeated field counts): whether it was kept.
fn keep(at: &mut [At; MAX_READ], i: usize, range: std::ops::Range<usize>) -> bool {
    match (
        at.get_mut(i),
        u32::try_from(range.start),
        u32::try_from(range.end),
    ) {
        (Some(slot), Ok(start), Ok(end)) if *slot == ABSENT => {
            *slot = (start, end);
            true
        }
        _ => false,
    }
}

/// `value` as text when it is visible ASCII, spaces and tabs (as `HeaderValue::to_str`
/// reads a value). Every byte is looked at, without an early exit: the loop is then
/// one the compiler runs many bytes at a time.
pub fn visible_text(value: &[u8]) -> Option<&str> {
    let visible = value.iter().fold(true, |all, &b| {
        all & ((b == b'\t') | (b.wrapping_sub(0x20) < 0x5f))
    });
    if visible {
        std::str::from_utf8(value).ok()
    } else {
        None
    }
}

fn value_at(read: &Bytes, value: Span) -> Option<HeaderValue> {
    HeaderValue::from_maybe_shared(read.slice(value.range())).ok()
}

/// A value of a [`Late`] field: made already, or a number the head writes.
#[derive(Debug, Clone, Copy)]
pub enum LateValue<'a> {
    Made(&'a HeaderValue),
    Number(f64),
}

/// Fields an answer carries beside its header map, with numbers for values: the
/// gateway's HTTP/1 connection writes them into the head as it writes
/// `content-length`, with no `HeaderValue` made and no map insert (through the map, the
/// quota stage's five fields cost 3.6 k instructions a request); for any other server
/// they go into the map first ([`insert_late`]). They travel beside the answer, not in
/// its extensions (whose map costs two allocations), as [`LateFields`], and are written
/// after its map's fields, whose names they do not repeat.
pub trait Late: Send + Sync + std::fmt::Debug {
    /// Calls `field` with each field's name and value, in order.
    fn each(&self, field: &mut dyn FnMut(&HeaderName, LateValue<'_>));
}

/// An answer's [`Late`] fields.
#[derive(Debug)]
pub struct LateFields(pub Box<dyn Late>);

/// Inserts `late`'s fields into `map`.
pub fn insert_late(late: &dyn Late, map: &mut HeaderMap) {
    late.each(&mut |name, value| {
        let value = match value {
            LateValue::Made(v) => v.clone(),
            LateValue::Number(n) => number_value(n),
        };
        map.insert(name.clone(), value);
    });
}

/// The field value of the number `n`, written as [`push_number`] writes it.
pub fn number_value(n: f64) -> HeaderValue {
    let mut text = Vec::new();
    push_number(&mut text, n);
    // Digits, a sign, a point, `inf` or `NaN`: always a valid value.
    HeaderValue::from_maybe_shared(Bytes::from(text)).unwrap_or(HeaderValue::from_static("0"))
}

/// Appends `v` as a head writes a number: a whole one without a fraction, any other to
/// four decimals.
pub(crate) fn push_number(out: &mut Vec<u8>, v: f64) {
    use std::io::Write;
    let whole = v.round();
    // Writing into a `Vec` cannot fail.
    let _ = if (v - whole).abs() < 1e-9 {
        if (0.0..9.0e15).contains(&whole) {
            // A whole number in u64's range: the cast is exact.
            push_decimal(out, whole as u64);
            Ok(())
        } else {
            write!(out, "{whole}")
        }
    } else {
        write!(out, "{v:.4}")
    };
}

/// The decimal digits of 0 to 99, two by two.
const DIGIT_PAIRS: &[u8; 200] = b"\
    0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// Appends `n` in decimal, two digits a step.
pub(crate) fn push_decimal(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    let mut n = n;
    let mut i = digits.len();
    while n >= 100 {
        // n % 100 < 100: the cast cannot truncate.
        let pair = 2 * (n % 100) as usize;
        n /= 100;
        i -= 2;
        digits[i..i + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        let pair = 2 * n as usize;
        i -= 2;
        digits[i..i + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    } else {
        i -= 1;
        // n < 10: the cast cannot truncate.
        digits[i] = b'0' + n as u8;
    }
    out.extend_from_slice(&digits[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_slices_of_the_head_read() {
        let read = Bytes::from_static(b"GET / HTTP/1.1\r\nHost: a\r\nx-e:\r\nX-Two: b c\r\n\r\n");
        let base = read.as_ptr() as usize;
        let spans = [
            (Span::of(&read[16..20], base), Span::of(&read[22..23], base)),
            (Span::of(&read[25..28], base), Span::of(&read[29..29], base)),
            (Span::of(&read[31..36], base), Span::of(&read[38..41], base)),
        ];
        let headers = header_map(&read, &spans).unwrap();
        assert_eq!(headers.len(), 3);
        assert_eq!(headers["host"], "a");
        assert_eq!(headers["x-e"], "");
        assert_eq!(headers["x-two"], "b c");
        // A name http does not take.
        let bad = [(Span::of(&read[0..5], base), Span::of(&read[22..23], base))];
        assert!(header_map(&read, &bad).is_none());
    }

    #[test]
    fn only_the_fields_read_are_converted_under_the_readers_names_or_kept() {
        fn reads(name: &[u8]) -> Read {
            if name.eq_ignore_ascii_case(b"x-two") {
                Read::Map(HeaderName::from_static("x-two"))
            } else if name.eq_ignore_ascii_case(b"x-kept") {
                Read::Keep(u8::from(name[0] == b'X'))
            } else {
                Read::Skip
            }
        }
        let read = Bytes::from_static(
            b"GET / HTTP/1.1\r\nHost: a\r\nX-Two: b c\r\nx-two: d\r\nX-Kept: 7\r\nx-kept: e f\r\n\r\n",
        );
        let base = read.as_ptr() as usize;
        let at = |from: usize, to: usize| Span::of(&read[from..to], base);
        let spans = [
            (at(16, 20), at(22, 23)),
            (at(25, 30), at(32, 35)),
            (at(37, 42), at(44, 45)),
            (at(47, 53), at(55, 56)),
            (at(58, 64), at(66, 69)),
        ];
        let (headers, kept) = header_map_of(&read, &spans, reads).unwrap();
        assert_eq!(headers.len(), 2);
        let values: Vec<_> = headers.get_all("x-two").iter().collect();
        assert_eq!(values, ["b c", "d"]);
        assert!(headers.get("host").is_none());
        assert!(headers.get("x-kept").is_none());
        let kept = kept.unwrap();
        let fields: Vec<_> = kept.fields().collect();
        assert_eq!(fields, [(1, &b"7"[..]), (0, b"e f")]);
        // A head with nothing to keep allocates no keeping.
        let (headers, kept) = header_map_of(&read, &spans[..3], reads).unwrap();
        assert_eq!(headers.len(), 2);
        assert!(kept.is_none());
    }

    /// Numbers `authorization` 0 and `x-two` 3.
    fn numbers(name: &[u8]) -> Option<usize> {
        if name.eq_ignore_ascii_case(b"authorization") {
            Some(0)
        } else if name.eq_ignore_ascii_case(b"x-two") {
            Some(3)
        } else {
            None
        }
    }

    #[test]
    fn a_routes_fields_are_kept_by_number_first_value_first() {
        let read = Bytes::from_static(
            b"GET / HTTP/1.1\r\nHost: a\r\nX-Two: b c\r\nAUTHORIZATION: Bearer k\r\nx-two: d\r\n\r\n",
        );
        let base = read.as_ptr() as usize;
        let at = |from: usize, to: usize| Span::of(&read[from..to], base);
        let spans = [
            (at(16, 20), at(22, 23)),
            (at(25, 30), at(32, 35)),
            (at(37, 50), at(52, 60)),
            (at(62, 67), at(69, 70)),
        ];
        let from_head = Fields::of_head(&read, &spans, numbers);
        let mut map = HeaderMap::new();
        map.insert("host", HeaderValue::from_static("a"));
        map.append("x-two", HeaderValue::from_static("b c"));
        map.append("x-two", HeaderValue::from_static("d"));
        map.insert("authorization", HeaderValue::from_static("Bearer k"));
        let from_map = Fields::of_map(&map, numbers);
        for fields in [from_head, from_map] {
            assert_eq!(fields.get(0), Some(&b"Bearer k"[..]));
            assert_eq!(fields.text(3), Some("b c"));
            assert_eq!(fields.value(3).unwrap(), "b c");
            for absent in [1, 2, 4, MAX_READ - 1, MAX_READ, usize::MAX] {
                assert_eq!(fields.get(absent), None, "{absent}");
                assert_eq!(fields.value(absent), None, "{absent}");
            }
        }
        assert_eq!(Fields::default().get(0), None);
    }

    #[test]
    fn text_is_read_as_http_reads_a_value_as_a_string() {
        assert_eq!(visible_text(b"Bearer k\t1 ~"), Some("Bearer k\t1 ~"));
        assert_eq!(visible_text(b""), Some(""));
        for refused in [&b"caf\xc3\xa9"[..], b"a\x7f", b"a\x01", b"\xff"] {
            assert_eq!(visible_text(refused), None, "{refused:?}");
        }
    }

    #[test]
    fn decimals() {
        let mut out = Vec::new();
        push_decimal(&mut out, u64::MAX);
        push_decimal(&mut out, 0);
        push_decimal(&mut out, 10);
        assert_eq!(String::from_utf8(out).unwrap(), format!("{}010", u64::MAX));
        for n in (0..100_000).chain([u64::MAX - 1, 1 << 63, 999_999_999_999]) {
            let mut out = Vec::new();
            push_decimal(&mut out, n);
            assert_eq!(String::from_utf8(out).unwrap(), n.to_string());
        }
    }

    #[test]
    fn numbers_are_written_whole_or_to_four_decimals() {
        let cases: [(f64, &str); 10] = [
            (0.0, "0"),
            (-0.0, "0"),
            (1200.0, "1200"),
            (199_999_998_990.0, "199999998990"),
            (2.000_000_000_1, "2"),
            (0.25, "0.2500"),
            (1.0 / 3.0, "0.3333"),
            (1e16, "10000000000000000"),
            (-3.0, "-3"),
            (f64::NAN, "NaN"),
        ];
        for (n, text) in cases {
            let mut out = Vec::new();
            push_number(&mut out, n);
            assert_eq!(String::from_utf8(out).unwrap(), text, "{n}");
        }
    }

    /// Two made fields and two numbers, one name twice.
    #[derive(Debug)]
    struct Two;

    impl Late for Two {
        fn each(&self, field: &mut dyn FnMut(&HeaderName, LateValue<'_>)) {
            let made = HeaderValue::from_static("p");
            field(&HeaderName::from_static("x-a"), LateValue::Made(&made));
            field(&HeaderName::from_static("x-b"), LateValue::Number(7.5));
            field(&HeaderName::from_static("x-c"), LateValue::Number(12.0));
            field(&HeaderName::from_static("x-a"), LateValue::Made(&made));
        }
    }

    #[test]
    fn late_fields_go_into_a_map_replacing_its_fields_of_their_names() {
        let mut map = HeaderMap::new();
        map.insert("x-c", HeaderValue::from_static("old"));
        insert_late(&Two, &mut map);
        let fields: Vec<(&str, &str)> = map
            .iter()
            .map(|(n, v)| (n.as_str(), v.to_str().unwrap()))
            .collect();
        assert_eq!(fields, [("x-c", "12"), ("x-a", "p"), ("x-b", "7.5000")]);
    }
}
