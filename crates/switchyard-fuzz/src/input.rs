//! Reading a fuzz input: a few leading bytes choose what to exercise (a format, a pair of
//! formats, a chunking, where a credential goes), the rest is the payload. A seed is the
//! choice bytes followed by a real body, so a corpus seeded from the golden files starts
//! from well-formed input and the fuzzer mutates both.

use switchyard_core::format::Format;

/// An input being read from the front.
#[derive(Debug)]
pub struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Self(data)
    }

    /// The next choice byte; 0 once the input is used up.
    pub fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((first, rest)) => {
                self.0 = rest;
                *first
            }
            None => 0,
        }
    }

    /// What is left: the payload.
    pub fn rest(self) -> &'a [u8] {
        self.0
    }
}

/// The three formats, in the order a choice byte picks them.
pub const FORMATS: [Format; 3] = [
    Format::OpenAiChat,
    Format::AnthropicMessages,
    Format::Responses,
];

/// The format a choice byte picks.
pub fn format(choice: u8) -> Format {
    FORMATS[usize::from(choice) % FORMATS.len()]
}

/// The choice byte that picks `format`.
pub fn format_byte(format: Format) -> u8 {
    match format {
        Format::OpenAiChat => 0,
        Format::AnthropicMessages => 1,
        Format::Responses => 2,
    }
}

/// `data` cut into chunks as `plan` says: 0 whole, 1 a byte at a time, otherwise sizes
/// from 1 to `plan` drawn from a generator seeded by `plan`, so every plan is replayable.
pub fn chunks(data: &[u8], plan: u8) -> Vec<&[u8]> {
    match plan {
        0 => vec![data],
        1 => data.chunks(1).collect(),
        _ => {
            let mut state = u32::from(plan) | 0x9e37_7900;
            let mut out = Vec::new();
            let mut rest = data;
            while !rest.is_empty() {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                let size = 1 + (state % u32::from(plan)) as usize;
                let (chunk, tail) = rest.split_at(size.min(rest.len()));
                out.push(chunk);
                rest = tail;
            }
            out
        }
    }
}

/// The upstream credential the checks hide in their inputs. It holds a `/`, which some
/// JSON writers escape as `\/`.
pub const CREDENTIAL: &str = "fuzz-cred/alpha-0123456789";

/// `body` with [`CREDENTIAL`] inserted at the fraction `at / 255` of its length, written
/// as `form` says: 0 as it is, 1 with `/` escaped as `\/`, 2 with its first character
/// as a `\u` escape, 3 with every character so. Forms 1–3 are what a JSON writer may
/// emit; a client decoding the JSON reads the credential in all four.
pub fn splice_credential(body: &[u8], at: u8, form: u8) -> Vec<u8> {
    let written: String = match form % 4 {
        0 => CREDENTIAL.to_owned(),
        1 => CREDENTIAL.replace('/', "\\/"),
        2 => CREDENTIAL
            .char_indices()
            .map(|(i, c)| {
                if i == 0 {
                    format!("\\u{:04x}", u32::from(c))
                } else {
                    c.to_string()
                }
            })
            .collect(),
        _ => CREDENTIAL
            .chars()
            .map(|c| format!("\\u{:04x}", u32::from(c)))
            .collect(),
    };
    let pos = body.len() * usize::from(at) / 255;
    let mut out = Vec::with_capacity(body.len() + written.len());
    out.extend_from_slice(&body[..pos]);
    out.extend_from_slice(written.as_bytes());
    out.extend_from_slice(&body[pos..]);
    out
}
