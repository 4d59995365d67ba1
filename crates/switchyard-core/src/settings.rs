//! The registry of runtime settings and their resolution.
//!
//! Every tunable number has one definition here, a `pub const` [`Setting`]: key,
//! environment variable, typed kind (default and bounds), when a change applies
//! ([`Applies`]) and a sentence of documentation. [`DEFS`] lists them all, and
//! [`resolve`] builds the typed [`Settings`] by reading each const, so a misspelt setting
//! does not compile and one listed but never read fails a test. Values resolve by
//! precedence (highest first):
//! settings stored in the database (changed through the management API) → environment
//! variable → config file → built-in default. Per-connection overrides, where a setting
//! has them, are applied later by the stage that uses the setting.
//!
//! Resolution reads no environment, file or database itself: the shell collects the three
//! layers into `Layers` and passes them in.

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

/// When a changed value takes effect in the running gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Applies {
    /// Read from the settings in force each time it is used (a request, a cleanup run, a
    /// shutdown): the next use has the new value.
    Live,
    /// Read when a client connection is accepted: connections already open keep the
    /// value they were accepted with.
    NewConnections,
    /// Read once at start: a change applies after a restart.
    Restart,
}

impl Applies {
    /// The name the settings API and the docs use.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Live => "live",
            Self::NewConnections => "new_connections",
            Self::Restart => "restart",
        }
    }
}

/// An integer in `min..=max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Int {
    pub default: u64,
    pub min: u64,
    pub max: u64,
}

/// An integer brought into `min..=max`: values outside are clamped, not refused (SPEC
/// R10's queue limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clamped {
    pub default: u64,
    pub min: u64,
    pub max: u64,
}

/// A number in `0..=1`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fraction {
    pub default: f64,
}

/// `true` or `false`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bool {
    pub default: bool,
}

/// One of a fixed set of names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    pub default: &'static str,
    pub options: &'static [&'static str],
}

/// A name: 1-64 letters, digits, `-`, `_`, `.` or `:`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Name {
    pub default: &'static str,
}

/// A list of HTTP error statuses (400–599), as `"403,404"` or a JSON array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Statuses {
    pub default: &'static str,
}

/// A `redis://` or `rediss://` URL, or empty for none (the default). It may carry a
/// password, so views redact it and errors never echo it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisUrl;

/// Operator status restatements (SPEC R13): a JSON list of
/// [`crate::resilience::rules::Restatement`], empty by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restatements;

/// Operator provider error rules (SPEC R13): a JSON list of
/// [`crate::resilience::rules::ErrorRule`], empty by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorRules;

/// The type and bounds of a setting, as the registry holds them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Int(Int),
    Clamped(Clamped),
    Fraction(Fraction),
    Bool(Bool),
    Choice(Choice),
    Name(Name),
    Statuses(Statuses),
    RedisUrl(RedisUrl),
    Restatements(Restatements),
    ErrorRules(ErrorRules),
}

/// A setting's value.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum SettingValue {
    Bool(bool),
    Int(u64),
    Float(f64),
    Text(String),
}

impl SettingValue {
    /// The value as JSON, as it is stored.
    pub fn to_json(&self) -> Value {
        match self {
            Self::Bool(v) => Value::from(*v),
            Self::Int(v) => Value::from(*v),
            Self::Float(v) => Value::from(*v),
            Self::Text(v) => Value::from(v.clone()),
        }
    }
}

/// A kind whose resolved values read as one Rust type: what [`Settings`] is built from.
pub trait Typed: Copy {
    type Value;
    /// The default, typed.
    fn default_value(self) -> Self::Value;
    /// A resolved value, typed. Resolution gives every setting a value of its own kind;
    /// any other reads as the default.
    fn read(self, value: &SettingValue) -> Self::Value;
}

impl Typed for Int {
    type Value = u64;
    fn default_value(self) -> u64 {
        self.default
    }
    fn read(self, value: &SettingValue) -> u64 {
        match value {
            SettingValue::Int(v) => *v,
            _ => self.default,
        }
    }
}

impl Typed for Clamped {
    type Value = u64;
    fn default_value(self) -> u64 {
        self.default
    }
    fn read(self, value: &SettingValue) -> u64 {
        match value {
            SettingValue::Int(v) => *v,
            _ => self.default,
        }
    }
}

impl Typed for Fraction {
    type Value = f64;
    fn default_value(self) -> f64 {
        self.default
    }
    fn read(self, value: &SettingValue) -> f64 {
        match value {
            SettingValue::Float(v) => *v,
            _ => self.default,
        }
    }
}

impl Typed for Bool {
    type Value = bool;
    fn default_value(self) -> bool {
        self.default
    }
    fn read(self, value: &SettingValue) -> bool {
        match value {
            SettingValue::Bool(v) => *v,
            _ => self.default,
        }
    }
}

impl Typed for Choice {
    type Value = String;
    fn default_value(self) -> String {
        self.default.to_owned()
    }
    fn read(self, value: &SettingValue) -> String {
        match value {
            SettingValue::Text(v) => v.clone(),
            _ => self.default_value(),
        }
    }
}

impl Typed for Name {
    type Value = String;
    fn default_value(self) -> String {
        self.default.to_owned()
    }
    fn read(self, value: &SettingValue) -> String {
        match value {
            SettingValue::Text(v) => v.clone(),
            _ => self.default_value(),
        }
    }
}

/// The statuses as numbers (the text form is validated, `403,404`).
fn statuses(list: &str) -> Vec<u16> {
    list.split(',').filter_map(|c| c.parse().ok()).collect()
}

impl Typed for Statuses {
    type Value = Vec<u16>;
    fn default_value(self) -> Vec<u16> {
        statuses(self.default)
    }
    fn read(self, value: &SettingValue) -> Vec<u16> {
        match value {
            SettingValue::Text(v) => statuses(v),
            _ => self.default_value(),
        }
    }
}

impl Typed for Restatements {
    type Value = Vec<crate::resilience::rules::Restatement>;
    fn default_value(self) -> Self::Value {
        Vec::new()
    }
    fn read(self, value: &SettingValue) -> Self::Value {
        match value {
            SettingValue::Text(v) => {
                crate::resilience::rules::parse_restatements(v).unwrap_or_default()
            }
            _ => self.default_value(),
        }
    }
}

impl Typed for ErrorRules {
    type Value = Vec<crate::resilience::rules::ErrorRule>;
    fn default_value(self) -> Self::Value {
        Vec::new()
    }
    fn read(self, value: &SettingValue) -> Self::Value {
        match value {
            SettingValue::Text(v) => crate::resilience::rules::parse_rules(v).unwrap_or_default(),
            _ => self.default_value(),
        }
    }
}

impl Typed for RedisUrl {
    type Value = String;
    fn default_value(self) -> String {
        String::new()
    }
    fn read(self, value: &SettingValue) -> String {
        match value {
            SettingValue::Text(v) => v.clone(),
            _ => self.default_value(),
        }
    }
}

/// One setting, declared once: its key, environment variable, typed kind (type, default
/// and bounds), when a change applies and a sentence of documentation. [`DEFS`] lists
/// each one's [`SettingDef`]; [`resolve`] reads each one by its const, so the value has
/// the kind's type and a misspelt name does not compile.
///
/// ```
/// use switchyard_core::settings::{SettingValue, Typed, REQUEST_MAX_BODY_BYTES};
/// let limit: u64 = REQUEST_MAX_BODY_BYTES.kind.read(&SettingValue::Int(2048));
/// assert_eq!(limit, 2048);
/// ```
///
/// An integer setting does not read as a flag:
///
/// ```compile_fail
/// use switchyard_core::settings::{SettingValue, Typed, REQUEST_MAX_BODY_BYTES};
/// let on: bool = REQUEST_MAX_BODY_BYTES.kind.read(&SettingValue::Int(2048));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Setting<K> {
    pub key: &'static str,
    pub env: &'static str,
    pub kind: K,
    pub applies: Applies,
    pub doc: &'static str,
}

/// `Setting::def` for each kind (a `const fn` cannot be generic over a trait yet).
macro_rules! registry_entries {
    ($($kind:ident),*) => {$(
        impl Setting<$kind> {
            /// The setting as [`DEFS`] lists it.
            pub const fn def(&self) -> SettingDef {
                SettingDef {
                    key: self.key,
                    env: self.env,
                    kind: Kind::$kind(self.kind),
                    applies: self.applies,
                    doc: self.doc,
                }
            }
        }
    )*};
}

registry_entries!(
    Int,
    Clamped,
    Fraction,
    Bool,
    Choice,
    Name,
    Statuses,
    RedisUrl,
    Restatements,
    ErrorRules
);

/// One setting as the registry lists it, whatever its kind.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SettingDef {
    pub key: &'static str,
    pub env: &'static str,
    pub kind: Kind,
    pub applies: Applies,
    pub doc: &'static str,
}

impl SettingDef {
    pub fn default_value(&self) -> SettingValue {
        match self.kind {
            Kind::Int(Int { default, .. }) | Kind::Clamped(Clamped { default, .. }) => {
                SettingValue::Int(default)
            }
            Kind::Fraction(Fraction { default }) => SettingValue::Float(default),
            Kind::Bool(Bool { default }) => SettingValue::Bool(default),
            Kind::Choice(Choice { default, .. })
            | Kind::Name(Name { default })
            | Kind::Statuses(Statuses { default }) => SettingValue::Text(default.to_owned()),
            Kind::RedisUrl(RedisUrl) => SettingValue::Text(String::new()),
            Kind::Restatements(_) | Kind::ErrorRules(_) => SettingValue::Text("[]".to_owned()),
        }
    }

    /// What values are accepted, in words.
    pub fn constraint(&self) -> String {
        match self.kind {
            Kind::Int(Int { min, max, .. }) => format!("an integer between {min} and {max}"),
            Kind::Clamped(Clamped { min, max, .. }) => {
                format!("a whole number (brought into {min}..={max})")
            }
            Kind::Fraction(_) => "a number between 0 and 1".to_owned(),
            Kind::Bool(_) => "true or false".to_owned(),
            Kind::Choice(Choice { options, .. }) => format!("one of {}", options.join(", ")),
            Kind::Name(_) => "1-64 letters, digits, `-`, `_`, `.` or `:`".to_owned(),
            Kind::Statuses(_) => "a list of HTTP error statuses (400-599)".to_owned(),
            Kind::RedisUrl(_) => "a redis:// or rediss:// URL, or empty".to_owned(),
            Kind::Restatements(_) => "a JSON list of status restatements {id, provider, fromStatuses, toStatus, textMarkers, excludeMarkers?, defaultRetryAfterMs?}".to_owned(),
            Kind::ErrorRules(_) => "a JSON list of error rules {id, provider, statuses?, headers?, codes?, textMarkers?, excludeMarkers?, reason, scope?, cooldownMs?}".to_owned(),
        }
    }

    /// The value as views show it: URLs without their password.
    pub fn display(&self, v: &SettingValue) -> SettingValue {
        match (self.kind, v) {
            (Kind::RedisUrl(_), SettingValue::Text(url)) => SettingValue::Text(redact_url(url)),
            _ => v.clone(),
        }
    }
}

/// `redis://user:secret@host:6379/0` → `redis://user:***@host:6379/0`. Everything
/// between `://` and the last `@` is treated as credentials (a password may contain `/`,
/// `?` or `#`), and `password=` / `pass=` query values are masked too.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let rest = match rest.rsplit_once('@') {
        Some((userinfo, host)) => {
            let masked = match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:***"),
                None => "***".to_owned(),
            };
            format!("{masked}@{host}")
        }
        None => rest.to_owned(),
    };
    let rest = match rest.split_once('?') {
        Some((base, query)) => {
            let params: Vec<String> = query
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((k, _))
                        if k.eq_ignore_ascii_case("password") || k.eq_ignore_ascii_case("pass") =>
                    {
                        format!("{k}=***")
                    }
                    _ => p.to_owned(),
                })
                .collect();
            format!("{base}?{}", params.join("&"))
        }
        None => rest,
    };
    format!("{scheme}://{rest}")
}

/// One day in milliseconds, the upper bound of every duration setting: longer waits are
/// configuration mistakes, not intentions.
const DAY_MS: u64 = 86_400_000;

pub const BREAKER_API_KEY_DEGRADE_AT: Setting<Int> = Setting {
    key: "breaker.apiKey.degradeAt",
    env: "SWITCHYARD_BREAKER_API_KEY_DEGRADE_AT",
    // SPEC R1's API-key profile: 7 / 12 / 30 s, doubling after 3 cycles up to 4×.
    kind: Int {
        default: 7,
        min: 1,
        max: 10_000,
    },
    applies: Applies::Live,
    doc: "Consecutive provider-level failures after which an API-key provider's breaker shows DEGRADED (<= openAt).",
};

pub const BREAKER_API_KEY_DOUBLE_AFTER: Setting<Int> = Setting {
    key: "breaker.apiKey.doubleAfter",
    env: "SWITCHYARD_BREAKER_API_KEY_DOUBLE_AFTER",
    kind: Int {
        default: 3,
        min: 1,
        max: 20,
    },
    applies: Applies::Live,
    doc: "Open cycles without a successful close after which an API-key provider's reset timeout starts doubling.",
};

pub const BREAKER_API_KEY_MAX_MULTIPLIER: Setting<Int> = Setting {
    key: "breaker.apiKey.maxMultiplier",
    env: "SWITCHYARD_BREAKER_API_KEY_MAX_MULTIPLIER",
    kind: Int {
        default: 4,
        min: 1,
        max: 64,
    },
    applies: Applies::Live,
    doc: "Most times the base reset timeout an API-key provider's doubling may reach.",
};

pub const BREAKER_API_KEY_OPEN_AT: Setting<Int> = Setting {
    key: "breaker.apiKey.openAt",
    env: "SWITCHYARD_BREAKER_API_KEY_OPEN_AT",
    kind: Int {
        default: 12,
        min: 1,
        max: 10_000,
    },
    applies: Applies::Live,
    doc: "Consecutive provider-level failures that open an API-key provider's breaker (routing skips it).",
};

