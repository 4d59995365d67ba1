//! The registry of runtime settings and their resolution.
//!
//! Every tunable number has one definition here: key, environment variable, default,
//! bounds and a sentence of documentation. Values resolve by precedence (highest first):
//! settings stored in the database (changed through the management API) → environment
//! variable → config file → built-in default. Per-connection overrides, where a setting
//! has them, are applied later by the stage that uses the setting.

use serde_json::Value;
use std::collections::BTreeMap;

/// Where a resolved value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Default,
    File,
    Env,
    Database,
}

/// One setting's definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettingDef {
    pub key: &'static str,
    pub env: &'static str,
    pub default: u64,
    pub min: u64,
    pub max: u64,
    pub doc: &'static str,
}

/// One day in milliseconds, the upper bound of every duration setting: longer waits are
/// configuration mistakes, not intentions.
const DAY_MS: u64 = 86_400_000;

/// All settings. Keep sorted by key.
pub const DEFS: &[SettingDef] = &[
    SettingDef {
        key: "request.max_body_bytes",
        env: "SWITCHYARD_MAX_BODY_BYTES",
        // 10 MiB holds long multi-turn contexts with inline images; larger bodies are
        // almost always mistakes that would only cost upstream money.
        default: 10 * 1024 * 1024,
        min: 1024,
        max: 512 * 1024 * 1024,
        doc: "Largest accepted client request body, in bytes; larger bodies get 413.",
    },
    SettingDef {
        key: "server.io_threads",
        env: "SWITCHYARD_IO_THREADS",
        // 0 = one per CPU core: each I/O thread runs its own single-threaded runtime, so
        // a request's tasks never hop between threads.
        default: 0,
        min: 0,
        max: 256,
        doc: "I/O threads serving requests (0 = one per core). Read at start.",
    },
    SettingDef {
        key: "server.shutdown_grace_ms",
        env: "SWITCHYARD_SHUTDOWN_GRACE_MS",
        // Long enough for typical completions to finish, short enough for orchestrators
        // (Kubernetes defaults to 30 s before SIGKILL).
        default: 25_000,
        min: 0,
        max: 600_000,
        doc: "On SIGINT/SIGTERM, how long in-flight requests may run before they are cut.",
    },
    SettingDef {
        key: "upstream.connect_timeout_ms",
        env: "SWITCHYARD_UPSTREAM_CONNECT_TIMEOUT_MS",
        // A TCP+TLS handshake that has not finished in 10 s will not; fail over instead.
        default: 10_000,
        min: 100,
        max: 300_000,
        doc: "Deadline for establishing an upstream connection.",
    },
    SettingDef {
        key: "upstream.first_byte_timeout_ms",
        env: "SWITCHYARD_UPSTREAM_FIRST_BYTE_TIMEOUT_MS",
        // Non-streaming completions of long answers routinely take minutes; ten minutes
        // matches the execution bound of SPEC R10.
        default: 600_000,
        min: 100,
        max: DAY_MS,
        doc: "Deadline for the upstream's response headers after the request was sent.",
    },
    SettingDef {
        key: "upstream.stream_idle_timeout_ms",
        env: "SWITCHYARD_UPSTREAM_STREAM_IDLE_TIMEOUT_MS",
        // A backstop against streams that stall forever, not a quality monitor (that is
        // R11's content-stall budget): five minutes outlasts any real pause between
        // frames, including long reasoning phases and keep-alive gaps.
        default: 300_000,
        min: 100,
        max: DAY_MS,
        doc: "Longest silence between two frames of an upstream stream before it is cut.",
    },
];

/// Resolved settings, typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub max_body_bytes: u64,
    pub io_threads: u64,
    pub shutdown_grace_ms: u64,
    pub connect_timeout_ms: u64,
    pub first_byte_timeout_ms: u64,
    pub stream_idle_timeout_ms: u64,
}

