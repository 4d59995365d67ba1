//! The demo's simulated traffic: three keys send requests through the gateway's own
//! HTTP port, and the simulated provider `alpha` fails for a while every few minutes,
//! so the dashboard has something to show from the first minute on.
//!
//! What happens when is [`step`], a pure function of the tick number (time since the
//! demo started, in [`TICK_MS`] steps); [`spawn`] only carries it out.
//!
//! - `demo-burst` sends one request a tick (four a second) straight to
//!   `alpha/mock-small` (in the `demo-team` pool) for [`BURST_MS`] at the start of every
//!   cycle: it borrows beyond its fair share while the pool is lenient, pushes the pool
//!   past its saturation threshold, and from then on the strict pool refuses it with
//!   `429 quota_exceeded`.
//! - `demo-steady-1` and `demo-steady-2` each send one request every
//!   [`STEADY_EVERY_TICKS`] ticks to the `demo` combo (alpha first, then beta).
//! - From [`FAIL_AT_MS`] into every [`CYCLE_MS`] cycle, for [`FAIL_MS`], the mock
//!   answers alpha's credential with 500: the combo fails over to beta, alpha's breaker
//!   opens after its consecutive failures (the demo disables cooling on `alpha-main`,
//!   so that every failure reaches the breaker instead of the connection cooling down
//!   first), and closes again once a probe succeeds after the window.

use std::time::Duration;
use switchyard_mock::{Match, Rule};
use tokio::task::{JoinHandle, JoinSet};

/// The length of one tick of the schedule.
pub const TICK_MS: u64 = 250;

/// The schedule repeats every cycle.
pub const CYCLE_MS: u64 = 120_000;

/// When the burst starts in each cycle, and how long it lasts.
pub const BURST_AT_MS: u64 = 2_000;
pub const BURST_MS: u64 = 30_000;

/// Ticks between two requests of one steady key.
pub const STEADY_EVERY_TICKS: u64 = 12;

/// When alpha starts failing in each cycle, and for how long.
pub const FAIL_AT_MS: u64 = 33_000;
pub const FAIL_MS: u64 = 15_000;

/// The API-key breaker profile the simulation runs with (settings, stored in the demo's
/// database), quicker than the default (7, 12, 30 s) so that a failure window opens
/// alpha's breaker within seconds and a probe closes it before the first minute is
/// out: degraded at 3 consecutive failures, open at 5, probing after 10 s.
pub const BREAKER_SETTINGS: [(&str, u64); 3] = [
    ("breaker.apiKey.degradeAt", 3),
    ("breaker.apiKey.openAt", 5),
    ("breaker.apiKey.resetMs", 10_000),
];

/// Requests of the simulation in flight at most; a send finding them all busy is
/// skipped, never queued.
pub const MAX_IN_FLIGHT: usize = 8;

/// How long one simulated request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// A simulated client of the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Client {
    /// Sends in bursts, beyond its fair share.
    Burst,
    /// Sends at an even pace.
    SteadyOne,
    /// Sends at an even pace, half a period after [`Client::SteadyOne`].
    SteadyTwo,
}

impl Client {
    pub const ALL: [Self; 3] = [Self::Burst, Self::SteadyOne, Self::SteadyTwo];

    /// The id of its API key.
    pub fn key_id(self) -> &'static str {
        match self {
            Self::Burst => "demo-burst",
            Self::SteadyOne => "demo-steady-1",
            Self::SteadyTwo => "demo-steady-2",
        }
    }

    /// The model it asks for.
    pub fn model(self) -> &'static str {
        match self {
            Self::Burst => "alpha/mock-small",
            Self::SteadyOne | Self::SteadyTwo => "demo",
        }
    }
}

/// A change of alpha's scripted health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alpha {
    /// Alpha starts answering 500.
    Fails,
    /// Alpha answers normally again.
    Recovers,
}

/// What the simulation does at one tick.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Step {
    /// The clients that send one request each (a client may appear more than once).
    pub sends: Vec<Client>,
    /// A change of alpha's health, made before the requests are sent.
    pub alpha: Option<Alpha>,
}

/// Whether alpha fails `elapsed_ms` after the start.
pub fn alpha_failing(elapsed_ms: u64) -> bool {
    let at = elapsed_ms % CYCLE_MS;
    (FAIL_AT_MS..FAIL_AT_MS + FAIL_MS).contains(&at)
}

/// Whether the bursty key sends `elapsed_ms` after the start.
fn bursting(elapsed_ms: u64) -> bool {
    let at = elapsed_ms % CYCLE_MS;
    (BURST_AT_MS..BURST_AT_MS + BURST_MS).contains(&at)
}