pub const BREAKER_API_KEY_RESET_MS: Setting<Int> = Setting {
    key: "breaker.apiKey.resetMs",
    env: "SWITCHYARD_BREAKER_API_KEY_RESET_MS",
    kind: Int {
        default: 30_000,
        min: 1_000,
        max: 3_600_000,
    },
    applies: Applies::Live,
    doc: "How long an API-key provider's open breaker waits before it lets a probe through.",
};

pub const BREAKER_LOCAL_DEGRADE_AT: Setting<Int> = Setting {
    key: "breaker.local.degradeAt",
    env: "SWITCHYARD_BREAKER_LOCAL_DEGRADE_AT",
    // SPEC R1's local profile: open at 2, degrade at the first failure ("derived":
    // half the open threshold), 15 s, doubling like API keys.
    kind: Int {
        default: 1,
        min: 1,
        max: 10_000,
    },
    applies: Applies::Live,
    doc: "Consecutive provider-level failures after which a local provider's breaker shows DEGRADED (<= openAt).",
};

pub const BREAKER_LOCAL_DOUBLE_AFTER: Setting<Int> = Setting {
    key: "breaker.local.doubleAfter",
    env: "SWITCHYARD_BREAKER_LOCAL_DOUBLE_AFTER",
    kind: Int {
        default: 3,
        min: 1,
        max: 20,
    },
    applies: Applies::Live,
    doc: "Open cycles without a successful close after which a local provider's reset timeout starts doubling.",
};

pub const BREAKER_LOCAL_MAX_MULTIPLIER: Setting<Int> = Setting {
    key: "breaker.local.maxMultiplier",
    env: "SWITCHYARD_BREAKER_LOCAL_MAX_MULTIPLIER",
    kind: Int {
        default: 4,
        min: 1,
        max: 64,
    },
    applies: Applies::Live,
    doc: "Most times the base reset timeout a local provider's doubling may reach.",
};

pub const BREAKER_LOCAL_OPEN_AT: Setting<Int> = Setting {
    key: "breaker.local.openAt",
    env: "SWITCHYARD_BREAKER_LOCAL_OPEN_AT",
    kind: Int {
        default: 2,
        min: 1,
        max: 10_000,
    },
    applies: Applies::Live,
    doc: "Consecutive provider-level failures that open a local provider's breaker (routing skips it).",
};

pub const BREAKER_LOCAL_RESET_MS: Setting<Int> = Setting {
    key: "breaker.local.resetMs",
    env: "SWITCHYARD_BREAKER_LOCAL_RESET_MS",
    kind: Int {
        default: 15_000,
        min: 1_000,
        max: 3_600_000,
    },
    applies: Applies::Live,
    doc: "How long a local provider's open breaker waits before it lets a probe through.",
};

pub const BREAKER_OAUTH_DEGRADE_AT: Setting<Int> = Setting {
    key: "breaker.oauth.degradeAt",
    env: "SWITCHYARD_BREAKER_OAUTH_DEGRADE_AT",
    // SPEC R1's OAuth profile: 5 / 8 / 60 s, doubling after 2 cycles up to 8×.
    kind: Int {
        default: 5,
        min: 1,
        max: 10_000,
    },
    applies: Applies::Live,
    doc: "Consecutive provider-level failures after which an OAuth provider's breaker shows DEGRADED (<= openAt).",
};

pub const BREAKER_OAUTH_DOUBLE_AFTER: Setting<Int> = Setting {
    key: "breaker.oauth.doubleAfter",
    env: "SWITCHYARD_BREAKER_OAUTH_DOUBLE_AFTER",
    kind: Int {
        default: 2,
        min: 1,
        max: 20,
    },
    applies: Applies::Live,
    doc: "Open cycles without a successful close after which an OAuth provider's reset timeout starts doubling.",
};

pub const BREAKER_OAUTH_MAX_MULTIPLIER: Setting<Int> = Setting {
    key: "breaker.oauth.maxMultiplier",
    env: "SWITCHYARD_BREAKER_OAUTH_MAX_MULTIPLIER",
    kind: Int {
        default: 8,
        min: 1,
        max: 64,
    },
    applies: Applies::Live,
    doc: "Most times the base reset timeout an OAuth provider's doubling may reach.",
};

pub const BREAKER_OAUTH_OPEN_AT: Setting<Int> = Setting {
    key: "breaker.oauth.openAt",
    env: "SWITCHYARD_BREAKER_OAUTH_OPEN_AT",
    kind: Int {
        default: 8,
        min: 1,
        max: 10_000,
    },
    applies: Applies::Live,
    doc: "Consecutive provider-level failures that open an OAuth provider's breaker (routing skips it).",
};

pub const BREAKER_OAUTH_RESET_MS: Setting<Int> = Setting {
    key: "breaker.oauth.resetMs",
    env: "SWITCHYARD_BREAKER_OAUTH_RESET_MS",
    kind: Int {
        default: 60_000,
        min: 1_000,
        max: 3_600_000,
    },
    applies: Applies::Live,
    doc: "How long an OAuth provider's open breaker waits before it lets a probe through.",
};

pub const COMBO_COOLDOWN_WAIT_BUDGET_MS: Setting<Int> = Setting {
    key: "comboCooldownWait.budgetMs",
    env: "COMBO_COOLDOWN_WAIT_BUDGET_MS",
    // SPEC R9's default: five minutes in all for one request, waits included.
    kind: Int {
        default: 300_000,
        min: 0,
        max: DAY_MS,
    },
    applies: Applies::Live,
    doc: "Longest a combo request may take in all when it waits out cooldowns.",
};

pub const COMBO_COOLDOWN_WAIT_ENABLED: Setting<Bool> = Setting {
    key: "comboCooldownWait.enabled",
    env: "COMBO_COOLDOWN_WAIT_ENABLED",
    kind: Bool { default: true },
    applies: Applies::Live,
    doc: "Combo requests wait out short transient cooldowns and are dispatched again instead of failing.",
};

pub const COMBO_COOLDOWN_WAIT_MAX_ATTEMPTS: Setting<Int> = Setting {
    key: "comboCooldownWait.maxAttempts",
    env: "COMBO_COOLDOWN_WAIT_MAX_ATTEMPTS",
    kind: Int {
        default: 5,
        min: 0,
        max: 100,
    },
    applies: Applies::Live,
    doc: "Most cooldown waits per combo request.",
};

pub const COMBO_COOLDOWN_WAIT_MAX_WAIT_MS: Setting<Int> = Setting {
    key: "comboCooldownWait.maxWaitMs",
    env: "COMBO_COOLDOWN_WAIT_MAX_WAIT_MS",
    // SPEC R9's default covers a provider's one-minute rate window.
    kind: Int {
        default: 90_000,
        min: 0,
        max: DAY_MS,
    },
    applies: Applies::Live,
    doc: "Longest single cooldown wait of a combo request; longer cooldowns answer 429 at once.",
};

pub const CONCURRENCY_GLOBAL_MAX: Setting<Int> = Setting {
    key: "concurrency.globalMax",
    env: "SWITCHYARD_MAX_CONCURRENT",
    // SPEC R7's global gate; off unless the operator sizes the whole gateway.
    kind: Int {
        default: 0,
        min: 0,
        max: 1_000_000,
    },
    applies: Applies::Live,
    doc: "Requests in flight upstream across the whole gateway; 0 = no limit.",
};

pub const CONCURRENCY_MAX_WAITERS: Setting<Int> = Setting {
    key: "concurrency.maxWaiters",
    env: "SWITCHYARD_GATE_MAX_WAITERS",
    // A memory bound, not a policy (that is requestQueue.maxQueueDepth): every gate's
    // queue is finite even when the operator sets no depth.
    kind: Int {
        default: 10_000,
        min: 1,
        max: 1_000_000,
    },
    applies: Applies::Live,
    doc: "Most requests waiting for any one concurrency gate; beyond it SEMAPHORE_QUEUE_FULL.",
};

pub const COOLDOWN_API_KEY_BACKOFF_STEPS: Setting<Int> = Setting {
    key: "cooldown.apiKey.backoffSteps",
    env: "SWITCHYARD_COOLDOWN_API_KEY_BACKOFF_STEPS",
    kind: Int {
        default: 5,
        min: 0,
        max: 20,
    },
    applies: Applies::Live,
    doc: "Most doublings of an API-key and local connection's cooldown (base × 2^min(level, steps), capped at 30 min).",
};

pub const COOLDOWN_API_KEY_BASE_MS: Setting<Int> = Setting {
    key: "cooldown.apiKey.baseMs",
    env: "SWITCHYARD_COOLDOWN_API_KEY_BASE_MS",
    // SPEC R3: API key (and local) 3 s with 5 backoff steps.
    kind: Int {
        default: 3_000,
        min: 100,
        max: 600_000,
    },
    applies: Applies::Live,
    doc: "First cooldown of an API-key and local connection after a failure.",
};

pub const COOLDOWN_OAUTH_BACKOFF_STEPS: Setting<Int> = Setting {
    key: "cooldown.oauth.backoffSteps",
    env: "SWITCHYARD_COOLDOWN_OAUTH_BACKOFF_STEPS",
    kind: Int {
        default: 8,
        min: 0,
        max: 20,
    },
    applies: Applies::Live,
    doc: "Most doublings of an OAuth connection's cooldown (base × 2^min(level, steps), capped at 30 min).",
};

pub const COOLDOWN_OAUTH_BASE_MS: Setting<Int> = Setting {
    key: "cooldown.oauth.baseMs",
    env: "SWITCHYARD_COOLDOWN_OAUTH_BASE_MS",
    // SPEC R3: OAuth 5 s with 8 backoff steps.
    kind: Int {
        default: 5_000,
        min: 100,
        max: 600_000,
    },
    applies: Applies::Live,
    doc: "First cooldown of an OAuth connection after a failure.",
};

pub const PROVIDER_COOLDOWN_API_KEY_COOLDOWN_MS: Setting<Int> = Setting {
    key: "providerCooldown.apiKey.cooldownMs",
    env: "OMNIROUTE_PROVIDER_BREAKER_API_KEY_COOLDOWN_MS",
    // SPEC R2's API-key profile: 10 minutes.
    kind: Int {
        default: 600_000,
        min: 1_000,
        max: DAY_MS,
    },
    applies: Applies::Live,
    doc: "How long an API-key provider is skipped once the provider cooldown trips.",
};

pub const PROVIDER_COOLDOWN_API_KEY_FAILURE_THRESHOLD: Setting<Int> = Setting {
    key: "providerCooldown.apiKey.failureThreshold",
    env: "OMNIROUTE_PROVIDER_BREAKER_API_KEY_FAILURE_THRESHOLD",
    kind: Int {
        default: 15,
        min: 1,
        max: 10_000,
    },
    applies: Applies::Live,
    doc: "Provider-level failures within the window that trip an API-key provider's cooldown.",
};

pub const PROVIDER_COOLDOWN_API_KEY_FAILURE_WINDOW_MS: Setting<Int> = Setting {
    key: "providerCooldown.apiKey.failureWindowMs",
    env: "OMNIROUTE_PROVIDER_BREAKER_API_KEY_FAILURE_WINDOW_MS",
    kind: Int {
        default: 1_800_000,
        min: 1_000,
        max: DAY_MS,
    },
    applies: Applies::Live,
    doc: "The window an API-key provider's failures are counted in.",
};

pub const PROVIDER_COOLDOWN_ENABLED: Setting<Bool> = Setting {
    key: "providerCooldown.enabled",
    env: "PROVIDER_COOLDOWN_ENABLED",
    // Opt-in (SPEC R2): the breaker already contains failing providers; this gate is
    // for operators who want a slower, window-based one on top.
    kind: Bool { default: false },
    applies: Applies::Live,
    doc: "Cool a provider after N failures within a window (beside the breaker).",
};

pub const PROVIDER_COOLDOWN_OAUTH_COOLDOWN_MS: Setting<Int> = Setting {
    key: "providerCooldown.oauth.cooldownMs",
    env: "OMNIROUTE_PROVIDER_BREAKER_OAUTH_COOLDOWN_MS",
    // SPEC R2's OAuth profile: 5 minutes.
    kind: Int {
        default: 300_000,
        min: 1_000,
        max: DAY_MS,
    },
    applies: Applies::Live,
    doc: "How long an OAuth provider is skipped once the provider cooldown trips.",
};

pub const PROVIDER_COOLDOWN_OAUTH_FAILURE_THRESHOLD: Setting<Int> = Setting {
    key: "providerCooldown.oauth.failureThreshold",
    env: "OMNIROUTE_PROVIDER_BREAKER_OAUTH_FAILURE_THRESHOLD",
    kind: Int {
        default: 10,
        min: 1,
        max: 10_000,
    },
    applies: Applies::Live,
    doc: "Provider-level failures within the window that trip an OAuth provider's cooldown.",
};

pub const PROVIDER_COOLDOWN_OAUTH_FAILURE_WINDOW_MS: Setting<Int> = Setting {
    key: "providerCooldown.oauth.failureWindowMs",
    env: "OMNIROUTE_PROVIDER_BREAKER_OAUTH_FAILURE_WINDOW_MS",
    kind: Int {
        default: 900_000,
        min: 1_000,
        max: DAY_MS,
    },
    applies: Applies::Live,
    doc: "The window an OAuth provider's failures are counted in.",
};

pub const MONITORING_ACCESS: Setting<Choice> = Setting {
    key: "monitoring.access",
    env: "SWITCHYARD_MONITORING_ACCESS",
    // Open by default, as Prometheus scrapers expect; the health detail is behind the
    // admin credential whatever this says.
    kind: Choice {
        default: "none",
        options: &["none", "admin"],
    },
    applies: Applies::Live,
    doc: "What `GET /metrics` needs: `none` (open, for Prometheus) or `admin` (the admin credential). The health status is always public, its detail always needs the admin credential.",
};

pub const OAUTH_REFRESH_MARGIN_MS: Setting<Int> = Setting {
    key: "oauth.refreshMarginMs",
    env: "SWITCHYARD_OAUTH_REFRESH_MARGIN_MS",
    // Claude Code refreshes five minutes before the expiry; so does the gateway, which
    // leaves time for two retries of a failed refresh.
    kind: Int {
        default: 300_000,
        min: 0,
        max: DAY_MS,
    },
    applies: Applies::Live,
    doc: "How long before an OAuth subscription token expires the gateway refreshes it.",
};