/// A resolved value with its origin, for the settings API.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Resolved {
    pub key: &'static str,
    pub value: u64,
    pub source: Source,
    pub env: &'static str,
    pub default: u64,
    pub min: u64,
    pub max: u64,
    pub doc: &'static str,
}

/// Why a setting value is unusable. The message names the setting and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingError {
    #[error("unknown setting `{0}`")]
    Unknown(String),
    #[error(
        "setting `{key}` (from {origin}) must be an integer between {min} and {max}, got {got}"
    )]
    OutOfRange {
        key: String,
        origin: &'static str,
        min: u64,
        max: u64,
        got: String,
    },
}

pub fn def(key: &str) -> Option<&'static SettingDef> {
    DEFS.iter().find(|d| d.key == key)
}

fn source_name(s: Source) -> &'static str {
    match s {
        Source::Default => "default",
        Source::File => "config file",
        Source::Env => "environment",
        Source::Database => "database",
    }
}

/// Validates one value for `key`.
pub fn validate(key: &str, value: &Value, source: Source) -> Result<u64, SettingError> {
    let d = def(key).ok_or_else(|| SettingError::Unknown(key.to_owned()))?;
    let parsed = match value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse::<u64>().ok(),
        _ => None,
    };
    match parsed {
        Some(v) if (d.min..=d.max).contains(&v) => Ok(v),
        _ => Err(SettingError::OutOfRange {
            key: key.to_owned(),
            origin: source_name(source),
            min: d.min,
            max: d.max,
            got: value.to_string(),
        }),
    }
}

/// The layers settings are resolved from.
#[derive(Debug, Default, Clone)]
pub struct Layers {
    pub file: BTreeMap<String, Value>,
    pub env: BTreeMap<String, String>,
    pub database: BTreeMap<String, Value>,
}

/// The outcome of resolution: typed settings, the per-key view, and database values
/// that were ignored because they are invalid (the caller logs them).
#[derive(Debug, Clone)]
pub struct Resolution {
    pub settings: Settings,
    pub resolved: Vec<Resolved>,
    pub ignored: Vec<SettingError>,
}

