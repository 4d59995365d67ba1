//! `switchyard demo`: the gateway plus a built-in mock provider, preconfigured so a
//! newcomer sees a streamed answer within a minute of cloning.

use crate::cli::{admin_note, init_tracing, run_with_dashboard, say, DemoArgs};
use anyhow::Context;
use secrecy::{ExposeSecret, SecretString};
use std::collections::BTreeMap;
use std::sync::Arc;
use switchyard_core::domain::{AuthClass, UpstreamFormat};
use switchyard_core::quota::pool::{AllocationInput, DimensionInput, PoolInput};
use switchyard_gateway::bootstrap;
use switchyard_gateway::clock::{Clock, SystemClock};
use switchyard_gateway::config::{self, FileConfig, LogFormat};
use switchyard_gateway::keys::{new_key, NewKey};
use switchyard_mock::{MockServer, Rule};
use switchyard_model::{
    AliasRecord, ComboRecord, ConnectionRecord, ProviderRecord, SaveMode, TargetRecord,
};
use tokio::net::TcpListener;
use traffic::Client;

mod traffic;

/// Simulated OpenAI-format providers: (provider id, connection id, credential the mock
/// sees).
const PROVIDERS: [(&str, &str, &str); 2] = [
    ("alpha", "alpha-main", "demo-alpha-credential"),
    ("beta", "beta-main", "demo-beta-credential"),
];

/// The simulated Anthropic-format provider: (provider id, connection id, credential).
const CLAUDE: (&str, &str, &str) = ("claude", "claude-main", "demo-claude-credential");

/// The simulated Responses-format provider (a Codex-style account).
const CODEX: (&str, &str, &str) = ("codex", "codex-main", "demo-codex-credential");

/// The demo's model aliases (SPEC G3), in the order they are tried: Claude Code's small
/// fast model, its main model, and Codex's default, so `claude` and `codex` run with
/// only the base URL and the demo key.
const DEMO_ALIASES: [(&str, &str); 3] = [
    ("*haiku*", "claude/claude-haiku"),
    ("claude-*", "demo-claude"),
    ("gpt-*", "codex/gpt-5-codex"),
];

/// The output limit of the OpenAI-format demo models: Claude Code asks for 128 000
/// tokens, which a translated request is clamped to.
const DEMO_OUTPUT_LIMIT: u64 = 16_384;

/// Chunks per demo answer and the pause between them: slow enough to watch it stream.
const DEMO_CHUNKS: u32 = 16;
const DEMO_CHUNK_INTERVAL_MS: u64 = 120;

/// The demo's quota pool and its hourly request limit: small enough that the simulated
/// traffic saturates it within a minute, large enough not to block a first exploration.
const DEMO_POOL: &str = "demo-team";
const DEMO_POOL_LIMIT: u32 = 240;

/// The allocation weights in the demo pool (percent of its limit): the newcomer's key,
/// the bursty simulated key, and each steady one.
const DEMO_KEY_WEIGHT: f64 = 30.0;
const BURST_WEIGHT: f64 = 10.0;
const STEADY_WEIGHT: f64 = 25.0;

/// An allocation of the demo pool.
fn allocation(api_key_id: &str, weight: f64) -> AllocationInput {
    AllocationInput {
        api_key_id: api_key_id.to_owned(),
        allocation_weight: weight,
        cap_value: None,
        cap_unit: None,
        policy: "hard".to_owned(),
    }
}

/// The weight of a simulated client's key in the demo pool.
fn weight_of(client: Client) -> f64 {
    match client {
        Client::Burst => BURST_WEIGHT,
        Client::SteadyOne | Client::SteadyTwo => STEADY_WEIGHT,
    }
}

/// The mock's answer to every request: slow enough to watch it stream.
fn answer_rule() -> Rule {
    Rule {
        chunks: Some(DEMO_CHUNKS),
        chunk_interval_ms: Some(DEMO_CHUNK_INTERVAL_MS),
        ..Rule::default()
    }
}

fn demo_pool() -> PoolInput {
    PoolInput {
        id: DEMO_POOL.to_owned(),
        name: "Demo team on alpha".to_owned(),
        connection_ids: vec![PROVIDERS[0].1.to_owned()],
        dimensions: vec![DimensionInput {
            unit: "requests".to_owned(),
            window: "hourly".to_owned(),
            limit: f64::from(DEMO_POOL_LIMIT),
        }],
        allocations: [allocation("demo", DEMO_KEY_WEIGHT)]
            .into_iter()
            .chain(
                Client::ALL
                    .iter()
                    .map(|c| allocation(c.key_id(), weight_of(*c))),
            )
            .collect(),
    }
}