pub const OAUTH_REFRESH_WAIT_MS: Setting<Int> = Setting {
    key: "oauth.refreshWaitMs",
    env: "SWITCHYARD_OAUTH_REFRESH_WAIT_MS",
    // A token endpoint answers in well under a second; ten seconds covers a slow one
    // without holding requests for long.
    kind: Int {
        default: 10_000,
        min: 100,
        max: 120_000,
    },
    applies: Applies::Live,
    doc: "Longest a request waits for a refresh of its connection's OAuth token (an expired token, or a 401) before it fails over.",
};

pub const QUOTA_CONSUMPTION_RETENTION_DAYS: Setting<Int> = Setting {
    key: "quota.consumptionRetentionDays",
    env: "QUOTA_CONSUMPTION_RETENTION_DAYS",
    // Two weeks of history for the usage views; slots still inside their window
    // (a 30-day month) are kept regardless.
    kind: Int {
        default: 14,
        min: 1,
        max: 3_650,
    },
    applies: Applies::Live,
    doc: "Days quota consumption slots are kept after they leave their window.",
};

pub const QUOTA_SATURATION_THRESHOLD: Setting<Fraction> = Setting {
    key: "quota.saturationThreshold",
    env: "QUOTA_SATURATION_THRESHOLD",
    // Half used: from here on the remaining half is shared by fair share, so keys
    // that borrowed early cannot starve the others (SPEC Q2).
    kind: Fraction { default: 0.5 },
    applies: Applies::Live,
    doc: "Used fraction of a pool dimension at which fair shares become strict.",
};

pub const QUOTA_SOFT_DEPRIORITIZE_FACTOR: Setting<Fraction> = Setting {
    key: "quota.softDeprioritizeFactor",
    env: "QUOTA_SOFT_DEPRIORITIZE_FACTOR",
    // SPEC Q7's default: a soft-penalized target still wins over one scored 30 %
    // lower, so the penalty reorders near-ties without starving anyone.
    kind: Fraction { default: 0.7 },
    applies: Applies::Live,
    doc: "Score multiplier for targets where the key is over its soft share.",
};

pub const QUOTA_SHARE_CONCURRENCY_LIMIT_ENABLED: Setting<Bool> = Setting {
    key: "quotaShareConcurrencyLimit.enabled",
    env: "QUOTA_SHARE_CONCURRENCY_LIMIT_ENABLED",
    // SPEC R8: subscription accounts accept one to three requests at a time; a
    // qtSd/ dispatch waits for a slot instead of flooding them.
    kind: Bool { default: true },
    applies: Applies::Live,
    doc: "qtSd/ dispatches wait for a slot on connections with max_concurrent (fair across keys).",
};

pub const QUOTA_SHARE_CONCURRENCY_LIMIT_MAX_QUEUE: Setting<Int> = Setting {
    key: "quotaShareConcurrencyLimit.maxQueue",
    env: "QUOTA_SHARE_CONCURRENCY_LIMIT_MAX_QUEUE",
    // Bounds memory per connection; a longer queue would wait minutes anyway.
    kind: Int {
        default: 1_000,
        min: 1,
        max: 100_000,
    },
    applies: Applies::Live,
    doc: "Most qtSd/ requests waiting for one connection; beyond it they go ahead without a slot.",
};

pub const QUOTA_SHARE_CONCURRENCY_LIMIT_MAX_WAIT_MS: Setting<Int> = Setting {
    key: "quotaShareConcurrencyLimit.maxWaitMs",
    env: "QUOTA_SHARE_CONCURRENCY_LIMIT_MAX_WAIT_MS",
    // Long enough for a few queued completions to finish ahead, short enough that a
    // stuck account does not hold clients for minutes; then fail open (SPEC R8).
    kind: Int {
        default: 60_000,
        min: 0,
        max: DAY_MS,
    },
    applies: Applies::Live,
    doc: "Longest a qtSd/ request waits for a connection slot before going ahead without one.",
};

pub const QUOTA_STORE_DRIVER: Setting<Choice> = Setting {
    key: "quotaStore.driver",
    env: "QUOTA_STORE_DRIVER",
    // SQLite needs nothing set up; Redis is for several gateway replicas.
    kind: Choice {
        default: "sqlite",
        options: &["sqlite", "redis"],
    },
    applies: Applies::Restart,
    doc: "Where quota counters live. Read at start; an unreachable Redis falls back to SQLite.",
};

pub const QUOTA_STORE_REDIS_PREFIX: Setting<Name> = Setting {
    key: "quotaStore.redisPrefix",
    env: "QUOTA_STORE_REDIS_PREFIX",
    // Namespaces the counters, so several deployments can share one Redis.
    kind: Name {
        default: "switchyard",
    },
    applies: Applies::Restart,
    doc: "Prefix of every Redis key the quota store writes. Read at start.",
};

pub const QUOTA_STORE_REDIS_URL: Setting<RedisUrl> = Setting {
    key: "quotaStore.redisUrl",
    env: "QUOTA_STORE_REDIS_URL",
    kind: RedisUrl,
    applies: Applies::Restart,
    doc: "Redis URL for the redis quota store. Read at start.",
};

pub const QUOTA_STORE_REQUIRE_REDIS: Setting<Bool> = Setting {
    key: "quotaStore.requireRedis",
    env: "QUOTA_STORE_REQUIRE_REDIS",
    // Off: one gateway runs on without Redis. On for several replicas, where a
    // replica counting on its own would let each of them use the whole limit.
    kind: Bool { default: false },
    applies: Applies::Restart,
    doc: "With the redis driver, refuse to start when Redis is unset, invalid or unreachable instead of falling back to SQLite. Read at start.",
};

pub const REQUEST_LOG_MAX_ROWS: Setting<Int> = Setting {
    key: "requestLog.maxRows",
    env: "SWITCHYARD_REQUEST_LOG_MAX_ROWS",
    // A million rows is a few hundred MiB of SQLite and keeps the dashboard's queries
    // fast; the oldest rows go first.
    kind: Int {
        default: 1_000_000,
        min: 1_000,
        max: 1_000_000_000,
    },
    applies: Applies::Live,
    doc: "Most request-log rows kept; the oldest beyond it are pruned in small batches off the request path.",
};

pub const REQUEST_LOG_RETENTION_DAYS: Setting<Int> = Setting {
    key: "requestLog.retentionDays",
    env: "SWITCHYARD_REQUEST_LOG_RETENTION_DAYS",
    // A month of history for the dashboard and audits.
    kind: Int {
        default: 30,
        min: 1,
        max: 3_650,
    },
    applies: Applies::Live,
    doc: "Days request-log rows are kept; older rows are pruned in small batches off the request path.",
};

pub const REQUEST_MAX_BODY_BYTES: Setting<Int> = Setting {
    key: "request.max_body_bytes",
    env: "SWITCHYARD_MAX_BODY_BYTES",
    // 10 MiB holds long multi-turn contexts with inline images; larger bodies are
    // almost always mistakes that would only cost upstream money.
    kind: Int {
        default: 10 * 1024 * 1024,
        min: 1024,
        max: 512 * 1024 * 1024,
    },
    applies: Applies::Live,
    doc: "Largest accepted client request body, in bytes; larger bodies get 413.",
};

pub const REQUEST_QUEUE_EXECUTION_MAX_WAIT_MS: Setting<Clamped> = Setting {
    key: "requestQueue.executionMaxWaitMs",
    env: "RATE_LIMIT_EXECUTION_MAX_WAIT_MS",
    // SPEC R10: a last bound on an upstream exchange after dispatch; raised to
    // upstream.first_byte_timeout_ms when that is longer.
    kind: Clamped {
        default: 600_000,
        min: 1,
        max: DAY_MS,
    },
    applies: Applies::Live,
    doc: "Longest an upstream exchange may run after dispatch (RATE_LIMIT_EXECUTION_TIMEOUT, 504).",
};

pub const REQUEST_QUEUE_MAX_QUEUE_DEPTH: Setting<Clamped> = Setting {
    key: "requestQueue.maxQueueDepth",
    env: "RATE_LIMIT_MAX_QUEUE_DEPTH",
    // SPEC R10: 0 keeps the queue unbounded (up to concurrency.maxWaiters).
    kind: Clamped {
        default: 0,
        min: 0,
        max: 100_000,
    },
    applies: Applies::Live,
    doc: "Requests waiting for one connection beyond which new ones are refused at once (RATE_LIMIT_QUEUE_FULL); 0 = no limit.",
};

pub const REQUEST_QUEUE_MAX_WAIT_MS: Setting<Clamped> = Setting {
    key: "requestQueue.maxWaitMs",
    env: "RATE_LIMIT_MAX_WAIT_MS",
    // SPEC R10's default: half a minute in a queue, then SEMAPHORE_TIMEOUT.
    kind: Clamped {
        default: 30_000,
        min: 1,
        max: DAY_MS,
    },
    applies: Applies::Live,
    doc: "Longest a request waits for a concurrency slot (SEMAPHORE_TIMEOUT).",
};

pub const RESILIENCE_MODEL_LOCKOUT_BASE_COOLDOWN_MS: Setting<Int> = Setting {
    key: "resilience.modelLockout.baseCooldownMs",
    env: "MODEL_LOCKOUT_BASE_COOLDOWN_MS",
    // SPEC R5: two minutes for a first lock.
    kind: Int {
        default: 120_000,
        min: 1_000,
        max: DAY_MS,
    },
    applies: Applies::Live,
    doc: "First lock of a failing model on a connection.",
};

pub const RESILIENCE_MODEL_LOCKOUT_ENABLED: Setting<Bool> = Setting {
    key: "resilience.modelLockout.enabled",
    env: "MODEL_LOCKOUT_ENABLED",
    // Off by default (SPEC R5): connection cooldowns already cover most failures.
    kind: Bool { default: false },
    applies: Applies::Live,
    doc: "Lock a failing model on one connection while the account keeps serving others.",
};

pub const RESILIENCE_MODEL_LOCKOUT_ERROR_CODES: Setting<Statuses> = Setting {
    key: "resilience.modelLockout.errorCodes",
    env: "MODEL_LOCKOUT_ERROR_CODES",
    kind: Statuses {
        default: "403,404,429,502,503,504",
    },
    applies: Applies::Live,
    doc: "Upstream statuses that lock a model.",
};

pub const RESILIENCE_STATUS_RESTATEMENTS: Setting<Restatements> = Setting {
    key: "resilience.statusRestatements",
    env: "STATUS_RESTATEMENTS",
    kind: Restatements,
    applies: Applies::Live,
    doc: "Operator status restatements, applied before the built-in ones (SPEC R13): a provider family's misleading status becomes the one it means.",
};

pub const RESILIENCE_PROVIDER_ERROR_RULES: Setting<ErrorRules> = Setting {
    key: "resilience.providerErrorRules",
    env: "PROVIDER_ERROR_RULES",
    kind: ErrorRules,
    applies: Applies::Live,
    doc: "Operator provider error rules, matched before the built-in ones (SPEC R13); a family with one has its full error text matched and its rules' scope honoured.",
};

pub const RESILIENCE_MODEL_LOCKOUT_MAX_BACKOFF_STEPS: Setting<Int> = Setting {
    key: "resilience.modelLockout.maxBackoffSteps",
    env: "MODEL_LOCKOUT_MAX_BACKOFF_STEPS",
    kind: Int {
        default: 10,
        min: 0,
        max: 20,
    },
    applies: Applies::Live,
    doc: "Most doublings of a repeated lock.",
};

pub const RESILIENCE_MODEL_LOCKOUT_MAX_COOLDOWN_MS: Setting<Int> = Setting {
    key: "resilience.modelLockout.maxCooldownMs",
    env: "MODEL_LOCKOUT_MAX_COOLDOWN_MS",
    // SPEC R5: half an hour at most; must not be below the base.
    kind: Int {
        default: 1_800_000,
        min: 1_000,
        max: DAY_MS,
    },
    applies: Applies::Live,
    doc: "Longest lock of a model (>= the base).",
};

pub const RESILIENCE_MODEL_LOCKOUT_USE_EXPONENTIAL_BACKOFF: Setting<Bool> = Setting {
    key: "resilience.modelLockout.useExponentialBackoff",
    env: "MODEL_LOCKOUT_USE_EXPONENTIAL_BACKOFF",
    kind: Bool { default: true },
    applies: Applies::Live,
    doc: "Double the lock on each repeated failure (else every lock is the base).",
};

pub const SERVER_BODY_READ_TIMEOUT_MS: Setting<Int> = Setting {
    key: "server.body_read_timeout_ms",
    env: "SWITCHYARD_BODY_READ_TIMEOUT_MS",
    // A deadline for the whole body, not a gap between frames: a gap lets a client
    // drip one byte per gap and hold the request forever. One minute moves the
    // largest accepted body (10 MiB) at under 2 Mbit/s; chat bodies take milliseconds.
    kind: Int {
        default: 60_000,
        min: 100,
        max: DAY_MS,
    },
    applies: Applies::NewConnections,
    doc: "Deadline for a request's whole body, from its head; a late body gets 408 request_body_timeout.",
};

pub const SERVER_HEADER_READ_TIMEOUT_MS: Setting<Int> = Setting {
    key: "server.header_read_timeout_ms",
    env: "SWITCHYARD_HEADER_READ_TIMEOUT_MS",
    // A request head is a few KiB: ten seconds is ample on any link, and short
    // enough that silent or half-sent heads cannot pile up.
    kind: Int {
        default: 10_000,
        min: 100,
        max: DAY_MS,
    },
    applies: Applies::NewConnections,
    doc: "Deadline for a request head, from accept (or from the first byte of the next request on a kept-alive connection).",
};

pub const SERVER_IO_THREADS: Setting<Int> = Setting {
    key: "server.io_threads",
    env: "SWITCHYARD_IO_THREADS",
    // 0 = one per CPU core: each I/O thread runs its own single-threaded runtime, so
    // a request's tasks never hop between threads.
    kind: Int {
        default: 0,
        min: 0,
        max: 256,
    },
    applies: Applies::Restart,
    doc: "I/O threads serving requests (0 = one per core). Read at start.",
};