/// What to do at tick `tick` (`tick × TICK_MS` after the start).
pub fn step(tick: u64) -> Step {
    let now = tick.saturating_mul(TICK_MS);
    let was_failing = tick > 0 && alpha_failing(now - TICK_MS);
    let alpha = match (was_failing, alpha_failing(now)) {
        (false, true) => Some(Alpha::Fails),
        (true, false) => Some(Alpha::Recovers),
        _ => None,
    };
    let mut sends = Vec::new();
    if bursting(now) {
        sends.push(Client::Burst);
    }
    match tick % STEADY_EVERY_TICKS {
        0 => sends.push(Client::SteadyOne),
        t if t == STEADY_EVERY_TICKS / 2 => sends.push(Client::SteadyTwo),
        _ => {}
    }
    Step { sends, alpha }
}

/// The mock's rules for alpha's health: while it fails, a 500 for alpha's credential
/// comes first, before `answer` (the rule every other request gets).
pub fn mock_rules(failing: bool, alpha_credential: &str, answer: &Rule) -> Vec<Rule> {
    let fail = Rule {
        matches: Match {
            credential: Some(alpha_credential.to_owned()),
            ..Match::default()
        },
        status: Some(500),
        ..Rule::default()
    };
    failing
        .then_some(fail)
        .into_iter()
        .chain([answer.clone()])
        .collect()
}

/// Where the simulation sends its requests and what it sends them with.
#[derive(Debug, Clone)]
pub struct Target {
    /// The gateway's base URL, `http://ADDR`.
    pub gateway: String,
    /// The mock's base URL, for its rule endpoints.
    pub mock: String,
    /// The credential the mock sees from alpha.
    pub alpha_credential: String,
    /// The mock's normal answer rule.
    pub answer: Rule,
    /// Each client's API key secret.
    pub secrets: Vec<(Client, String)>,
}

/// Starts the simulation; abort the handle to stop it (its requests in flight go with
/// it).
pub fn spawn(target: Target) -> JoinHandle<()> {
    tokio::spawn(run(target))
}

async fn run(target: Target) {
    let http = match reqwest::Client::builder().timeout(REQUEST_TIMEOUT).build() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "Simulated traffic cannot start.");
            return;
        }
    };
    let mut ticks = tokio::time::interval(Duration::from_millis(TICK_MS));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut in_flight = JoinSet::new();
    for tick in 0u64.. {
        ticks.tick().await;
        while in_flight.try_join_next().is_some() {}
        let Step { sends, alpha } = step(tick);
        if let Some(change) = alpha {
            set_alpha(&http, &target, change).await;
        }
        for client in sends {
            if in_flight.len() >= MAX_IN_FLIGHT {
                tracing::debug!(
                    key_id = client.key_id(),
                    "Simulated request skipped: too many in flight."
                );
                continue;
            }
            let Some((_, secret)) = target.secrets.iter().find(|(c, _)| *c == client) else {
                continue;
            };
            in_flight.spawn(send(
                http.clone(),
                format!("{}/v1/chat/completions", target.gateway),
                secret.clone(),
                client,
            ));
        }
    }
}

/// Scripts alpha's health on the mock through its rule endpoints.
async fn set_alpha(http: &reqwest::Client, target: &Target, change: Alpha) {
    let failing = change == Alpha::Fails;
    let rules_url = format!("{}/_mock/rules", target.mock);
    let mut result = http.delete(&rules_url).send().await.map(drop);
    for rule in mock_rules(failing, &target.alpha_credential, &target.answer) {
        if result.is_ok() {
            result = http.post(&rules_url).json(&rule).send().await.map(drop);
        }
    }
    match (result, change) {
        (Err(e), _) => tracing::warn!(error = %e, "Simulation could not script the mock."),
        (Ok(()), Alpha::Fails) => tracing::info!(
            seconds = FAIL_MS / 1000,
            "Simulation: alpha starts failing (500 on every request); the demo combo fails over to beta and alpha's breaker opens."
        ),
        (Ok(()), Alpha::Recovers) => tracing::info!(
            "Simulation: alpha's failure window ends; its breaker closes after the next successful probe."
        ),
    }
}

