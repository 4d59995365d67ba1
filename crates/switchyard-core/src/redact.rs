//! Redacting secrets from upstream text relayed to clients (SPEC G5, G6).
//!
//! An upstream error page or body may echo what it received — a proxy repeating the
//! `Authorization` header, a provider quoting the key it refused. Relayed as it is, that
//! hands the connection's credential to whichever client key made the request. Before an
//! upstream error body leaves the gateway, every occurrence of the connection's own
//! credentials is replaced by [`REDACTED`], and so is anything shaped like a bearer
//! token: the word after `Bearer`, and runs that start like a well-known API key.
//!
//! It is given the body and the secrets to hide: it holds no credential, reads none from
//! configuration, and does no I/O.

/// What a redacted secret is replaced with.
pub const REDACTED: &[u8] = b"[REDACTED]";

/// Credentials shorter than this are not searched for, nor is a shorter word after
/// `Bearer` taken for a token: a short "secret" would match ordinary text ("the bearer
/// of bad news"), and no real credential is this short.
const MIN_SECRET_LEN: usize = 8;

/// Shortest run after a key prefix that counts as a key (`sk-` followed by 13 more).
const MIN_KEY_LEN: usize = 16;

/// How API keys of the common providers, JWTs and this gateway's own keys begin.
const KEY_PREFIXES: [&[u8]; 8] = [
    b"sk-", b"sy-", b"sya-", b"eyJ", b"AIza", b"gsk_", b"xai-", b"ghp_",
];

/// Whether `b` can be part of a token (base64, base64url, and the usual separators).
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'+' | b'/' | b'=')
}

/// `body` with every occurrence of each of `secrets` and every bearer-like token
/// replaced by [`REDACTED`].
pub fn redact(body: &[u8], secrets: &[&[u8]]) -> Vec<u8> {
    let mut out = body.to_vec();
    for secret in secrets.iter().filter(|s| s.len() >= MIN_SECRET_LEN) {
        out = replace_all(&out, secret);
    }
    redact_tokens(&out)
}

fn replace_all(haystack: &[u8], needle: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len());
    let mut i = 0;
    while i < haystack.len() {
        if haystack[i..].starts_with(needle) {
            out.extend_from_slice(REDACTED);
            i += needle.len();
        } else {
            out.push(haystack[i]);
            i += 1;
        }
    }
    out
}

/// Whether `b` continues a word: a token starts only where none does.
fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_')
}

/// The length of the token run starting at `at`.
fn token_len(text: &[u8], at: usize) -> usize {
    text[at..].iter().take_while(|b| is_token_byte(**b)).count()
}

fn redact_tokens(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let at_boundary = i == 0 || !is_word_byte(text[i - 1]);
        if at_boundary && starts_with_ignore_case(&text[i..], b"bearer") {
            // `Bearer` and its spaces stay; the credential after them goes.
            let mut j = i + b"bearer".len();
            let spaces = text[j..].iter().take_while(|b| **b == b' ').count();
            j += spaces;
            let len = token_len(text, j);
            if spaces > 0 && len >= MIN_SECRET_LEN {
                out.extend_from_slice(&text[i..j]);
                out.extend_from_slice(REDACTED);
                i = j + len;
                continue;
            }
        }
        if at_boundary && KEY_PREFIXES.iter().any(|p| text[i..].starts_with(p)) {
            let len = token_len(text, i);
            if len >= MIN_KEY_LEN {
                out.extend_from_slice(REDACTED);
                i += len;
                continue;
            }
        }
        out.push(text[i]);
        i += 1;
    }
    out
}

fn starts_with_ignore_case(text: &[u8], prefix: &[u8]) -> bool {
    text.len() >= prefix.len() && text[..prefix.len()].eq_ignore_ascii_case(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(body: &str, secrets: &[&str]) -> String {
        let secrets: Vec<&[u8]> = secrets.iter().map(|s| s.as_bytes()).collect();
        String::from_utf8(redact(body.as_bytes(), &secrets)).unwrap()
    }

    #[test]
    fn the_connection_credential_is_replaced_wherever_it_appears() {
        assert_eq!(
            r(
                r#"{"error":"bad key cred-alpha-1-secret-value (cred-alpha-1-secret-value)"}"#,
                &["cred-alpha-1-secret-value"]
            ),
            r#"{"error":"bad key [REDACTED] ([REDACTED])"}"#
        );
        // Inside another word too: the credential is never partly shown.
        assert_eq!(
            r(
                "xxcred-alpha-1-secret-valuexx",
                &["cred-alpha-1-secret-value"]
            ),
            "xx[REDACTED]xx"
        );
    }

    #[test]
    fn bearer_tokens_and_key_shaped_runs_are_replaced() {
        let cases = [
            (
                "Authorization: Bearer abc.def-ghi received",
                "Authorization: Bearer [REDACTED] received",
            ),
            (
                "authorization: bearer  t0k3n-value",
                "authorization: bearer  [REDACTED]",
            ),
            (
                r#"{"message":"Incorrect API key provided: sk-proj-abcdefghijklmnop"}"#,
                r#"{"message":"Incorrect API key provided: [REDACTED]"}"#,
            ),
            (
                "token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig",
                "token [REDACTED]",
            ),
            ("key=sy-test-client-key-0001", "key=[REDACTED]"),
        ];
        for (body, want) in cases {
            assert_eq!(r(body, &[]), want, "{body}");
        }
    }

    #[test]
    fn ordinary_text_is_left_alone() {
        for body in [
            r#"{"error":{"message":"model not found","type":"invalid_request_error"}}"#,
            "ask-me-anything is not a key",
            "sk-short",
            "the bearer of bad news",
            "Bearer",
            "",
        ] {
            assert_eq!(r(body, &["short"]), body, "{body}");
        }
    }
}
