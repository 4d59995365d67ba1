//! HTTP/1 heads between the bytes read and http's types, for the gateway's own server
//! (`edge`) and client (`client`): where a head's parts are in the read buffer, the
//! header map built from them as slices of what was read (no copies), and the decimal
//! numbers a head writes.

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

/// Which fields of a head a reader reads: its name for the field sent as the given
/// name (in any case), or `None` for a field it does not read.
pub type Reads = fn(&[u8]) -> Option<HeaderName>;

/// The fields at `spans` of `read` that `reads` names, under its name for them; the
/// others are passed over unconverted (httparse has checked every name and value
/// already): converting a field into http's types costs about 550 instructions, and a
/// head carries many fields its reader never reads. `None` when a value is not one http
/// takes.
pub(crate) fn header_map_of(
    read: &Bytes,
    spans: &[(Span, Span)],
    reads: Reads,
) -> Option<HeaderMap> {
    let mut headers = HeaderMap::new();
    for &(name, value) in spans {
        if let Some(name) = reads(read.get(name.range())?) {
            headers.append(name, value_at(read, value)?);
        }
    }
    Some(headers)
}

fn value_at(read: &Bytes, value: Span) -> Option<HeaderValue> {
    HeaderValue::from_maybe_shared(read.slice(value.range())).ok()
}

/// Appends `n` in decimal.
pub(crate) fn push_decimal(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    let mut n = n;
    let mut i = digits.len();
    loop {
        i -= 1;
        // n % 10 < 10: the cast cannot truncate.
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
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
    fn only_the_fields_read_are_converted_under_the_readers_names() {
        fn reads(name: &[u8]) -> Option<HeaderName> {
            name.eq_ignore_ascii_case(b"x-two")
                .then(|| HeaderName::from_static("x-two"))
        }
        let read =
            Bytes::from_static(b"GET / HTTP/1.1\r\nHost: a\r\nX-Two: b c\r\nx-two: d\r\n\r\n");
        let base = read.as_ptr() as usize;
        let spans = [
            (Span::of(&read[16..20], base), Span::of(&read[22..23], base)),
            (Span::of(&read[25..30], base), Span::of(&read[32..35], base)),
            (Span::of(&read[37..42], base), Span::of(&read[44..45], base)),
        ];
        let headers = header_map_of(&read, &spans, reads).unwrap();
        assert_eq!(headers.len(), 2);
        let values: Vec<_> = headers.get_all("x-two").iter().collect();
        assert_eq!(values, ["b c", "d"]);
        assert!(headers.get("host").is_none());
    }

    #[test]
    fn decimals() {
        let mut out = Vec::new();
        push_decimal(&mut out, u64::MAX);
        push_decimal(&mut out, 0);
        push_decimal(&mut out, 10);
        assert_eq!(String::from_utf8(out).unwrap(), format!("{}010", u64::MAX));
    }
}