pub const SERVER_KEEPALIVE_IDLE_TIMEOUT_MS: Setting<Int> = Setting {
    key: "server.keepalive_idle_timeout_ms",
    env: "SWITCHYARD_KEEPALIVE_IDLE_TIMEOUT_MS",
    // Longer than the 60 s idle timeout of common load balancers, so they close an
    // idle connection before the gateway does and never reuse one it just closed
    // (nginx uses 75 s for the same reason).
    kind: Int {
        default: 75_000,
        min: 100,
        max: DAY_MS,
    },
    applies: Applies::NewConnections,
    doc:
        "How long a client connection may stay open with no request in flight and nothing received.",
};

pub const SERVER_MAX_CONNECTIONS: Setting<Int> = Setting {
    key: "server.max_connections",
    env: "SWITCHYARD_MAX_CONNECTIONS",
    // Well above what a gateway behind a pooling load balancer or a fleet of SDK
    // clients keeps open, well below the memory such connections cost; keep it under
    // the process's file-descriptor limit (each request also needs an upstream one).
    kind: Int {
        default: 10_000,
        min: 1,
        max: 1_000_000,
    },
    applies: Applies::Restart,
    doc: "Most open client connections; beyond, new connections are closed at once. Read at start.",
};

pub const SERVER_SHUTDOWN_GRACE_MS: Setting<Int> = Setting {
    key: "server.shutdown_grace_ms",
    env: "SWITCHYARD_SHUTDOWN_GRACE_MS",
    // Long enough for typical completions to finish, short enough for orchestrators
    // (Kubernetes defaults to 30 s before SIGKILL).
    kind: Int {
        default: 25_000,
        min: 0,
        max: 600_000,
    },
    applies: Applies::Live,
    doc: "On SIGINT/SIGTERM, how long in-flight requests may run before they are cut.",
};

pub const STREAM_CONTENT_STALL_ADAPTIVE: Setting<Bool> = Setting {
    key: "streamContentStall.adaptive",
    env: "STREAM_FIRST_OUTPUT_ADAPTIVE",
    // On (SPEC R11): long histories, many tools and reasoning models are slow to start.
    kind: Bool { default: true },
    applies: Applies::Live,
    doc: "Raise the first-output budget for long histories, many tools, long prompts, high reasoning effort, thinking models and third-party Claude-format providers, up to streamContentStall.firstOutputMaxMs.",
};

pub const STREAM_CONTENT_STALL_FIRST_OUTPUT_MAX_MS: Setting<Int> = Setting {
    key: "streamContentStall.firstOutputMaxMs",
    env: "STREAM_FIRST_OUTPUT_MAX_MS",
    // The seed engine's cap: three minutes covers a high-effort reasoning model's start.
    kind: Int {
        default: 180_000,
        min: 1_000,
        max: DAY_MS,
    },
    applies: Applies::Live,
    doc: "Cap of the adaptive first-output budget.",
};

pub const STREAM_CONTENT_STALL_FIRST_OUTPUT_MS: Setting<Int> = Setting {
    key: "streamContentStall.firstOutputMs",
    env: "STREAM_FIRST_OUTPUT_TIMEOUT_MS",
    // The seed engine's base (SPEC R11): a stream with no output event in 80 s fails over.
    kind: Int {
        default: 80_000,
        min: 0,
        max: DAY_MS,
    },
    applies: Applies::Live,
    doc: "How long a streamed attempt may go without its first output event (text or tool call; reasoning restarts the budget, heartbeats do not) before the next candidate is tried. The last candidate is never cut for it. 0 = off.",
};

pub const STREAM_CONTENT_STALL_IDLE_MS: Setting<Int> = Setting {
    key: "streamContentStall.idleMs",
    env: "STREAM_CONTENT_STALL_TIMEOUT_MS",
    // Output events of a healthy stream come seconds apart; reasoning restarts it, so
    // two minutes only ends streams that stopped producing while staying connected.
    kind: Int {
        default: 120_000,
        min: 0,
        max: DAY_MS,
    },
    applies: Applies::Live,
    doc: "Longest gap between output (or reasoning) events of a stream once it has produced output; heartbeats do not count. 0 = off.",
};

pub const ROUTING_AUTO_HEALTH_WEIGHT: Setting<Fraction> = Setting {
    key: "routing.auto.healthWeight",
    env: "ROUTING_AUTO_HEALTH_WEIGHT",
    // See `Weights::default` in routing/strategy/auto.rs.
    kind: Fraction { default: 0.35 },
    applies: Applies::Live,
    doc: "Weight of success rate of the connection × model in an `auto` combo's score (SPEC R19); the score is the weighted mean of the five factors.",
};

pub const ROUTING_AUTO_SPEED_WEIGHT: Setting<Fraction> = Setting {
    key: "routing.auto.speedWeight",
    env: "ROUTING_AUTO_SPEED_WEIGHT",
    // See `Weights::default` in routing/strategy/auto.rs.
    kind: Fraction { default: 0.2 },
    applies: Applies::Live,
    doc: "Weight of speed (mean time to response headers; streams: first byte) in an `auto` combo's score (SPEC R19); the score is the weighted mean of the five factors.",
};

pub const ROUTING_AUTO_PRICE_WEIGHT: Setting<Fraction> = Setting {
    key: "routing.auto.priceWeight",
    env: "ROUTING_AUTO_PRICE_WEIGHT",
    // See `Weights::default` in routing/strategy/auto.rs.
    kind: Fraction { default: 0.2 },
    applies: Applies::Live,
    doc: "Weight of price (declared target cost, else the catalog's input price) in an `auto` combo's score (SPEC R19); the score is the weighted mean of the five factors.",
};

pub const ROUTING_AUTO_QUOTA_WEIGHT: Setting<Fraction> = Setting {
    key: "routing.auto.quotaWeight",
    env: "ROUTING_AUTO_QUOTA_WEIGHT",
    // See `Weights::default` in routing/strategy/auto.rs.
    kind: Fraction { default: 0.15 },
    applies: Applies::Live,
    doc: "Weight of quota left (the provider's readings, SPEC Q6) in an `auto` combo's score (SPEC R19); the score is the weighted mean of the five factors.",
};

pub const ROUTING_AUTO_LOAD_WEIGHT: Setting<Fraction> = Setting {
    key: "routing.auto.loadWeight",
    env: "ROUTING_AUTO_LOAD_WEIGHT",
    // See `Weights::default` in routing/strategy/auto.rs.
    kind: Fraction { default: 0.1 },
    applies: Applies::Live,
    doc: "Weight of idleness (requests running and waiting on the connection) in an `auto` combo's score (SPEC R19); the score is the weighted mean of the five factors.",
};

pub const ROUTING_AUTO_EXPLORATION: Setting<Fraction> = Setting {
    key: "routing.auto.exploration",
    env: "ROUTING_AUTO_EXPLORATION",
    // One request in twenty keeps the accounts the score does not favour measured.
    kind: Fraction { default: 0.05 },
    applies: Applies::Live,
    doc: "Share of an `auto` combo's requests whose first candidate is drawn at random instead of scored (SPEC R19); 0 = always the best score.",
};

pub const ROUTING_CONTEXT_RELAY_HANDOFF_AT: Setting<Fraction> = Setting {
    key: "routing.contextRelay.handoffAt",
    env: "ROUTING_CONTEXT_RELAY_HANDOFF_AT",
    // See `RelaySettings::default` in routing/relay.rs.
    kind: Fraction { default: 0.85 },
    applies: Applies::Live,
    doc: "Used fraction of a quota window (the provider's readings, SPEC Q6) from which a `context-relay` combo has the serving account summarize the session's conversation for the next account (SPEC R19).",
};

pub const ROUTING_CONTEXT_RELAY_STOP_AT: Setting<Fraction> = Setting {
    key: "routing.contextRelay.stopAt",
    env: "ROUTING_CONTEXT_RELAY_STOP_AT",
    kind: Fraction { default: 0.95 },
    applies: Applies::Live,
    doc: "Used fraction of a quota window from which a `context-relay` combo puts the account last, so the session moves on with its summary (SPEC R19).",
};

pub const ROUTING_FUSION_QUORUM: Setting<Int> = Setting {
    key: "routing.fusion.quorum",
    env: "ROUTING_FUSION_QUORUM",
    // See `FusionSettings::default` in routing/shape.rs.
    kind: Int {
        default: 2,
        min: 1,
        max: 16,
    },
    applies: Applies::Live,
    doc: "Answers a `fusion` combo's panel must give before the grace starts (SPEC R19); a quorum above the panel's size waits for the whole panel.",
};

pub const ROUTING_FUSION_GRACE_MS: Setting<Int> = Setting {
    key: "routing.fusion.graceMs",
    env: "ROUTING_FUSION_GRACE_MS",
    kind: Int {
        default: 8_000,
        min: 0,
        max: 600_000,
    },
    applies: Applies::Live,
    doc: "How long a `fusion` panel waits for its other members once the quorum has answered (SPEC R19); 0 = judge as soon as the quorum is in.",
};

pub const ROUTING_FUSION_DEADLINE_MS: Setting<Int> = Setting {
    key: "routing.fusion.deadlineMs",
    env: "ROUTING_FUSION_DEADLINE_MS",
    kind: Int {
        default: 90_000,
        min: 1_000,
        max: 600_000,
    },
    applies: Applies::Live,
    doc: "The longest a `fusion` panel runs (SPEC R19): the answers in by then are judged, the members still running are cut.",
};

pub const ROUTING_ROUND_ROBIN_BATCH: Setting<Int> = Setting {
    key: "routing.roundRobinBatch",
    env: "ROUTING_ROUND_ROBIN_BATCH",
    // SPEC R19: one request at a time unless a batch is set (OmniRoute's default of 3
    // made rotation look broken to its users).
    kind: Int {
        default: 1,
        min: 1,
        max: 1_000,
    },
    applies: Applies::Live,
    doc: "Requests in a row a `round-robin` combo sends to one candidate before moving to the next (SPEC R19); 1 = one request at a time.",
};

pub const SESSION_AFFINITY_TTL_MS: Setting<Clamped> = Setting {
    key: "sessionAffinityTtlMs",
    env: "SESSION_AFFINITY_TTL_MS",
    // SPEC R15: an hour since the session's last request, as Bifrost's default; an
    // agent idle longer has lost its prompt cache anyway.
    kind: Clamped {
        default: 3_600_000,
        min: 0,
        max: 30 * DAY_MS,
    },
    applies: Applies::Live,
    doc: "How long a client session stays pinned to the connection that last served it, since its last request (SPEC R15); 0 = off.",
};

pub const STREAM_STALL_COOLDOWN_ENABLED: Setting<Bool> = Setting {
    key: "streamStallCooldown.enabled",
    env: "STREAM_STALL_COOLDOWN_ENABLED",
    // Off (SPEC R3): a stall is usually one slow generation, not a sick account.
    kind: Bool { default: false },
    applies: Applies::Live,
    doc: "Cool the connection down when its stream stalls past upstream.stream_idle_timeout_ms.",
};

pub const STREAM_THROUGHPUT_WATCHDOG_ENABLED: Setting<Bool> = Setting {
    key: "streamThroughputWatchdog.enabled",
    env: "STREAM_THROUGHPUT_WATCHDOG_ENABLED",
    // Off (SPEC R12): a slow stream is often just a long answer from a slow model.
    kind: Bool { default: false },
    applies: Applies::Live,
    doc: "Abort a streamed attempt whose useful output (bytes of text) over a rolling window is below streamThroughputWatchdog.minBytesPerSecond, after the warm-up; paused while a tool call or reasoning is open.",
};

pub const STREAM_THROUGHPUT_WATCHDOG_MIN_BYTES_PER_SECOND: Setting<Int> = Setting {
    key: "streamThroughputWatchdog.minBytesPerSecond",
    env: "STREAM_THROUGHPUT_MIN_BYTES_PER_SECOND",
    // SPEC R12's default: a stream that adds less than a byte a second is not answering.
    kind: Int {
        default: 1,
        min: 1,
        max: 1_000_000,
    },
    applies: Applies::Live,
    doc: "The throughput watchdog's minimum useful output rate.",
};

pub const STREAM_THROUGHPUT_WATCHDOG_WARMUP_MS: Setting<Int> = Setting {
    key: "streamThroughputWatchdog.warmupMs",
    env: "STREAM_THROUGHPUT_WARMUP_MS",
    kind: Int {
        default: 30_000,
        min: 0,
        max: DAY_MS,
    },
    applies: Applies::Live,
    doc: "Time from the attempt's start before the throughput watchdog's first window begins.",
};

pub const STREAM_THROUGHPUT_WATCHDOG_WINDOW_MS: Setting<Int> = Setting {
    key: "streamThroughputWatchdog.windowMs",
    env: "STREAM_THROUGHPUT_WINDOW_MS",
    kind: Int {
        default: 30_000,
        min: 1_000,
        max: DAY_MS,
    },
    applies: Applies::Live,
    doc: "The throughput watchdog's rolling window.",
};

pub const UPSTREAM_CONNECT_TIMEOUT_MS: Setting<Int> = Setting {
    key: "upstream.connect_timeout_ms",
    env: "SWITCHYARD_UPSTREAM_CONNECT_TIMEOUT_MS",
    // A TCP+TLS handshake that has not finished in 10 s will not; fail over instead.
    kind: Int {
        default: 10_000,
        min: 100,
        max: 300_000,
    },
    applies: Applies::Live,
    doc: "Deadline for establishing an upstream connection.",
};

pub const UPSTREAM_FIRST_BYTE_TIMEOUT_MS: Setting<Int> = Setting {
    key: "upstream.first_byte_timeout_ms",
    env: "SWITCHYARD_UPSTREAM_FIRST_BYTE_TIMEOUT_MS",
    // Non-streaming completions of long answers routinely take minutes; ten minutes
    // matches the execution bound of SPEC R10.
    kind: Int {
        default: 600_000,
        min: 100,
        max: DAY_MS,
    },
    applies: Applies::Live,
    doc: "Deadline for the upstream's response headers after the request was sent.",
};

pub const UPSTREAM_STREAM_IDLE_TIMEOUT_MS: Setting<Int> = Setting {
    key: "upstream.stream_idle_timeout_ms",
    env: "SWITCHYARD_UPSTREAM_STREAM_IDLE_TIMEOUT_MS",
    // A backstop against streams that stall forever, not a quality monitor (that is
    // R11's content-stall budget): five minutes outlasts any real pause between
    // frames, including long reasoning phases and keep-alive gaps.
    kind: Int {
        default: 300_000,
        min: 100,
        max: DAY_MS,
    },
    applies: Applies::Live,
    doc: "Longest silence between two frames of an upstream stream before it is cut.",
};