/// Resolves every setting. Invalid file or environment values are errors (the operator
/// must fix them before start); an invalid or unknown database value is ignored and
/// reported, so a bad row can never stop the gateway.
pub fn resolve(layers: &Layers) -> Result<Resolution, SettingError> {
    if let Some(k) = layers.file.keys().find(|k| def(k).is_none()) {
        return Err(SettingError::Unknown(k.clone()));
    }
    let mut resolved = Vec::with_capacity(DEFS.len());
    let mut ignored = Vec::new();
    for d in DEFS {
        let mut value = d.default;
        let mut source = Source::Default;
        if let Some(v) = layers.file.get(d.key) {
            value = validate(d.key, v, Source::File)?;
            source = Source::File;
        }
        if let Some(v) = layers.env.get(d.env) {
            value = validate(d.key, &Value::String(v.clone()), Source::Env)?;
            source = Source::Env;
        }
        if let Some(v) = layers.database.get(d.key) {
            match validate(d.key, v, Source::Database) {
                Ok(v) => {
                    value = v;
                    source = Source::Database;
                }
                Err(e) => ignored.push(e),
            }
        }
        resolved.push(Resolved {
            key: d.key,
            value,
            source,
            env: d.env,
            default: d.default,
            min: d.min,
            max: d.max,
            doc: d.doc,
        });
    }
    ignored.extend(
        layers
            .database
            .keys()
            .filter(|k| def(k).is_none())
            .map(|k| SettingError::Unknown(k.clone())),
    );
    let get = |key: &str| {
        resolved
            .iter()
            .find(|r| r.key == key)
            .map_or(0, |r| r.value)
    };
    let settings = Settings {
        max_body_bytes: get("request.max_body_bytes"),
        io_threads: get("server.io_threads"),
        shutdown_grace_ms: get("server.shutdown_grace_ms"),
        connect_timeout_ms: get("upstream.connect_timeout_ms"),
        first_byte_timeout_ms: get("upstream.first_byte_timeout_ms"),
        stream_idle_timeout_ms: get("upstream.stream_idle_timeout_ms"),
    };
    Ok(Resolution {
        settings,
        resolved,
        ignored,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_apply_when_no_layer_sets_a_value() {
        let r = resolve(&Layers::default()).unwrap();
        assert_eq!(r.settings.first_byte_timeout_ms, 600_000);
        assert_eq!(r.settings.connect_timeout_ms, 10_000);
        assert!(r.resolved.iter().all(|x| x.source == Source::Default));
    }

    #[test]
    fn database_beats_env_beats_file() {
        let mut l = Layers::default();
        l.file
            .insert("upstream.connect_timeout_ms".into(), json!(1000));
        l.file
            .insert("upstream.first_byte_timeout_ms".into(), json!(2000));
        l.file
            .insert("server.shutdown_grace_ms".into(), json!(3000));
        l.env.insert(
            "SWITCHYARD_UPSTREAM_FIRST_BYTE_TIMEOUT_MS".into(),
            "4000".into(),
        );
        l.env
            .insert("SWITCHYARD_SHUTDOWN_GRACE_MS".into(), "5000".into());
        l.database
            .insert("server.shutdown_grace_ms".into(), json!(6000));
        let r = resolve(&l).unwrap();
        assert_eq!(r.settings.connect_timeout_ms, 1000);
        assert_eq!(r.settings.first_byte_timeout_ms, 4000);
        assert_eq!(r.settings.shutdown_grace_ms, 6000);
        let src = |k: &str| r.resolved.iter().find(|x| x.key == k).unwrap().source;
        assert_eq!(src("upstream.connect_timeout_ms"), Source::File);
        assert_eq!(src("upstream.first_byte_timeout_ms"), Source::Env);
        assert_eq!(src("server.shutdown_grace_ms"), Source::Database);
    }

    #[test]
    fn invalid_env_or_file_values_are_errors_naming_the_setting() {
        let mut l = Layers::default();
        l.env
            .insert("SWITCHYARD_UPSTREAM_CONNECT_TIMEOUT_MS".into(), "5".into());
        assert_eq!(
            resolve(&l).unwrap_err().to_string(),
            "setting `upstream.connect_timeout_ms` (from environment) must be an integer between 100 and 300000, got \"5\""
        );
        let mut l = Layers::default();
        l.file.insert("nope".into(), json!(1));
        assert_eq!(
            resolve(&l).unwrap_err(),
            SettingError::Unknown("nope".into())
        );
    }

    #[test]
    fn invalid_database_values_are_ignored_and_reported() {
        let mut l = Layers::default();
        l.database
            .insert("upstream.connect_timeout_ms".into(), json!("abc"));
        l.database.insert("gone.setting".into(), json!(1));
        let r = resolve(&l).unwrap();
        assert_eq!(r.settings.connect_timeout_ms, 10_000);
        assert_eq!(r.ignored.len(), 2);
    }

    #[test]
    fn validate_checks_bounds_inclusively() {
        let k = "upstream.connect_timeout_ms";
        assert_eq!(validate(k, &json!(100), Source::Database), Ok(100));
        assert_eq!(validate(k, &json!(300_000), Source::Database), Ok(300_000));
        assert!(validate(k, &json!(99), Source::Database).is_err());
        assert!(validate(k, &json!(300_001), Source::Database).is_err());
        assert!(validate(k, &json!(-1), Source::Database).is_err());
        assert!(validate(k, &json!(true), Source::Database).is_err());
    }

    #[test]
    fn definitions_are_sorted_unique_and_defaults_in_range() {
        for w in DEFS.windows(2) {
            assert!(w[0].key < w[1].key);
        }
        for d in DEFS {
            assert!((d.min..=d.max).contains(&d.default), "{}", d.key);
        }
    }
}
