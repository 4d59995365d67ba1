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
        let value = HeaderValue::from_maybe_shared(read.slice(value.range())).ok()?;
        headers.append(name, value);
    }
    Some(headers)
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
    fn decimals() {
        let mut out = Vec::new();
        push_decimal(&mut out, u64::MAX);
        push_decimal(&mut out, 0);
        push_decimal(&mut out, 10);
        assert_eq!(String::from_utf8(out).unwrap(), format!("{}010", u64::MAX));
    }
}