/// All settings, as the registry lists them. Keep sorted by key.
pub const DEFS: &[SettingDef] = &[
    BREAKER_API_KEY_DEGRADE_AT.def(),
    BREAKER_API_KEY_DOUBLE_AFTER.def(),
    BREAKER_API_KEY_MAX_MULTIPLIER.def(),
    BREAKER_API_KEY_OPEN_AT.def(),
    BREAKER_API_KEY_RESET_MS.def(),
    BREAKER_LOCAL_DEGRADE_AT.def(),
    BREAKER_LOCAL_DOUBLE_AFTER.def(),
    BREAKER_LOCAL_MAX_MULTIPLIER.def(),
    BREAKER_LOCAL_OPEN_AT.def(),
    BREAKER_LOCAL_RESET_MS.def(),
    BREAKER_OAUTH_DEGRADE_AT.def(),
    BREAKER_OAUTH_DOUBLE_AFTER.def(),
    BREAKER_OAUTH_MAX_MULTIPLIER.def(),
    BREAKER_OAUTH_OPEN_AT.def(),
    BREAKER_OAUTH_RESET_MS.def(),
    COMBO_COOLDOWN_WAIT_BUDGET_MS.def(),
    COMBO_COOLDOWN_WAIT_ENABLED.def(),
    COMBO_COOLDOWN_WAIT_MAX_ATTEMPTS.def(),
    COMBO_COOLDOWN_WAIT_MAX_WAIT_MS.def(),
    CONCURRENCY_GLOBAL_MAX.def(),
    CONCURRENCY_MAX_WAITERS.def(),
    COOLDOWN_API_KEY_BACKOFF_STEPS.def(),
    COOLDOWN_API_KEY_BASE_MS.def(),
    COOLDOWN_OAUTH_BACKOFF_STEPS.def(),
    COOLDOWN_OAUTH_BASE_MS.def(),
    MONITORING_ACCESS.def(),
    OAUTH_REFRESH_MARGIN_MS.def(),
    OAUTH_REFRESH_WAIT_MS.def(),
    PROVIDER_COOLDOWN_API_KEY_COOLDOWN_MS.def(),
    PROVIDER_COOLDOWN_API_KEY_FAILURE_THRESHOLD.def(),
    PROVIDER_COOLDOWN_API_KEY_FAILURE_WINDOW_MS.def(),
    PROVIDER_COOLDOWN_ENABLED.def(),
    PROVIDER_COOLDOWN_OAUTH_COOLDOWN_MS.def(),
    PROVIDER_COOLDOWN_OAUTH_FAILURE_THRESHOLD.def(),
    PROVIDER_COOLDOWN_OAUTH_FAILURE_WINDOW_MS.def(),
    QUOTA_CONSUMPTION_RETENTION_DAYS.def(),
    QUOTA_SATURATION_THRESHOLD.def(),
    QUOTA_SOFT_DEPRIORITIZE_FACTOR.def(),
    QUOTA_SHARE_CONCURRENCY_LIMIT_ENABLED.def(),
    QUOTA_SHARE_CONCURRENCY_LIMIT_MAX_QUEUE.def(),
    QUOTA_SHARE_CONCURRENCY_LIMIT_MAX_WAIT_MS.def(),
    QUOTA_STORE_DRIVER.def(),
    QUOTA_STORE_REDIS_PREFIX.def(),
    QUOTA_STORE_REDIS_URL.def(),
    QUOTA_STORE_REQUIRE_REDIS.def(),
    REQUEST_MAX_BODY_BYTES.def(),
    REQUEST_LOG_MAX_ROWS.def(),
    REQUEST_LOG_RETENTION_DAYS.def(),
    REQUEST_QUEUE_EXECUTION_MAX_WAIT_MS.def(),
    REQUEST_QUEUE_MAX_QUEUE_DEPTH.def(),
    REQUEST_QUEUE_MAX_WAIT_MS.def(),
    RESILIENCE_MODEL_LOCKOUT_BASE_COOLDOWN_MS.def(),
    RESILIENCE_MODEL_LOCKOUT_ENABLED.def(),
    RESILIENCE_MODEL_LOCKOUT_ERROR_CODES.def(),
    RESILIENCE_MODEL_LOCKOUT_MAX_BACKOFF_STEPS.def(),
    RESILIENCE_MODEL_LOCKOUT_MAX_COOLDOWN_MS.def(),
    RESILIENCE_MODEL_LOCKOUT_USE_EXPONENTIAL_BACKOFF.def(),
    RESILIENCE_PROVIDER_ERROR_RULES.def(),
    RESILIENCE_STATUS_RESTATEMENTS.def(),
    ROUTING_AUTO_EXPLORATION.def(),
    ROUTING_AUTO_HEALTH_WEIGHT.def(),
    ROUTING_AUTO_LOAD_WEIGHT.def(),
    ROUTING_AUTO_PRICE_WEIGHT.def(),
    ROUTING_AUTO_QUOTA_WEIGHT.def(),
    ROUTING_AUTO_SPEED_WEIGHT.def(),
    ROUTING_CONTEXT_RELAY_HANDOFF_AT.def(),
    ROUTING_CONTEXT_RELAY_STOP_AT.def(),
    ROUTING_FUSION_DEADLINE_MS.def(),
    ROUTING_FUSION_GRACE_MS.def(),
    ROUTING_FUSION_QUORUM.def(),
    ROUTING_ROUND_ROBIN_BATCH.def(),
    SERVER_BODY_READ_TIMEOUT_MS.def(),
    SERVER_HEADER_READ_TIMEOUT_MS.def(),
    SERVER_IO_THREADS.def(),
    SERVER_KEEPALIVE_IDLE_TIMEOUT_MS.def(),
    SERVER_MAX_CONNECTIONS.def(),
    SERVER_SHUTDOWN_GRACE_MS.def(),
    SESSION_AFFINITY_TTL_MS.def(),
    STREAM_CONTENT_STALL_ADAPTIVE.def(),
    STREAM_CONTENT_STALL_FIRST_OUTPUT_MAX_MS.def(),
    STREAM_CONTENT_STALL_FIRST_OUTPUT_MS.def(),
    STREAM_CONTENT_STALL_IDLE_MS.def(),
    STREAM_STALL_COOLDOWN_ENABLED.def(),
    STREAM_THROUGHPUT_WATCHDOG_ENABLED.def(),
    STREAM_THROUGHPUT_WATCHDOG_MIN_BYTES_PER_SECOND.def(),
    STREAM_THROUGHPUT_WATCHDOG_WARMUP_MS.def(),
    STREAM_THROUGHPUT_WATCHDOG_WINDOW_MS.def(),
    UPSTREAM_CONNECT_TIMEOUT_MS.def(),
    UPSTREAM_FIRST_BYTE_TIMEOUT_MS.def(),
    UPSTREAM_STREAM_IDLE_TIMEOUT_MS.def(),
];

/// The `breaker.*` settings of one auth class (SPEC R1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerKeys {
    pub degrade_at: &'static Setting<Int>,
    pub open_at: &'static Setting<Int>,
    pub reset_ms: &'static Setting<Int>,
    pub double_after: &'static Setting<Int>,
    pub max_multiplier: &'static Setting<Int>,
}

pub const BREAKER_OAUTH: BreakerKeys = BreakerKeys {
    degrade_at: &BREAKER_OAUTH_DEGRADE_AT,
    open_at: &BREAKER_OAUTH_OPEN_AT,
    reset_ms: &BREAKER_OAUTH_RESET_MS,
    double_after: &BREAKER_OAUTH_DOUBLE_AFTER,
    max_multiplier: &BREAKER_OAUTH_MAX_MULTIPLIER,
};

pub const BREAKER_API_KEY: BreakerKeys = BreakerKeys {
    degrade_at: &BREAKER_API_KEY_DEGRADE_AT,
    open_at: &BREAKER_API_KEY_OPEN_AT,
    reset_ms: &BREAKER_API_KEY_RESET_MS,
    double_after: &BREAKER_API_KEY_DOUBLE_AFTER,
    max_multiplier: &BREAKER_API_KEY_MAX_MULTIPLIER,
};

pub const BREAKER_LOCAL: BreakerKeys = BreakerKeys {
    degrade_at: &BREAKER_LOCAL_DEGRADE_AT,
    open_at: &BREAKER_LOCAL_OPEN_AT,
    reset_ms: &BREAKER_LOCAL_RESET_MS,
    double_after: &BREAKER_LOCAL_DOUBLE_AFTER,
    max_multiplier: &BREAKER_LOCAL_MAX_MULTIPLIER,
};

/// The `cooldown.*` settings of one auth class (SPEC R3); local connections use the
/// API-key ones.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CooldownKeys {
    pub base_ms: &'static Setting<Int>,
    pub backoff_steps: &'static Setting<Int>,
}

pub const COOLDOWN_OAUTH: CooldownKeys = CooldownKeys {
    base_ms: &COOLDOWN_OAUTH_BASE_MS,
    backoff_steps: &COOLDOWN_OAUTH_BACKOFF_STEPS,
};

pub const COOLDOWN_API_KEY: CooldownKeys = CooldownKeys {
    base_ms: &COOLDOWN_API_KEY_BASE_MS,
    backoff_steps: &COOLDOWN_API_KEY_BACKOFF_STEPS,
};

/// The `providerCooldown.*` settings of one auth class (SPEC R2).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProviderCooldownKeys {
    pub failure_threshold: &'static Setting<Int>,
    pub failure_window_ms: &'static Setting<Int>,
    pub cooldown_ms: &'static Setting<Int>,
}

pub const PROVIDER_COOLDOWN_OAUTH: ProviderCooldownKeys = ProviderCooldownKeys {
    failure_threshold: &PROVIDER_COOLDOWN_OAUTH_FAILURE_THRESHOLD,
    failure_window_ms: &PROVIDER_COOLDOWN_OAUTH_FAILURE_WINDOW_MS,
    cooldown_ms: &PROVIDER_COOLDOWN_OAUTH_COOLDOWN_MS,
};

pub const PROVIDER_COOLDOWN_API_KEY: ProviderCooldownKeys = ProviderCooldownKeys {
    failure_threshold: &PROVIDER_COOLDOWN_API_KEY_FAILURE_THRESHOLD,
    failure_window_ms: &PROVIDER_COOLDOWN_API_KEY_FAILURE_WINDOW_MS,
    cooldown_ms: &PROVIDER_COOLDOWN_API_KEY_COOLDOWN_MS,
};

/// Resolved settings, typed.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub max_body_bytes: u64,
    /// `monitoring.access`: `/metrics` needs the admin credential.
    pub metrics_need_admin: bool,
    /// `requestLog.*`: how long and how many request-log rows are kept.
    pub request_log: RequestLogRetention,
    pub io_threads: u64,
    pub shutdown_grace_ms: u64,
    pub header_read_timeout_ms: u64,
    pub body_read_timeout_ms: u64,
    pub keepalive_idle_timeout_ms: u64,
    pub max_connections: u64,
    pub connect_timeout_ms: u64,
    pub first_byte_timeout_ms: u64,
    pub stream_idle_timeout_ms: u64,
    /// `oauth.*`: when subscription tokens are refreshed, and how long a request waits.
    pub oauth: OauthSettings,
    /// `sessionAffinityTtlMs` (SPEC R15); 0 = off.
    pub session_affinity_ttl_ms: u64,
    /// `routing.roundRobinBatch` (SPEC R19), at least 1.
    pub round_robin_batch: u64,
    /// `routing.auto.*` (SPEC R19).
    pub auto: crate::routing::strategy::auto::Weights,
    /// `routing.contextRelay.*` (SPEC R19).
    pub relay: crate::routing::relay::RelaySettings,
    /// `routing.fusion.*` (SPEC R19).
    pub fusion: crate::routing::shape::FusionSettings,
    /// `streamContentStall.*` and `streamThroughputWatchdog.*` (SPEC R11, R12).
    pub stream: StreamSettings,
    pub quota: QuotaSettings,
    pub resilience: ResilienceSettings,
    pub concurrency: ConcurrencySettings,
}

/// When OAuth subscription tokens are refreshed (SPEC R4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OauthSettings {
    pub refresh_margin_ms: u64,
    pub refresh_wait_ms: u64,
}

/// The stream watchdogs' settings (SPEC R11, R12).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamSettings {
    /// The first-output budget; its base 0 = off.
    pub first_output: crate::stream::budget::Budget,
    /// 0 = off.
    pub idle_ms: u64,
    /// The throughput watchdog is on (R12).
    pub throughput_enabled: bool,
    pub throughput: crate::stream::watchdog::Throughput,
}

/// How much of the request log is kept (`requestLog.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLogRetention {
    pub days: u64,
    pub max_rows: u64,
}

/// Concurrency gates and request-queue admission (SPEC R7, R10).
#[derive(Debug, Clone, PartialEq)]
pub struct ConcurrencySettings {
    /// 0 = no global gate.
    pub global_max: u64,
    pub max_waiters: u64,
    pub queue: crate::resilience::admission::Limits,
}

/// Resilience settings (SPEC R1, R2, R3, R5).
#[derive(Debug, Clone, PartialEq)]
pub struct ResilienceSettings {
    /// `breaker.*`: the provider breaker's profile of each auth class (SPEC R1).
    pub breaker: crate::resilience::breaker::Profiles,
    /// `cooldown.*`: the connection cooldown's profile of each auth class (SPEC R3).
    pub cooldown: crate::resilience::cooldown::Profiles,
    pub lockout: crate::resilience::lockout::Settings,
    pub provider_cooldown_enabled: bool,
    pub provider_cooldown_oauth: crate::resilience::provider_cooldown::Profile,
    pub provider_cooldown_apikey: crate::resilience::provider_cooldown::Profile,
    pub stream_stall_cooldown: bool,
    /// `resilience.statusRestatements` (SPEC R13).
    pub restatements: Vec<crate::resilience::rules::Restatement>,
    /// `resilience.providerErrorRules` (SPEC R13).
    pub error_rules: Vec<crate::resilience::rules::ErrorRule>,
    pub combo_wait: crate::resilience::combo_wait::Settings,
}