pub async fn run(a: DemoArgs) -> anyhow::Result<()> {
    init_tracing(if a.log_json {
        LogFormat::Json
    } else {
        LogFormat::Text
    });
    let mock = MockServer::start_local().await?;
    mock.state.add_rule(answer_rule());
    let env: BTreeMap<String, String> = BTreeMap::from([(
        "SWITCHYARD_DATA_DIR".to_owned(),
        a.data_dir.display().to_string(),
    )]);
    let cfg = config::resolve(FileConfig::default(), &env)?;
    let store = bootstrap::open_store(&cfg)?;
    let now = SystemClock.now_ms();
    let openai_models = ["mock-small", "mock-large"];
    let claude_models = ["claude-opus", "claude-haiku"];
    let codex_models = ["gpt-5-codex", "gpt-5-codex-mini"];
    let providers = PROVIDERS
        .iter()
        .map(|p| (*p, UpstreamFormat::Openai, &openai_models))
        .chain([
            (CLAUDE, UpstreamFormat::Anthropic, &claude_models),
            (CODEX, UpstreamFormat::Responses, &codex_models),
        ]);
    for ((provider, connection, credential), format, models) in providers {
        let limits = match format {
            UpstreamFormat::Openai => models
                .iter()
                .map(|m| ((*m).to_owned(), DEMO_OUTPUT_LIMIT))
                .collect(),
            UpstreamFormat::Anthropic | UpstreamFormat::Responses => BTreeMap::new(),
        };
        store.save_provider(
            &ProviderRecord {
                id: provider.to_owned(),
                format,
                base_url: mock.base_url(),
                models: models.iter().map(|m| (*m).to_owned()).collect(),
                prices: Default::default(),
                max_output_tokens: limits,
                context_windows: Default::default(),
                stream_timeouts: Default::default(),
                max_concurrent: None,
            },
            SaveMode::Upsert,
            now,
        )?;
        store.save_connection(
            &ConnectionRecord {
                id: connection.to_owned(),
                provider: provider.to_owned(),
                auth_class: AuthClass::Apikey,
                format: None,
                base_url: None,
                enabled: true,
                max_concurrent: None,
                rate_limit_overrides: None,
                provider_specific_data: None,
                // Alpha's failures must reach its breaker (the simulation's failure
                // window), not cool the connection down first.
                disable_cooling: provider == PROVIDERS[0].0,
                has_credential: true,
            },
            Some(&SecretString::from(credential)),
            SaveMode::Upsert,
            now,
        )?;
    }
    store.save_combo(
        &ComboRecord {
            name: "demo".to_owned(),
            strategy: "priority".to_owned(),
            targets: PROVIDERS
                .iter()
                .map(|(p, _, _)| TargetRecord {
                    model: format!("{p}/mock-small"),
                    connection: None,
                    weight: 1,
                    cost: None,
                })
                .collect(),
        },
        SaveMode::Upsert,
        now,
    )?;
    store.save_combo(
        &ComboRecord {
            name: "demo-claude".to_owned(),
            strategy: "priority".to_owned(),
            targets: ["claude/claude-opus", "alpha/mock-small"]
                .iter()
                .map(|model| TargetRecord {
                    model: (*model).to_owned(),
                    connection: None,
                    weight: 1,
                    cost: None,
                })
                .collect(),
        },
        SaveMode::Upsert,
        now,
    )?;
    let aliases: Vec<AliasRecord> = DEMO_ALIASES
        .iter()
        .map(|(pattern, target)| AliasRecord {
            pattern: (*pattern).to_owned(),
            target: (*target).to_owned(),
            keys: Vec::new(),
        })
        .collect();
    store.replace_aliases(&aliases, now)?;
    let (key, secret) = new_key(
        NewKey {
            id: Some("demo".to_owned()),
            name: "demo".to_owned(),
            ..NewKey::default()
        },
        now,
    )
    .map_err(anyhow::Error::msg)?;
    let secret = secret.expose_secret();
    store.save_key(&key, SaveMode::Upsert)?;
    let mut secrets = Vec::new();
    for client in Client::ALL {
        let (record, sim_secret) = new_key(
            NewKey {
                id: Some(client.key_id().to_owned()),
                name: format!("{} (simulated)", client.key_id()),
                ..NewKey::default()
            },
            now,
        )
        .map_err(anyhow::Error::msg)?;
        store.save_key(&record, SaveMode::Upsert)?;
        secrets.push((client, sim_secret.expose_secret().to_owned()));
    }
    // Every demo starts with an empty pool: deleting it drops its counted use.
    if store.get_pool(DEMO_POOL).is_ok() {
        store.delete_pool(DEMO_POOL)?;
    }
    store.save_pool(&demo_pool(), SaveMode::Upsert, now)?;
    // The simulation runs with a quicker API-key breaker; without it the demo keeps
    // (or goes back to) the defaults.
    let stored: Vec<String> = store.list_settings()?.into_iter().map(|s| s.key).collect();
    for (key, value) in traffic::BREAKER_SETTINGS {
        if !a.no_traffic {
            store.put_setting(key, &serde_json::json!(value), now)?;
        } else if stored.iter().any(|k| k == key) {
            store.delete_setting(key)?;
        }
    }
    drop(store);

    let listener = TcpListener::bind(a.listen).await.with_context(|| {
        format!(
            "cannot listen on {} (pass --listen to pick another)",
            a.listen
        )
    })?;
    let prepared = bootstrap::prepare(&cfg, Arc::new(SystemClock)).await?;
    let addr = listener.local_addr()?;
    say(&format!("Switchyard demo listening on http://{addr}"));
    say(&format!(
        "Mock provider on {} serves the simulated providers `alpha` and `beta`;",
        mock.base_url()
    ));
    say("the combo `demo` tries alpha/mock-small first, then beta/mock-small.");
    say("The Anthropic-format provider `claude` (claude/claude-opus) and the Responses-format provider `codex` (codex/gpt-5-codex) are on the same mock; the combo `demo-claude` fails over from claude to alpha/mock-small, translating the request.");
    say(&format!("Demo API key: {secret}"));
    say(&admin_note(&prepared.admin));
    let dashboard = switchyard_dashboard::dashboard(Arc::clone(&prepared.state));
    say(&format!(
        "Dashboard: http://{addr}{} (a one-time sign-in link, valid for 10 minutes; afterwards sign in at http://{addr}/dashboard with the admin token)",
        dashboard.links.mint().await?
    ));
    say("");
    say("Stream an answer:");
    say(&format!(
        "  curl -N http://{addr}/v1/chat/completions -H 'Authorization: Bearer {secret}' -H 'Content-Type: application/json' -d '{{\"model\":\"demo\",\"stream\":true,\"messages\":[{{\"role\":\"user\",\"content\":\"Hello\"}}]}}'"
    ));
    say("Model aliases send other names where the gateway decides: *haiku* to claude/claude-haiku, claude-* to the combo demo-claude, gpt-* to codex/gpt-5-codex (GET /api/aliases). So Claude Code needs only the base URL and the key, its small fast model included:");
    say(&format!(
        "  ANTHROPIC_BASE_URL=http://{addr} ANTHROPIC_API_KEY={secret} claude -p 'Hello'"
    ));
    say("and Codex CLI only a provider block: in $CODEX_HOME/config.toml set model_provider = \"switchyard\" and");
    say(&format!(
        "  [model_providers.switchyard] base_url = \"http://{addr}/v1\", env_key = \"SWITCHYARD_API_KEY\", wire_api = \"responses\"; then SWITCHYARD_API_KEY={secret} codex exec 'Hello'"
    ));
    say(&format!(
        "Quota pool `{DEMO_POOL}` shares alpha's account: the demo key's fair share is {DEMO_KEY_WEIGHT}% of {DEMO_POOL_LIMIT} requests an hour. See the x-ratelimit-* headers with curl -i, and the pool with:"
    ));
    say(&format!(
        "  curl http://{addr}/api/quota/pools/{DEMO_POOL}/usage -H 'Authorization: Bearer <admin token>'"
    ));
    let simulation = if a.no_traffic {
        say("No simulated traffic (--no-traffic).");
        None
    } else {
        say(&format!(
            "Simulated traffic: `{}` bursts to alpha/mock-small and is soon refused by the strict pool (429), `{}` and `{}` use the combo `demo`; alpha fails for {} s every {} minutes, so its breaker opens (the demo's API-key breaker opens at 5 failures and probes after 10 s) and the combo fails over to beta (pass --no-traffic to turn this off).",
            Client::Burst.key_id(),
            Client::SteadyOne.key_id(),
            Client::SteadyTwo.key_id(),
            traffic::FAIL_MS / 1000,
            traffic::CYCLE_MS / 60_000,
        ));
        Some(traffic::spawn(traffic::Target {
            gateway: format!("http://{addr}"),
            mock: mock.base_url(),
            alpha_credential: PROVIDERS[0].2.to_owned(),
            answer: answer_rule(),
            secrets,
        }))
    };
    say("Press Ctrl-C to stop.");
    let served = run_with_dashboard(listener, prepared, dashboard).await;
    if let Some(task) = simulation {
        task.abort();
    }
    mock.stop();
    served
}