/// Sends one simulated chat request and logs its status at debug level.
async fn send(http: reqwest::Client, url: String, secret: String, client: Client) {
    let body = serde_json::json!({
        "model": client.model(),
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "Simulated traffic"}],
    });
    match http.post(url).bearer_auth(secret).json(&body).send().await {
        Ok(r) => tracing::debug!(
            key_id = client.key_id(),
            status = r.status().as_u16(),
            "Simulated request answered."
        ),
        Err(e) => {
            tracing::debug!(key_id = client.key_id(), error = %e, "Simulated request failed.")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ticks of `0..ticks` at which `client` sends, as seconds since the start.
    fn sends_of(client: Client, ticks: u64) -> Vec<f64> {
        (0..ticks)
            .flat_map(|t| {
                step(t)
                    .sends
                    .into_iter()
                    .filter(move |c| *c == client)
                    .map(move |_| t as f64 * TICK_MS as f64 / 1000.0)
            })
            .collect()
    }

    #[test]
    fn the_first_ticks_are_exact() {
        let sends: Vec<Vec<Client>> = (0..14).map(|t| step(t).sends).collect();
        let mut expected = vec![vec![]; 14];
        expected[0] = vec![Client::SteadyOne];
        expected[6] = vec![Client::SteadyTwo];
        // The burst starts at 2 s (tick 8).
        for burst in &mut expected[8..] {
            burst.push(Client::Burst);
        }
        expected[12].push(Client::SteadyOne);
        assert_eq!(sends, expected);
        assert!((0..14).all(|t| step(t).alpha.is_none()));
    }

    #[test]
    fn the_breaker_settings_are_valid_and_open_within_the_failure_window() {
        use switchyard_core::settings::{resolve, Layers};
        let layers = Layers {
            database: BREAKER_SETTINGS
                .iter()
                .map(|(k, v)| ((*k).to_owned(), serde_json::json!(v)))
                .collect(),
            ..Layers::default()
        };
        let resolved = resolve(&layers).unwrap();
        assert!(resolved.ignored.is_empty(), "{:?}", resolved.ignored);
        let p = resolved.settings.resilience.breaker.apikey;
        assert_eq!((p.degrade_at, p.open_at, p.reset_ms), (3, 5, 10_000));
        // The steady keys send to the combo every 1.5 s between them: five failures
        // take 7.5 s, well inside the window, and the probe comes after it.
        let steady_gap_ms = STEADY_EVERY_TICKS * TICK_MS / 2;
        let opens_at = FAIL_AT_MS + u64::from(p.open_at) * steady_gap_ms;
        assert!(opens_at < FAIL_AT_MS + FAIL_MS);
        assert!(opens_at + p.reset_ms > FAIL_AT_MS + FAIL_MS);
        assert!(opens_at + p.reset_ms < 60_000);
    }

    #[test]
    fn alpha_fails_from_33_to_48_seconds_of_every_two_minutes() {
        let changes: Vec<(u64, Alpha)> = (0..2 * CYCLE_MS / TICK_MS + 1)
            .filter_map(|t| step(t).alpha.map(|a| (t * TICK_MS, a)))
            .collect();
        assert_eq!(
            changes,
            vec![
                (33_000, Alpha::Fails),
                (48_000, Alpha::Recovers),
                (153_000, Alpha::Fails),
                (168_000, Alpha::Recovers),
            ]
        );
        assert!(!alpha_failing(32_999));
        assert!(alpha_failing(33_000));
        assert!(alpha_failing(47_999));
        assert!(!alpha_failing(48_000));
        assert!(alpha_failing(120_000 + 40_000));
    }

    #[test]
    fn the_burst_sends_four_a_second_for_30_seconds_each_cycle() {
        let burst = sends_of(Client::Burst, 2 * CYCLE_MS / TICK_MS);
        assert_eq!(burst.len(), 2 * 120);
        assert_eq!(burst.first(), Some(&2.0));
        assert_eq!(burst[119], 31.75);
        assert_eq!(burst[120], 122.0);
        assert_eq!(burst.last(), Some(&151.75));
    }

    #[test]
    fn steady_keys_send_every_three_seconds_half_a_period_apart() {
        let one = sends_of(Client::SteadyOne, 40);
        let two = sends_of(Client::SteadyTwo, 40);
        assert_eq!(one, vec![0.0, 3.0, 6.0, 9.0]);
        assert_eq!(two, vec![1.5, 4.5, 7.5]);
    }

    #[test]
    fn the_simulation_stays_light() {
        // Never more than two requests in one tick, and at most five a second.
        let cycle = CYCLE_MS / TICK_MS;
        assert_eq!((0..cycle).map(|t| step(t).sends.len()).max(), Some(2));
        let per_second = (0..cycle - 4)
            .map(|t| (t..t + 4).map(|u| step(u).sends.len()).sum::<usize>())
            .max();
        assert_eq!(per_second, Some(5));
    }

    #[test]
    fn the_failure_rule_comes_before_the_answer_rule() {
        let answer = Rule {
            chunks: Some(16),
            ..Rule::default()
        };
        assert_eq!(mock_rules(false, "cred", &answer), vec![answer.clone()]);
        let failing = mock_rules(true, "cred", &answer);
        assert_eq!(failing.len(), 2);
        assert_eq!(failing[0].matches.credential.as_deref(), Some("cred"));
        assert_eq!(failing[0].status, Some(500));
        assert_eq!(failing[1], answer);
    }

    #[test]
    fn clients_have_their_keys_and_models() {
        let named: Vec<(&str, &str)> = Client::ALL
            .iter()
            .map(|c| (c.key_id(), c.model()))
            .collect();
        assert_eq!(
            named,
            vec![
                ("demo-burst", "alpha/mock-small"),
                ("demo-steady-1", "demo"),
                ("demo-steady-2", "demo"),
            ]
        );
    }
}