/// The quota engine's settings (SPEC Q10). `Debug` shows the Redis URL without its
/// password.
#[derive(Clone, PartialEq)]
pub struct QuotaSettings {
    /// `sqlite` or `redis`.
    pub store_driver: String,
    /// Empty = none.
    pub redis_url: String,
    pub redis_prefix: String,
    /// Refuse to start rather than fall back to SQLite (`quotaStore.requireRedis`).
    pub require_redis: bool,
    pub saturation_threshold: f64,
    pub soft_deprioritize_factor: f64,
    pub retention_days: u64,
    /// `quotaShareConcurrencyLimit.*` (SPEC R8).
    pub share_gate_enabled: bool,
    pub share_gate_max_queue: u64,
    pub share_gate_max_wait_ms: u64,
}

impl std::fmt::Debug for QuotaSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuotaSettings")
            .field("store_driver", &self.store_driver)
            .field("redis_url", &redact_url(&self.redis_url))
            .field("redis_prefix", &self.redis_prefix)
            .field("require_redis", &self.require_redis)
            .field("saturation_threshold", &self.saturation_threshold)
            .field("soft_deprioritize_factor", &self.soft_deprioritize_factor)
            .field("retention_days", &self.retention_days)
            .field("share_gate_enabled", &self.share_gate_enabled)
            .field("share_gate_max_queue", &self.share_gate_max_queue)
            .field("share_gate_max_wait_ms", &self.share_gate_max_wait_ms)
            .finish()
    }
}

/// A resolved value with its origin, for the settings API. `Debug` shows the value as
/// views do (a URL without its password).
#[derive(Clone, PartialEq)]
pub struct Resolved {
    pub def: &'static SettingDef,
    pub value: SettingValue,
    pub source: Source,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolved")
            .field("key", &self.def.key)
            .field("value", &self.def.display(&self.value))
            .field("source", &self.source)
            .finish()
    }
}

/// Why a setting value is unusable. The message names the setting and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingError {
    #[error("unknown setting `{0}`")]
    Unknown(String),
    #[error("setting `{key}` (from {origin}) must be {constraint}, got {got}")]
    Invalid {
        key: String,
        origin: &'static str,
        constraint: String,
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

fn parse(kind: Kind, value: &Value) -> Option<SettingValue> {
    let text = match value {
        Value::String(s) => Some(s.trim()),
        _ => None,
    };
    match kind {
        Kind::Int(Int { min, max, .. }) => {
            let v = match value {
                Value::Number(n) => n.as_u64(),
                _ => text.and_then(|t| t.parse::<u64>().ok()),
            }?;
            (min..=max).contains(&v).then_some(SettingValue::Int(v))
        }
        Kind::Clamped(Clamped { min, max, .. }) => {
            let v = match value {
                Value::Number(n) => n.as_u64(),
                _ => text.and_then(|t| t.parse::<u64>().ok()),
            }?;
            Some(SettingValue::Int(v.clamp(min, max)))
        }
        Kind::Fraction(_) => {
            let v = match value {
                Value::Number(n) => n.as_f64(),
                _ => text.and_then(|t| t.parse::<f64>().ok()),
            }?;
            (0.0..=1.0).contains(&v).then_some(SettingValue::Float(v))
        }
        Kind::Bool(_) => match value {
            Value::Bool(b) => Some(SettingValue::Bool(*b)),
            _ => match text? {
                "true" | "1" | "on" => Some(SettingValue::Bool(true)),
                "false" | "0" | "off" => Some(SettingValue::Bool(false)),
                _ => None,
            },
        },
        Kind::Choice(Choice { options, .. }) => {
            let t = text?;
            options
                .contains(&t)
                .then(|| SettingValue::Text(t.to_owned()))
        }
        Kind::Name(_) => {
            let t = text?;
            (!t.is_empty()
                && t.len() <= 64
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':')))
            .then(|| SettingValue::Text(t.to_owned()))
        }
        Kind::Statuses(_) => {
            let codes: Vec<u64> = match value {
                Value::Array(items) => items.iter().map(Value::as_u64).collect::<Option<_>>()?,
                _ => text?
                    .split(',')
                    .map(|c| c.trim().parse::<u64>().ok())
                    .collect::<Option<_>>()?,
            };
            if codes.is_empty() || codes.iter().any(|c| !(400..600).contains(c)) {
                return None;
            }
            let list: Vec<String> = codes.iter().map(u64::to_string).collect();
            Some(SettingValue::Text(list.join(",")))
        }
        Kind::RedisUrl(_) => {
            let t = text?;
            (t.is_empty() || t.starts_with("redis://") || t.starts_with("rediss://"))
                .then(|| SettingValue::Text(t.to_owned()))
        }
        Kind::Restatements(_) | Kind::ErrorRules(_) => rule_list(kind, value).ok(),
    }
}

/// A rule list setting's canonical text, or what is wrong with it. The value is the
/// list itself or its JSON text (an environment variable).
fn rule_list(kind: Kind, value: &Value) -> Result<SettingValue, String> {
    use crate::resilience::rules;
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let canonical = match kind {
        Kind::Restatements(_) => rules::parse_restatements(&text)
            .and_then(|l| serde_json::to_string(&l).map_err(|e| rules::RuleProblem(e.to_string()))),
        _ => rules::parse_rules(&text)
            .and_then(|l| serde_json::to_string(&l).map_err(|e| rules::RuleProblem(e.to_string()))),
    };
    canonical.map(SettingValue::Text).map_err(|e| e.0)
}

/// Validates one value for `key`.
pub fn validate(key: &str, value: &Value, source: Source) -> Result<SettingValue, SettingError> {
    let d = def(key).ok_or_else(|| SettingError::Unknown(key.to_owned()))?;
    parse(d.kind, value).ok_or_else(|| SettingError::Invalid {
        key: key.to_owned(),
        origin: source_name(source),
        constraint: match rule_list(d.kind, value) {
            Err(problem) if matches!(d.kind, Kind::Restatements(_) | Kind::ErrorRules(_)) => {
                format!("{} ({problem})", d.constraint())
            }
            _ => d.constraint(),
        },
        got: match d.kind {
            Kind::RedisUrl(_) => "a value that is not one".to_owned(),
            _ => value.to_string(),
        },
    })
}

/// The layers settings are resolved from. Its `Debug` shows which keys each layer sets,
/// not their values: a Redis URL may carry a password.
#[derive(Default, Clone)]
pub struct Layers {
    pub file: BTreeMap<String, Value>,
    pub env: BTreeMap<String, String>,
    pub database: BTreeMap<String, Value>,
}

impl std::fmt::Debug for Layers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Layers")
            .field("file", &self.file.keys().collect::<Vec<_>>())
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("database", &self.database.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The outcome of resolution: typed settings, the per-key view, and database values
/// that were ignored because they are invalid (the caller logs them).
#[derive(Debug, Clone)]
pub struct Resolution {
    pub settings: Settings,
    pub resolved: Vec<Resolved>,
    pub ignored: Vec<SettingError>,
}

/// The `origin` of an ignored [`SettingError::Invalid`] that is about several settings
/// together (e.g. a maximum below its base) rather than one value; its `key` names the
/// setting (or group) and `got` the problem. The management API refuses a write that
/// would cause one.
pub const COMBINED: &str = "combined settings";

/// The lockout settings if they hold together (maximum ≥ base); otherwise the
/// defaults, with the problem reported among the ignored values.
fn lockout_settings(
    s: crate::resilience::lockout::Settings,
    ignored: &mut Vec<SettingError>,
) -> crate::resilience::lockout::Settings {
    match s.validate() {
        Ok(()) => s,
        Err(message) => {
            ignored.push(SettingError::Invalid {
                key: "resilience.modelLockout".to_owned(),
                origin: COMBINED,
                constraint: "consistent".to_owned(),
                got: message,
            });
            crate::resilience::lockout::Settings::default()
        }
    }
}

/// Reads resolved values by their settings' consts, typed.
struct Reader<'a> {
    resolved: &'a [Resolved],
    /// The first setting read that [`DEFS`] does not list (a mistake in this module,
    /// which `resolve` reports instead of inventing a value).
    unlisted: Option<&'static str>,
}

impl Reader<'_> {
    fn get<K: Typed>(&mut self, s: &Setting<K>) -> K::Value {
        match self.resolved.iter().find(|r| r.def.key == s.key) {
            Some(r) => s.kind.read(&r.value),
            None => {
                self.unlisted.get_or_insert(s.key);
                s.kind.default_value()
            }
        }
    }

    /// An integer setting that counts something small (its bounds fit a `u32`).
    fn count(&mut self, s: &Setting<Int>) -> u32 {
        u32::try_from(self.get(s)).unwrap_or(u32::MAX)
    }

    fn breaker(&mut self, k: &BreakerKeys) -> crate::resilience::breaker::Profile {
        crate::resilience::breaker::Profile {
            degrade_at: self.count(k.degrade_at),
            open_at: self.count(k.open_at),
            reset_ms: self.get(k.reset_ms),
            double_after: self.count(k.double_after),
            max_multiplier: self.get(k.max_multiplier),
        }
    }

    fn cooldown(&mut self, k: &CooldownKeys) -> crate::resilience::cooldown::Profile {
        crate::resilience::cooldown::Profile {
            base_ms: self.get(k.base_ms),
            steps: self.count(k.backoff_steps),
        }
    }

    fn provider_cooldown(
        &mut self,
        k: &ProviderCooldownKeys,
    ) -> crate::resilience::provider_cooldown::Profile {
        crate::resilience::provider_cooldown::Profile {
            threshold: self.count(k.failure_threshold),
            window_ms: self.get(k.failure_window_ms),
            cooldown_ms: self.get(k.cooldown_ms),
        }
    }
}

/// The breaker profile of `keys`' class if it holds together (degradeAt ≤ openAt);
/// otherwise `fallback`, the class's default, with the problem reported among the
/// ignored values under the class's degradeAt key.
fn breaker_profile(
    keys: &BreakerKeys,
    p: crate::resilience::breaker::Profile,
    fallback: crate::resilience::breaker::Profile,
    ignored: &mut Vec<SettingError>,
) -> crate::resilience::breaker::Profile {
    match p.check(keys.degrade_at.key, keys.open_at.key) {
        Ok(()) => p,
        Err(message) => {
            ignored.push(SettingError::Invalid {
                key: keys.degrade_at.key.to_owned(),
                origin: COMBINED,
                constraint: "consistent".to_owned(),
                got: message,
            });
            fallback
        }
    }
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
        let mut value = d.default_value();
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
            def: d,
            value,
            source,
        });
    }
    ignored.extend(
        layers
            .database
            .keys()
            .filter(|k| def(k).is_none())
            .map(|k| SettingError::Unknown(k.clone())),
    );
    let mut r = Reader {
        resolved: &resolved,
        unlisted: None,
    };
    let defaults = crate::resilience::breaker::Profiles::default();
    let breaker = crate::resilience::breaker::Profiles {
        oauth: breaker_profile(
            &BREAKER_OAUTH,
            r.breaker(&BREAKER_OAUTH),
            defaults.oauth,
            &mut ignored,
        ),
        apikey: breaker_profile(
            &BREAKER_API_KEY,
            r.breaker(&BREAKER_API_KEY),
            defaults.apikey,
            &mut ignored,
        ),
        local: breaker_profile(
            &BREAKER_LOCAL,
            r.breaker(&BREAKER_LOCAL),
            defaults.local,
            &mut ignored,
        ),
    };
    let lockout = crate::resilience::lockout::Settings {
        enabled: r.get(&RESILIENCE_MODEL_LOCKOUT_ENABLED),
        error_codes: r.get(&RESILIENCE_MODEL_LOCKOUT_ERROR_CODES),
        base_cooldown_ms: r.get(&RESILIENCE_MODEL_LOCKOUT_BASE_COOLDOWN_MS),
        max_cooldown_ms: r.get(&RESILIENCE_MODEL_LOCKOUT_MAX_COOLDOWN_MS),
        max_backoff_steps: r.count(&RESILIENCE_MODEL_LOCKOUT_MAX_BACKOFF_STEPS),
        use_exponential_backoff: r.get(&RESILIENCE_MODEL_LOCKOUT_USE_EXPONENTIAL_BACKOFF),
    };
    let settings = Settings {
        max_body_bytes: r.get(&REQUEST_MAX_BODY_BYTES),
        metrics_need_admin: r.get(&MONITORING_ACCESS) == "admin",
        request_log: RequestLogRetention {
            days: r.get(&REQUEST_LOG_RETENTION_DAYS),
            max_rows: r.get(&REQUEST_LOG_MAX_ROWS),
        },
        io_threads: r.get(&SERVER_IO_THREADS),
        shutdown_grace_ms: r.get(&SERVER_SHUTDOWN_GRACE_MS),
        header_read_timeout_ms: r.get(&SERVER_HEADER_READ_TIMEOUT_MS),
        body_read_timeout_ms: r.get(&SERVER_BODY_READ_TIMEOUT_MS),
        keepalive_idle_timeout_ms: r.get(&SERVER_KEEPALIVE_IDLE_TIMEOUT_MS),
        max_connections: r.get(&SERVER_MAX_CONNECTIONS),
        connect_timeout_ms: r.get(&UPSTREAM_CONNECT_TIMEOUT_MS),
        first_byte_timeout_ms: r.get(&UPSTREAM_FIRST_BYTE_TIMEOUT_MS),
        stream_idle_timeout_ms: r.get(&UPSTREAM_STREAM_IDLE_TIMEOUT_MS),
        oauth: OauthSettings {
            refresh_margin_ms: r.get(&OAUTH_REFRESH_MARGIN_MS),
            refresh_wait_ms: r.get(&OAUTH_REFRESH_WAIT_MS),
        },
        session_affinity_ttl_ms: r.get(&SESSION_AFFINITY_TTL_MS),
        round_robin_batch: r.get(&ROUTING_ROUND_ROBIN_BATCH),
        auto: crate::routing::strategy::auto::Weights {
            health: r.get(&ROUTING_AUTO_HEALTH_WEIGHT),
            speed: r.get(&ROUTING_AUTO_SPEED_WEIGHT),
            price: r.get(&ROUTING_AUTO_PRICE_WEIGHT),
            quota: r.get(&ROUTING_AUTO_QUOTA_WEIGHT),
            load: r.get(&ROUTING_AUTO_LOAD_WEIGHT),
            exploration: r.get(&ROUTING_AUTO_EXPLORATION),
        },
        relay: crate::routing::relay::RelaySettings {
            handoff_at: r.get(&ROUTING_CONTEXT_RELAY_HANDOFF_AT),
            stop_at: r.get(&ROUTING_CONTEXT_RELAY_STOP_AT),
        },
        fusion: crate::routing::shape::FusionSettings {
            quorum: r.get(&ROUTING_FUSION_QUORUM),
            grace_ms: r.get(&ROUTING_FUSION_GRACE_MS),
            deadline_ms: r.get(&ROUTING_FUSION_DEADLINE_MS),
        },
        stream: StreamSettings {
            first_output: crate::stream::budget::Budget {
                base_ms: r.get(&STREAM_CONTENT_STALL_FIRST_OUTPUT_MS),
                max_ms: r.get(&STREAM_CONTENT_STALL_FIRST_OUTPUT_MAX_MS),
                adaptive: r.get(&STREAM_CONTENT_STALL_ADAPTIVE),
            },
            idle_ms: r.get(&STREAM_CONTENT_STALL_IDLE_MS),
            throughput_enabled: r.get(&STREAM_THROUGHPUT_WATCHDOG_ENABLED),
            throughput: crate::stream::watchdog::Throughput {
                warmup_ms: r.get(&STREAM_THROUGHPUT_WATCHDOG_WARMUP_MS),
                window_ms: r.get(&STREAM_THROUGHPUT_WATCHDOG_WINDOW_MS),
                min_bytes_per_s: r.get(&STREAM_THROUGHPUT_WATCHDOG_MIN_BYTES_PER_SECOND),
            },
        },
        resilience: ResilienceSettings {
            breaker,
            cooldown: crate::resilience::cooldown::Profiles {
                oauth: r.cooldown(&COOLDOWN_OAUTH),
                apikey: r.cooldown(&COOLDOWN_API_KEY),
            },
            lockout: lockout_settings(lockout, &mut ignored),
            provider_cooldown_enabled: r.get(&PROVIDER_COOLDOWN_ENABLED),
            stream_stall_cooldown: r.get(&STREAM_STALL_COOLDOWN_ENABLED),
            restatements: r.get(&RESILIENCE_STATUS_RESTATEMENTS),
            error_rules: r.get(&RESILIENCE_PROVIDER_ERROR_RULES),
            combo_wait: crate::resilience::combo_wait::Settings {
                enabled: r.get(&COMBO_COOLDOWN_WAIT_ENABLED),
                max_wait_ms: r.get(&COMBO_COOLDOWN_WAIT_MAX_WAIT_MS),
                max_attempts: r.count(&COMBO_COOLDOWN_WAIT_MAX_ATTEMPTS),
                budget_ms: r.get(&COMBO_COOLDOWN_WAIT_BUDGET_MS),
            },
            provider_cooldown_oauth: r.provider_cooldown(&PROVIDER_COOLDOWN_OAUTH),
            provider_cooldown_apikey: r.provider_cooldown(&PROVIDER_COOLDOWN_API_KEY),
        },
        concurrency: ConcurrencySettings {
            global_max: r.get(&CONCURRENCY_GLOBAL_MAX),
            max_waiters: r.get(&CONCURRENCY_MAX_WAITERS),
            queue: crate::resilience::admission::Limits {
                max_wait_ms: r.get(&REQUEST_QUEUE_MAX_WAIT_MS),
                execution_max_wait_ms: r.get(&REQUEST_QUEUE_EXECUTION_MAX_WAIT_MS),
                max_queue_depth: r.get(&REQUEST_QUEUE_MAX_QUEUE_DEPTH),
            },
        },
        quota: QuotaSettings {
            store_driver: r.get(&QUOTA_STORE_DRIVER),
            redis_url: r.get(&QUOTA_STORE_REDIS_URL),
            redis_prefix: r.get(&QUOTA_STORE_REDIS_PREFIX),
            require_redis: r.get(&QUOTA_STORE_REQUIRE_REDIS),
            saturation_threshold: r.get(&QUOTA_SATURATION_THRESHOLD),
            soft_deprioritize_factor: r.get(&QUOTA_SOFT_DEPRIORITIZE_FACTOR),
            retention_days: r.get(&QUOTA_CONSUMPTION_RETENTION_DAYS),
            share_gate_enabled: r.get(&QUOTA_SHARE_CONCURRENCY_LIMIT_ENABLED),
            share_gate_max_queue: r.get(&QUOTA_SHARE_CONCURRENCY_LIMIT_MAX_QUEUE),
            share_gate_max_wait_ms: r.get(&QUOTA_SHARE_CONCURRENCY_LIMIT_MAX_WAIT_MS),
        },
    };
    if let Some(key) = r.unlisted {
        return Err(SettingError::Unknown(key.to_owned()));
    }
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
        assert_eq!(r.settings.quota.store_driver, "sqlite");
        assert_eq!(r.settings.quota.saturation_threshold, 0.5);
        assert_eq!(r.settings.quota.soft_deprioritize_factor, 0.7);
        assert_eq!(r.settings.quota.retention_days, 14);
        assert_eq!(r.settings.quota.redis_url, "");
        assert!(!r.settings.quota.require_redis);
        assert_eq!(r.settings.header_read_timeout_ms, 10_000);
        assert_eq!(r.settings.body_read_timeout_ms, 60_000);
        assert_eq!(r.settings.keepalive_idle_timeout_ms, 75_000);
        assert_eq!(r.settings.max_connections, 10_000);
    }

    #[test]
    fn edge_settings_come_from_their_environment_variables() {
        let mut l = Layers::default();
        for (var, value) in [
            ("SWITCHYARD_HEADER_READ_TIMEOUT_MS", "300"),
            ("SWITCHYARD_BODY_READ_TIMEOUT_MS", "400"),
            ("SWITCHYARD_KEEPALIVE_IDLE_TIMEOUT_MS", "500"),
            ("SWITCHYARD_MAX_CONNECTIONS", "2"),
        ] {
            l.env.insert(var.into(), value.into());
        }
        let s = resolve(&l).unwrap().settings;
        assert_eq!(
            (
                s.header_read_timeout_ms,
                s.body_read_timeout_ms,
                s.keepalive_idle_timeout_ms,
                s.max_connections
            ),
            (300, 400, 500, 2)
        );
        l.env
            .insert("SWITCHYARD_MAX_CONNECTIONS".into(), "0".into());
        assert_eq!(
            resolve(&l).unwrap_err().to_string(),
            "setting `server.max_connections` (from environment) must be an integer between 1 and 1000000, got \"0\""
        );
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
        let src = |k: &str| r.resolved.iter().find(|x| x.def.key == k).unwrap().source;
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
        assert_eq!(
            validate(k, &json!(100), Source::Database),
            Ok(SettingValue::Int(100))
        );
        assert_eq!(
            validate(k, &json!(300_000), Source::Database),
            Ok(SettingValue::Int(300_000))
        );
        assert!(validate(k, &json!(99), Source::Database).is_err());
        assert!(validate(k, &json!(300_001), Source::Database).is_err());
        assert!(validate(k, &json!(-1), Source::Database).is_err());
        assert!(validate(k, &json!(true), Source::Database).is_err());
    }

    #[test]
    fn definitions_are_sorted_unique_and_defaults_valid() {
        for w in DEFS.windows(2) {
            assert!(w[0].key < w[1].key);
        }
        for d in DEFS {
            let v = d.default_value();
            assert_eq!(
                validate(d.key, &v.to_json(), Source::File),
                Ok(v),
                "{}",
                d.key
            );
        }
    }

    /// A valid value of `d` other than its default.
    fn another_value(d: &SettingDef) -> Value {
        match d.kind {
            Kind::Int(Int { default, max, .. }) | Kind::Clamped(Clamped { default, max, .. }) => {
                json!(if default < max {
                    default + 1
                } else {
                    default - 1
                })
            }
            Kind::Fraction(Fraction { default }) => {
                json!(if default <= 0.5 {
                    default + 0.25
                } else {
                    default - 0.25
                })
            }
            Kind::Bool(Bool { default }) => json!(!default),
            Kind::Choice(Choice { default, options }) => {
                json!(options.iter().find(|o| **o != default).unwrap())
            }
            Kind::Name(Name { default }) => json!(format!("{default}-other")),
            Kind::Statuses(Statuses { default }) => {
                json!(if default == "500" { "501" } else { "500" })
            }
            Kind::RedisUrl(RedisUrl) => json!("redis://127.0.0.1:6390/1"),
            Kind::Restatements(_) => json!([{"id": "r", "provider": "p", "fromStatuses": [403],
                "toStatus": 429, "textMarkers": ["quota"]}]),
            Kind::ErrorRules(_) => json!([{"id": "e", "provider": "p", "statuses": [400],
                "reason": "quota_exhausted"}]),
        }
    }

    #[test]
    fn every_listed_setting_is_read_into_the_typed_settings() {
        let defaults = resolve(&Layers::default()).unwrap().settings;
        for d in DEFS {
            let mut l = Layers::default();
            l.database.insert(d.key.into(), another_value(d));
            let r = resolve(&l).unwrap();
            assert_eq!(r.ignored, [], "{}", d.key);
            assert_ne!(
                r.settings, defaults,
                "`{}` is listed in DEFS but resolve never reads it",
                d.key
            );
        }
    }

    #[test]
    fn a_setting_read_but_not_listed_is_reported_not_invented() {
        const UNLISTED: Setting<Int> = Setting {
            key: "test.unlisted",
            env: "SWITCHYARD_TEST_UNLISTED",
            kind: Int {
                default: 7,
                min: 0,
                max: 10,
            },
            applies: Applies::Live,
            doc: "Not in DEFS.",
        };
        let resolved = resolve(&Layers::default()).unwrap().resolved;
        let mut r = Reader {
            resolved: &resolved,
            unlisted: None,
        };
        assert_eq!(r.get(&SERVER_MAX_CONNECTIONS), 10_000);
        assert_eq!(r.unlisted, None);
        assert_eq!(r.get(&UNLISTED), 7);
        assert_eq!(r.get(&SERVER_IO_THREADS), 0);
        assert_eq!(r.unlisted, Some("test.unlisted"));
    }

    #[test]
    fn typed_reads_have_the_kinds_types() {
        let mut l = Layers::default();
        l.database.insert(
            RESILIENCE_MODEL_LOCKOUT_ERROR_CODES.key.into(),
            json!([429, 503]),
        );
        let resolved = resolve(&l).unwrap().resolved;
        let mut r = Reader {
            resolved: &resolved,
            unlisted: None,
        };
        let codes: Vec<u16> = r.get(&RESILIENCE_MODEL_LOCKOUT_ERROR_CODES);
        let limit: u64 = r.get(&REQUEST_MAX_BODY_BYTES);
        let share: f64 = r.get(&QUOTA_SATURATION_THRESHOLD);
        let on: bool = r.get(&COMBO_COOLDOWN_WAIT_ENABLED);
        let driver: String = r.get(&QUOTA_STORE_DRIVER);
        assert_eq!(
            (codes, limit, share, on, driver.as_str()),
            (vec![429, 503], 10 * 1024 * 1024, 0.5, true, "sqlite")
        );
        // A value of another kind (resolution never gives one) reads as the default.
        assert_eq!(
            REQUEST_MAX_BODY_BYTES.kind.read(&SettingValue::Bool(true)),
            10_485_760
        );
        assert_eq!(
            RESILIENCE_MODEL_LOCKOUT_ERROR_CODES
                .kind
                .read(&SettingValue::Int(1)),
            [403, 404, 429, 502, 503, 504]
        );
    }

    #[test]
    fn the_profile_consts_name_their_class_settings() {
        for (keys, class) in [
            (BREAKER_OAUTH, "oauth"),
            (BREAKER_API_KEY, "apiKey"),
            (BREAKER_LOCAL, "local"),
        ] {
            let got = [
                keys.degrade_at.key,
                keys.open_at.key,
                keys.reset_ms.key,
                keys.double_after.key,
                keys.max_multiplier.key,
            ];
            let want = [
                "degradeAt",
                "openAt",
                "resetMs",
                "doubleAfter",
                "maxMultiplier",
            ]
            .map(|f| format!("breaker.{class}.{f}"));
            assert_eq!(got, want);
        }
        for (keys, class) in [(COOLDOWN_OAUTH, "oauth"), (COOLDOWN_API_KEY, "apiKey")] {
            assert_eq!(
                [keys.base_ms.key, keys.backoff_steps.key],
                ["baseMs", "backoffSteps"].map(|f| format!("cooldown.{class}.{f}"))
            );
        }
        for (keys, class) in [
            (PROVIDER_COOLDOWN_OAUTH, "oauth"),
            (PROVIDER_COOLDOWN_API_KEY, "apiKey"),
        ] {
            assert_eq!(
                [
                    keys.failure_threshold.key,
                    keys.failure_window_ms.key,
                    keys.cooldown_ms.key
                ],
                ["failureThreshold", "failureWindowMs", "cooldownMs"]
                    .map(|f| format!("providerCooldown.{class}.{f}"))
            );
        }
    }

    #[test]
    fn settings_read_at_start_or_per_connection_say_so() {
        let applying = |a: Applies| -> Vec<&str> {
            DEFS.iter()
                .filter(|d| d.applies == a)
                .map(|d| d.key)
                .collect()
        };
        assert_eq!(
            applying(Applies::Restart),
            [
                "quotaStore.driver",
                "quotaStore.redisPrefix",
                "quotaStore.redisUrl",
                "quotaStore.requireRedis",
                "server.io_threads",
                "server.max_connections",
            ]
        );
        assert_eq!(
            applying(Applies::NewConnections),
            [
                "server.body_read_timeout_ms",
                "server.header_read_timeout_ms",
                "server.keepalive_idle_timeout_ms",
            ]
        );
        assert_eq!(applying(Applies::Live).len(), DEFS.len() - 9);
        assert_eq!(
            serde_json::to_value([Applies::Live, Applies::NewConnections, Applies::Restart])
                .unwrap(),
            json!(["live", "new_connections", "restart"])
        );
        for a in [Applies::Live, Applies::NewConnections, Applies::Restart] {
            assert_eq!(json!(a.as_str()), serde_json::to_value(a).unwrap());
        }
    }

    #[test]
    fn fractions_choices_and_urls_are_typed() {
        let mut l = Layers::default();
        l.env
            .insert("QUOTA_SATURATION_THRESHOLD".into(), "0.8".into());
        l.env.insert("QUOTA_STORE_DRIVER".into(), "redis".into());
        l.database
            .insert("quotaStore.driver".into(), json!("sqlite"));
        l.file.insert(
            "quotaStore.redisUrl".into(),
            json!("redis://:pw@127.0.0.1:6379/0"),
        );
        let r = resolve(&l).unwrap();
        assert_eq!(r.settings.quota.saturation_threshold, 0.8);
        assert_eq!(r.settings.quota.store_driver, "sqlite");
        assert_eq!(r.settings.quota.redis_url, "redis://:pw@127.0.0.1:6379/0");
        assert_eq!(r.settings.quota.redis_prefix, "switchyard");
        assert!(r.settings.quota.share_gate_enabled);
        let k = "quotaShareConcurrencyLimit.enabled";
        assert_eq!(
            validate(k, &json!("off"), Source::Env),
            Ok(SettingValue::Bool(false))
        );
        assert_eq!(
            validate(k, &json!(true), Source::Database),
            Ok(SettingValue::Bool(true))
        );
        assert!(validate(k, &json!("maybe"), Source::Env).is_err());
        assert!(validate("quotaStore.redisPrefix", &json!("a b"), Source::Env).is_err());
        assert!(validate("quotaStore.redisPrefix", &json!(""), Source::Env).is_err());
        let k = "quota.saturationThreshold";
        assert!(validate(k, &json!(1.5), Source::Database).is_err());
        assert!(validate(k, &json!("abc"), Source::Database).is_err());
        assert_eq!(
            validate("quotaStore.driver", &json!("mongo"), Source::Env)
                .unwrap_err()
                .to_string(),
            "setting `quotaStore.driver` (from environment) must be one of sqlite, redis, got \"mongo\""
        );
    }

    #[test]
    fn resilience_settings_resolve_and_inconsistent_lockouts_fall_back() {
        let r = resolve(&Layers::default()).unwrap().settings.resilience;
        assert_eq!(r.lockout, crate::resilience::lockout::Settings::default());
        assert!(!r.provider_cooldown_enabled);
        assert_eq!(
            r.provider_cooldown_oauth,
            crate::resilience::provider_cooldown::Profile::for_class(
                crate::domain::AuthClass::Oauth
            )
        );
        let mut l = Layers::default();
        l.env.insert("MODEL_LOCKOUT_ENABLED".into(), "true".into());
        l.env
            .insert("MODEL_LOCKOUT_ERROR_CODES".into(), "429, 503".into());
        l.env.insert("PROVIDER_COOLDOWN_ENABLED".into(), "1".into());
        let r = resolve(&l).unwrap();
        assert!(r.settings.resilience.lockout.enabled);
        assert_eq!(r.settings.resilience.lockout.error_codes, [429, 503]);
        assert!(r.settings.resilience.provider_cooldown_enabled);
        assert!(validate(
            "resilience.modelLockout.errorCodes",
            &json!([200]),
            Source::Database
        )
        .is_err());
        assert_eq!(
            validate(
                "resilience.modelLockout.errorCodes",
                &json!([404, 429]),
                Source::Database
            ),
            Ok(SettingValue::Text("404,429".into()))
        );
        let mut l = Layers::default();
        l.database
            .insert("resilience.modelLockout.maxCooldownMs".into(), json!(5_000));
        let r = resolve(&l).unwrap();
        assert_eq!(r.settings.resilience.lockout.max_cooldown_ms, 1_800_000);
        assert_eq!(r.ignored.len(), 1);
    }

    #[test]
    fn breaker_and_cooldown_profiles_resolve_per_class_from_every_layer() {
        use crate::domain::AuthClass;
        use crate::resilience::{breaker, cooldown};
        let r = resolve(&Layers::default()).unwrap();
        assert!(r.ignored.is_empty());
        let s = r.settings.resilience;
        // The defaults are SPEC R1's and R3's, and the same as the built-in profiles.
        assert_eq!(s.breaker, breaker::Profiles::default());
        assert_eq!(s.cooldown, cooldown::Profiles::default());
        let profile =
            |degrade_at, open_at, reset_ms, double_after, max_multiplier| breaker::Profile {
                degrade_at,
                open_at,
                reset_ms,
                double_after,
                max_multiplier,
            };
        assert_eq!(s.breaker.get(AuthClass::Oauth), profile(5, 8, 60_000, 2, 8));
        assert_eq!(
            s.breaker.get(AuthClass::Apikey),
            profile(7, 12, 30_000, 3, 4)
        );
        assert_eq!(s.breaker.get(AuthClass::Local), profile(1, 2, 15_000, 3, 4));
        let backoff = |base_ms, steps| cooldown::Profile { base_ms, steps };
        assert_eq!(s.cooldown.get(AuthClass::Oauth), backoff(5_000, 8));
        assert_eq!(s.cooldown.get(AuthClass::Apikey), backoff(3_000, 5));
        assert_eq!(s.cooldown.get(AuthClass::Local), backoff(3_000, 5));

        let mut l = Layers::default();
        l.file.insert("breaker.oauth.resetMs".into(), json!(90_000));
        l.env
            .insert("SWITCHYARD_BREAKER_LOCAL_OPEN_AT".into(), "4".into());
        l.env
            .insert("SWITCHYARD_COOLDOWN_OAUTH_BACKOFF_STEPS".into(), "0".into());
        for (key, value) in [
            ("breaker.apiKey.degradeAt", json!(2)),
            ("breaker.apiKey.openAt", json!(3)),
            ("breaker.apiKey.doubleAfter", json!("1")),
            ("breaker.apiKey.maxMultiplier", json!(64)),
            ("breaker.oauth.maxMultiplier", json!(65)),
            ("cooldown.apiKey.baseMs", json!(1_500)),
            ("cooldown.apiKey.backoffSteps", json!(20)),
            ("cooldown.oauth.baseMs", json!(99)),
        ] {
            l.database.insert(key.into(), value);
        }
        let r = resolve(&l).unwrap();
        let s = r.settings.resilience;
        assert_eq!(s.breaker.get(AuthClass::Oauth), profile(5, 8, 90_000, 2, 8));
        assert_eq!(
            s.breaker.get(AuthClass::Apikey),
            profile(2, 3, 30_000, 1, 64)
        );
        assert_eq!(s.breaker.get(AuthClass::Local), profile(1, 4, 15_000, 3, 4));
        assert_eq!(s.cooldown.get(AuthClass::Oauth), backoff(5_000, 0));
        // Local connections follow the API-key cooldown.
        assert_eq!(s.cooldown.get(AuthClass::Local), backoff(1_500, 20));
        let ignored: Vec<String> = r.ignored.iter().map(ToString::to_string).collect();
        assert_eq!(
            ignored,
            [
                "setting `breaker.oauth.maxMultiplier` (from database) must be an integer between 1 and 64, got 65",
                "setting `cooldown.oauth.baseMs` (from database) must be an integer between 100 and 600000, got 99",
            ]
        );
        for (key, bad, good) in [
            ("breaker.apiKey.resetMs", 999, 1_000),
            ("breaker.apiKey.resetMs", 3_600_001, 3_600_000),
            ("breaker.oauth.degradeAt", 0, 1),
            ("breaker.local.openAt", 0, 1),
            ("breaker.local.doubleAfter", 0, 20),
            ("breaker.oauth.maxMultiplier", 0, 1),
            ("cooldown.apiKey.baseMs", 600_001, 600_000),
            ("cooldown.oauth.backoffSteps", 21, 0),
        ] {
            assert!(
                validate(key, &json!(bad), Source::Database).is_err(),
                "{key}"
            );
            assert_eq!(
                validate(key, &json!(good), Source::Database),
                Ok(SettingValue::Int(good)),
                "{key}"
            );
        }
        // From the environment, an out-of-bounds value stops the start.
        let mut l = Layers::default();
        l.env
            .insert("SWITCHYARD_BREAKER_API_KEY_RESET_MS".into(), "10".into());
        assert_eq!(
            resolve(&l).unwrap_err().to_string(),
            "setting `breaker.apiKey.resetMs` (from environment) must be an integer between 1000 and 3600000, got \"10\""
        );
    }

    #[test]
    fn a_breaker_that_degrades_after_it_opens_falls_back_to_its_class_default() {
        use crate::resilience::breaker;
        let mut l = Layers::default();
        // openAt 3 alone leaves the API-key degradeAt (7) above it.
        l.database.insert("breaker.apiKey.openAt".into(), json!(3));
        l.database
            .insert("breaker.apiKey.resetMs".into(), json!(45_000));
        l.env
            .insert("SWITCHYARD_BREAKER_LOCAL_DEGRADE_AT".into(), "3".into());
        l.database
            .insert("breaker.oauth.degradeAt".into(), json!(8));
        let r = resolve(&l).unwrap();
        let defaults = breaker::Profiles::default();
        // The whole profile falls back, as inconsistent lockout settings do; an equal
        // degrade and open threshold is consistent.
        assert_eq!(r.settings.resilience.breaker.apikey, defaults.apikey);
        assert_eq!(r.settings.resilience.breaker.local, defaults.local);
        assert_eq!(r.settings.resilience.breaker.oauth.degrade_at, 8);
        let problem = |key: &str, got: &str| SettingError::Invalid {
            key: key.into(),
            origin: COMBINED,
            constraint: "consistent".into(),
            got: got.into(),
        };
        assert_eq!(
            r.ignored,
            [
                problem(
                    "breaker.apiKey.degradeAt",
                    "breaker.apiKey.degradeAt (7) must be <= breaker.apiKey.openAt (3)"
                ),
                problem(
                    "breaker.local.degradeAt",
                    "breaker.local.degradeAt (3) must be <= breaker.local.openAt (2)"
                ),
            ]
        );
        // The resolved view still shows the values as set: the operator sees what to fix.
        let value = |k: &str| {
            r.resolved
                .iter()
                .find(|x| x.def.key == k)
                .unwrap()
                .value
                .clone()
        };
        assert_eq!(value("breaker.apiKey.openAt"), SettingValue::Int(3));
        l.database
            .insert("breaker.apiKey.degradeAt".into(), json!(3));
        let r = resolve(&l).unwrap();
        assert_eq!(r.settings.resilience.breaker.apikey.open_at, 3);
        assert_eq!(r.settings.resilience.breaker.apikey.reset_ms, 45_000);
        assert_eq!(r.ignored.len(), 1);
    }

    #[test]
    fn debug_output_never_shows_a_redis_password() {
        let mut layers = Layers::default();
        layers.env.insert(
            "QUOTA_STORE_REDIS_URL".into(),
            "redis://:hunter2-secret@127.0.0.1:6379/0".into(),
        );
        layers
            .env
            .insert("QUOTA_STORE_DRIVER".into(), "redis".into());
        let r = resolve(&layers).unwrap();
        for shown in [format!("{layers:?}"), format!("{r:?}")] {
            assert!(!shown.contains("hunter2"), "{shown}");
        }
        assert!(format!("{:?}", r.settings.quota).contains("redis://:***@127.0.0.1:6379/0"));
        assert!(format!("{layers:?}").contains("QUOTA_STORE_REDIS_URL"));
    }

    #[test]
    fn redis_urls_are_never_echoed_or_shown_with_their_password() {
        let e = validate(
            "quotaStore.redisUrl",
            &json!("http://user:hunter2@host"),
            Source::Env,
        )
        .unwrap_err()
        .to_string();
        assert!(!e.contains("hunter2"), "{e}");
        assert_eq!(
            redact_url("redis://user:hunter2@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(redact_url("rediss://tok@host"), "rediss://***@host");
        assert_eq!(
            redact_url("redis://:p/ss?w#x@host:6379/2"),
            "redis://:***@host:6379/2"
        );
        assert_eq!(
            redact_url("redis+unix:///run/redis.sock?db=1&password=hunter2"),
            "redis+unix:///run/redis.sock?db=1&password=***"
        );
        assert_eq!(redact_url("redis://host:6379"), "redis://host:6379");
        let d = def("quotaStore.redisUrl").unwrap();
        assert_eq!(
            d.display(&SettingValue::Text("redis://:pw@h".into())),
            SettingValue::Text("redis://:***@h".into())
        );
    }

    #[test]
    fn request_queue_limits_resolve_by_layer_and_clamp() {
        let queue = |layers: &Layers| resolve(layers).unwrap().settings.concurrency.queue;
        assert_eq!(
            queue(&Layers::default()),
            crate::resilience::admission::DEFAULTS
        );
        let mut layers = Layers::default();
        layers
            .file
            .insert("requestQueue.maxWaitMs".into(), json!(5_000));
        assert_eq!(queue(&layers).max_wait_ms, 5_000);
        layers
            .env
            .insert("RATE_LIMIT_MAX_WAIT_MS".into(), "7000".into());
        assert_eq!(queue(&layers).max_wait_ms, 7_000);
        layers
            .database
            .insert("requestQueue.maxWaitMs".into(), json!(9_000));
        assert_eq!(queue(&layers).max_wait_ms, 9_000);
        // Out-of-range values are brought into range, not refused (SPEC R10).
        let mut layers = Layers::default();
        layers
            .env
            .insert("RATE_LIMIT_MAX_WAIT_MS".into(), "0".into());
        layers.env.insert(
            "RATE_LIMIT_EXECUTION_MAX_WAIT_MS".into(),
            "999999999999".into(),
        );
        layers
            .env
            .insert("RATE_LIMIT_MAX_QUEUE_DEPTH".into(), "5000000".into());
        assert_eq!(
            queue(&layers),
            crate::resilience::admission::Limits {
                max_wait_ms: 1,
                execution_max_wait_ms: DAY_MS,
                max_queue_depth: 100_000,
            }
        );
        assert!(validate("requestQueue.maxWaitMs", &json!("soon"), Source::Env).is_err());
    }
}
