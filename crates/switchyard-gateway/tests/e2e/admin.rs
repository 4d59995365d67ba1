//! Management API: auth, CRUD, validation, secrecy, OpenAPI.

use reqwest::Method;
use serde_json::{json, Value};
use switchyard_test_support::*;

#[tokio::test]
async fn management_api_requires_the_admin_token_or_an_admin_scoped_key() {
    let h = Harness::start().await;
    let none = h.http.get(h.url("/api/keys")).send().await.unwrap();
    assert_eq!(none.status(), 401);
    assert_eq!(
        none.json::<Value>().await.unwrap()["error"]["code"],
        "admin_required"
    );
    let client = h
        .http
        .get(h.url("/api/keys"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    // A valid key without the scope is known but not permitted: 403, not 401.
    assert_eq!(client.status(), 403);
    let body: Value = client.json().await.unwrap();
    assert_eq!(body["error"]["code"], "admin_required");
    assert_eq!(body["error"]["type"], "permission_error");
    let unknown = h
        .http
        .get(h.url("/api/keys"))
        .bearer_auth("sy-not-a-key-000000000000000")
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 401);
    let ops = h
        .http
        .get(h.url("/api/keys"))
        .bearer_auth(OPS_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(ops.status(), 200);
    assert_eq!(h.admin_get("/api/keys").await.status(), 200);
    // Public endpoints need no credential.
    assert_eq!(
        h.http
            .get(h.url("/api/monitoring/health"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        h.http
            .get(h.url("/api/openapi.json"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}

#[tokio::test]
async fn keys_are_created_shown_once_usable_at_once_and_revocable() {
    let h = Harness::start().await;
    let r = h
        .admin_send(
            Method::POST,
            "/api/keys",
            json!({"name": "agent-7", "allowed_models": ["fast"]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let created: Value = r.json().await.unwrap();
    let secret = created["secret"].as_str().unwrap().to_owned();
    let id = created["key"]["id"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("sy-"));
    assert_eq!(created["key"]["prefix"], &secret[..8]);
    assert_eq!(created["key"]["name"], "agent-7");

    let use_key = |model: &'static str| {
        h.http
            .post(h.url("/v1/chat/completions"))
            .bearer_auth(&secret)
            .json(&chat_body(model, false))
            .send()
    };
    assert_eq!(use_key("fast").await.unwrap().status(), 200);
    assert_eq!(use_key("alpha/mock-small").await.unwrap().status(), 403);

    let listed = h.admin_get("/api/keys").await.text().await.unwrap();
    assert!(!listed.contains(&secret));
    assert!(!listed.contains("key_hash"));

    let r = h
        .admin_send(Method::POST, &format!("/api/keys/{id}/revoke"), json!({}))
        .await;
    assert_eq!(r.status(), 200);
    assert!(r.json::<Value>().await.unwrap()["revoked_at"].is_u64());
    assert_eq!(use_key("fast").await.unwrap().status(), 401);
    // Editing a revoked key never revives it.
    let r = h
        .admin_send(
            Method::PATCH,
            &format!("/api/keys/{id}"),
            json!({"name": "renamed"}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert!(r.json::<Value>().await.unwrap()["revoked_at"].is_u64());
    assert_eq!(use_key("fast").await.unwrap().status(), 401);

    let r = h
        .admin_send(Method::DELETE, &format!("/api/keys/{id}"), json!({}))
        .await;
    assert_eq!(r.status(), 204);
    assert_eq!(h.admin_get(&format!("/api/keys/{id}")).await.status(), 404);
}

#[tokio::test]
async fn providers_connections_and_combos_round_trip_through_the_api() {
    let h = Harness::start().await;
    let mock = h.mock.base_url();
    let r = h
        .admin_send(
            Method::POST,
            "/api/providers",
            json!({"id": "gamma", "format": "openai", "base_url": mock}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let r = h
        .admin_send(
            Method::POST,
            "/api/connections",
            json!({"id": "gamma-1", "provider": "gamma", "auth_class": "oauth", "credential": "cred-gamma", "max_concurrent": 2}),
        )
        .await;
    assert_eq!(r.status(), 201);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"id": "gamma-1", "provider": "gamma", "auth_class": "oauth", "format": null,
               "base_url": null, "enabled": true, "max_concurrent": 2, "rate_limit_overrides": null,
               "provider_specific_data": null, "disable_cooling": false, "has_credential": true})
    );
    let r = h
        .admin_send(
            Method::POST,
            "/api/combos",
            json!({"name": "g", "strategy": "priority", "targets": [{"model": "gamma/any"}, {"model": "beta/mock-small", "connection": "beta-1"}]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    assert_eq!(h.chat(chat_body("g", false)).await.status(), 200);
    assert_eq!(h.mock_stats().await["by_credential"]["cred-gamma"], 1);

    // Update without a credential keeps the stored one.
    let r = h
        .admin_send(
            Method::PUT,
            "/api/connections/gamma-1",
            json!({"id": "gamma-1", "provider": "gamma", "auth_class": "oauth", "max_concurrent": 3}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(h.chat(chat_body("gamma/any", false)).await.status(), 200);
    assert_eq!(h.mock_stats().await["by_credential"]["cred-gamma"], 2);

    // In-use objects cannot be deleted; once free they can.
    let r = h
        .admin_send(Method::DELETE, "/api/providers/gamma", json!({}))
        .await;
    assert_eq!(r.status(), 409);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["message"],
        "provider `gamma` is still used by connections gamma-1"
    );
    assert_eq!(
        h.admin_send(Method::DELETE, "/api/combos/g", json!({}))
            .await
            .status(),
        204
    );
    assert_eq!(
        h.admin_send(Method::DELETE, "/api/connections/gamma-1", json!({}))
            .await
            .status(),
        204
    );
    assert_eq!(
        h.admin_send(Method::DELETE, "/api/providers/gamma", json!({}))
            .await
            .status(),
        204
    );
    assert_eq!(h.chat(chat_body("gamma/any", false)).await.status(), 404);
}

#[tokio::test]
async fn invalid_changes_are_rejected_naming_the_problem_and_change_nothing() {
    let h = Harness::start().await;
    let before_combos = h.admin_get("/api/combos").await.text().await.unwrap();
    let before_settings = h.admin_get("/api/settings").await.text().await.unwrap();
    let cases = [
        (
            "/api/combos",
            json!({"name": "bad", "strategy": "priority", "targets": [{"model": "nope/x"}]}),
            400,
            "combo `bad` target `nope/x` names unknown provider `nope`",
        ),
        (
            "/api/combos",
            json!({"name": "bad", "strategy": "priority", "targets": [{"model": "no-slash"}]}),
            400,
            "combo `bad` target `no-slash`: model `no-slash` must have the form provider/model",
        ),
        (
            "/api/combos",
            json!({"name": "bad", "strategy": "priority", "targets": []}),
            400,
            "combo `bad` has no targets",
        ),
        (
            "/api/connections",
            json!({"id": "c", "provider": "nope", "auth_class": "apikey"}),
            400,
            "provider: unknown provider `nope`",
        ),
        (
            "/api/connections",
            json!({"id": "c", "provider": "alpha", "auth_class": "apikey", "credential": "bad\nvalue"}),
            400,
            "connection `c` has a credential that is not a valid HTTP header value",
        ),
        (
            "/api/connections",
            json!({"id": "c", "provider": "alpha", "auth_class": "apikey", "credential_env": "HOME"}),
            400,
            "credential_env: accepted only in the config file; send `credential`",
        ),
        (
            "/api/providers",
            json!({"id": "claude", "format": "anthropic", "base_url": "http://x", "max_output_tokens": {"opus": 0}}),
            400,
            "provider `claude` max_output_tokens of `opus`: must be a whole number from 1 to 1048576",
        ),
        (
            "/api/connections",
            json!({"id": "c", "provider": "alpha", "auth_class": "apikey", "max_concurrent": 0}),
            400,
            "max_concurrent: must be at least 1 (omit it for no limit)",
        ),
        (
            "/api/providers",
            json!({"id": "bad id", "format": "openai", "base_url": "http://x"}),
            400,
            "provider id `bad id` is invalid: use 1-64 letters, digits, '-', '_' or '.'",
        ),
        (
            "/api/providers",
            json!({"id": "p2", "format": "openai", "base_url": "ftp://x"}),
            400,
            "base URL `ftp://x` of provider `p2` must start with http:// or https://",
        ),
        (
            "/api/providers",
            json!({"id": "p3", "format": "openai", "base_url": "http://x\r\nX-Injected: 1"}),
            400,
            "base URL `http://x\\r\\nX-Injected: 1` of provider `p3` must not contain spaces, control characters or non-ASCII characters (percent-encode them)",
        ),
        (
            "/api/connections",
            json!({"id": "c", "provider": "alpha", "auth_class": "apikey", "base_url": "https://u:p@x"}),
            400,
            "base URL `https://u:p@x` of connection `c` must not carry a user name or password: put the credential on the connection",
        ),
        (
            "/api/providers",
            json!({"id": "alpha", "format": "openai", "base_url": "http://x"}),
            409,
            "provider `alpha` already exists",
        ),
        (
            "/api/keys",
            json!({"name": "x", "allowed_connections": ["ghost"]}),
            400,
            "allowed_connections: unknown connection `ghost`",
        ),
        (
            "/api/keys",
            json!({"name": "x", "scopes": ["root"]}),
            400,
            "scopes: unknown scope `root` (known: admin, lease:exclusive)",
        ),
    ];
    let before = h.with_store(|s| s.config_version().unwrap()).await;
    for (path, body, status, message) in cases {
        let r = h.admin_send(Method::POST, path, body.clone()).await;
        assert_eq!(r.status(), status, "{path} {body}");
        assert_eq!(
            r.json::<Value>().await.unwrap()["error"]["message"],
            message,
            "{path} {body}"
        );
    }
    // Nothing refused was stored.
    assert_eq!(h.with_store(|s| s.config_version().unwrap()).await, before);
    assert_eq!(h.admin_get("/api/providers/p3").await.status(), 404);
    let r = h
        .admin_send(
            Method::PUT,
            "/api/settings/upstream.connect_timeout_ms",
            json!({"value": 5}),
        )
        .await;
    assert_eq!(r.status(), 400);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["message"],
        "setting `upstream.connect_timeout_ms` (from database) must be an integer between 100 and 300000, got 5"
    );
    let r = h
        .admin_send(Method::PUT, "/api/settings/no.such", json!({"value": 5}))
        .await;
    assert_eq!(r.status(), 400);
    let r = h
        .http
        .post(h.url("/api/providers"))
        .bearer_auth(ADMIN)
        .header("content-type", "application/json")
        .body("{broken")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(
        h.admin_get("/api/combos").await.text().await.unwrap(),
        before_combos
    );
    assert_eq!(
        h.admin_get("/api/settings").await.text().await.unwrap(),
        before_settings
    );
    assert_eq!(
        h.admin_get("/api/keys")
            .await
            .json::<Value>()
            .await
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        h.admin_get("/api/providers")
            .await
            .json::<Value>()
            .await
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test]
async fn settings_show_value_and_source_and_take_effect_at_once() {
    let h = Harness::start_with(
        Config::standard,
        &[("SWITCHYARD_UPSTREAM_CONNECT_TIMEOUT_MS", "2000")],
    )
    .await;
    let list: Value = h.admin_json("/api/settings").await;
    let find = |list: &Value, key: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|s| s["key"] == key)
            .unwrap()
            .clone()
    };
    let s = find(&list, "upstream.connect_timeout_ms");
    assert_eq!(
        (s["value"].as_u64(), s["source"].as_str()),
        (Some(2000), Some("env"))
    );
    let r = h
        .admin_send(
            Method::PUT,
            "/api/settings/upstream.first_byte_timeout_ms",
            json!({"value": 250}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let s = find(&r.json().await.unwrap(), "upstream.first_byte_timeout_ms");
    assert_eq!(
        (s["value"].as_u64(), s["source"].as_str()),
        (Some(250), Some("database"))
    );
    h.rule(json!({"times": 1, "match": {"credential": CRED_ALPHA}, "latency_ms": 2000}))
        .await;
    let r = h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(r.status(), 504);
    let r = h
        .admin_send(
            Method::DELETE,
            "/api/settings/upstream.first_byte_timeout_ms",
            json!({}),
        )
        .await;
    assert_eq!(r.status(), 204);
    let list: Value = h.admin_json("/api/settings").await;
    let s = find(&list, "upstream.first_byte_timeout_ms");
    assert_eq!(
        (s["value"].as_u64(), s["source"].as_str()),
        (Some(600_000), Some("default"))
    );
}

#[tokio::test]
async fn settings_say_whether_a_change_applies_live_to_new_connections_or_after_a_restart() {
    let h = Harness::start().await;
    let applies = |list: &Value, key: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|s| s["key"] == key)
            .unwrap()["applies"]
            .clone()
    };
    let list: Value = h.admin_json("/api/settings").await;
    assert_eq!(applies(&list, "upstream.first_byte_timeout_ms"), "live");
    assert_eq!(
        applies(&list, "server.header_read_timeout_ms"),
        "new_connections"
    );
    assert_eq!(applies(&list, "server.max_connections"), "restart");
    // A restart-only setting is stored and answered as such, with 200.
    let r = h
        .admin_send(
            Method::PUT,
            "/api/settings/server.max_connections",
            json!({"value": 5}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let list: Value = r.json().await.unwrap();
    let s = list
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == "server.max_connections")
        .unwrap();
    assert_eq!(
        (&s["value"], &s["source"], &s["applies"]),
        (&json!(5), &json!("database"), &json!("restart"))
    );
}

#[tokio::test]
async fn credentials_never_appear_in_any_management_response() {
    let h = Harness::start().await;
    let secret_cred = "sk-very-secret-credential-987654321";
    let r = h
        .admin_send(
            Method::POST,
            "/api/connections",
            json!({"id": "s-1", "provider": "alpha", "auth_class": "apikey", "credential": secret_cred}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let created = r.text().await.unwrap();
    let r = h
        .admin_send(Method::POST, "/api/keys", json!({"name": "n"}))
        .await;
    let key_secret = r.json::<Value>().await.unwrap()["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        h.chat(chat_body("alpha/mock-small", false)).await.status(),
        200
    );
    let mut bodies = vec![created];
    for path in [
        "/api/connections",
        "/api/connections/s-1",
        "/api/connections/alpha-1",
        "/api/providers",
        "/api/combos",
        "/api/keys",
        "/api/keys/k1",
        "/api/settings",
        "/api/logs",
        "/api/monitoring/health",
        "/api/openapi.json",
        "/metrics",
    ] {
        let r = h.admin_get(path).await;
        assert_eq!(r.status(), 200, "{path}");
        bodies.push(r.text().await.unwrap());
    }
    for body in &bodies {
        for secret in [
            secret_cred,
            CRED_ALPHA,
            CRED_BETA,
            KEY,
            OPS_KEY,
            ADMIN,
            key_secret.as_str(),
        ] {
            assert!(
                !body.contains(secret),
                "a response leaked `{secret}`: {body}"
            );
        }
    }
}

#[tokio::test]
async fn openapi_document_matches_the_routes() {
    let h = Harness::start().await;
    let doc: Value = h
        .http
        .get(h.url("/api/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let paths = doc["paths"].as_object().unwrap();
    let mut documented = Vec::new();
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys() {
            documented.push(format!("{} {path}", method.to_uppercase()));
        }
    }
    documented.sort();
    let expected = [
        "DELETE /api/combos/{name}",
        "DELETE /api/connections/{id}",
        "DELETE /api/keys/{id}",
        "DELETE /api/leases/{owner}",
        "DELETE /api/providers/{id}",
        "DELETE /api/quota/plans/{connectionId}",
        "DELETE /api/quota/pools/{id}",
        "DELETE /api/resilience/model-cooldowns",
        "DELETE /api/sessions/{session}",
        "DELETE /api/settings/{key}",
        "GET /api/aliases",
        "GET /api/combos",
        "GET /api/combos/{name}",
        "GET /api/connections",
        "GET /api/connections/{id}",
        "GET /api/keys",
        "GET /api/keys/{id}",
        "GET /api/leases",
        "GET /api/logs",
        "GET /api/logs/stats",
        "GET /api/monitoring/health",
        "GET /api/oauth",
        "GET /api/openapi.json",
        "GET /api/providers",
        "GET /api/providers/{id}",
        "GET /api/quota/export",
        "GET /api/quota/plans/{connectionId}",
        "GET /api/quota/pools",
        "GET /api/quota/pools/{id}",
        "GET /api/quota/pools/{id}/decisions",
        "GET /api/quota/pools/{id}/usage",
        "GET /api/resilience",
        "GET /api/resilience/cooldowns",
        "GET /api/resilience/egress",
        "GET /api/resilience/error-rules",
        "GET /api/resilience/model-cooldowns",
        "GET /api/routing/last-good",
        "GET /api/sessions",
        "GET /api/settings",
        "GET /metrics",
        "GET /v1/models",
        "GET /v1/models/{id}",
        "PATCH /api/keys/{id}",
        "PATCH /api/resilience",
        "POST /api/combos",
        "POST /api/connections",
        "POST /api/keys",
        "POST /api/keys/{id}/revoke",
        "POST /api/oauth/import",
        "POST /api/oauth/{id}/refresh",
        "POST /api/providers",
        "POST /api/quota/import",
        "POST /api/quota/pools",
        "POST /api/resilience/cooldowns",
        "POST /api/resilience/reset",
        "POST /api/v1/session-leases",
        "POST /v1/chat/completions",
        "POST /v1/messages",
        "POST /v1/messages/count_tokens",
        "POST /v1/responses",
        "PUT /api/aliases",
        "PUT /api/combos/{name}",
        "PUT /api/connections/{id}",
        "PUT /api/providers/{id}",
        "PUT /api/quota/plans/{connectionId}",
        "PUT /api/quota/pools/{id}",
        "PUT /api/settings/{key}",
    ];
    assert_eq!(documented, expected);
    // Every documented operation is served: the router answers neither 405 nor an
    // empty-bodied 404 (a handler's 404 carries a JSON error).
    for entry in &documented {
        let (method, path) = entry.split_once(' ').unwrap();
        let concrete = path
            .replace("{id}", "zz-missing")
            .replace("{name}", "zz-missing")
            .replace("{connectionId}", "zz-missing")
            .replace("{key}", "zz.missing");
        let r = h
            .http
            .request(
                Method::from_bytes(method.as_bytes()).unwrap(),
                h.url(&concrete),
            )
            .bearer_auth(ADMIN)
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let body = r.text().await.unwrap();
        assert_ne!(status, 405, "{entry}");
        assert!(!(status == 404 && body.is_empty()), "{entry} is not routed");
    }
}

/// The operation `method path` of the OpenAPI document.
fn operation<'a>(doc: &'a Value, method: &str, path: &str) -> &'a Value {
    let op = &doc["paths"][path][method];
    assert!(op.is_object(), "{method} {path} is not documented");
    op
}

/// `(name, in, required, format)` of each parameter of an operation, in order.
fn parameters(op: &Value) -> Vec<(&str, &str, bool, Option<&str>)> {
    op["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap(),
                p["in"].as_str().unwrap(),
                p["required"].as_bool().unwrap(),
                p["schema"]["format"].as_str(),
            )
        })
        .collect()
}

#[tokio::test]
async fn openapi_documents_query_parameters_in_the_query_as_optional_with_unsigned_formats() {
    let h = Harness::start().await;
    let doc = h.admin_json("/api/openapi.json").await;
    assert_eq!(
        parameters(operation(&doc, "get", "/api/logs")),
        [
            ("limit", "query", false, Some("uint32")),
            ("key_id", "query", false, None),
            ("provider", "query", false, None),
            ("model", "query", false, None),
            ("status", "query", false, None),
            ("since", "query", false, Some("uint64")),
            ("until", "query", false, Some("uint64")),
            ("before", "query", false, Some("int64")),
        ]
    );
    assert_eq!(
        parameters(operation(&doc, "get", "/api/resilience/cooldowns")),
        [("provider", "query", false, None)]
    );
    assert_eq!(
        parameters(operation(&doc, "get", "/api/quota/pools/{id}/decisions")),
        [
            ("id", "path", true, None),
            ("apiKeyId", "query", false, None)
        ]
    );
    // As documented: the whole unsigned range, beyond the signed one.
    let r = h
        .admin_get("/api/logs?until=18446744073709551615&limit=4294967295")
        .await;
    assert_eq!(status_and_json(r).await, (200, json!([])));
}

#[tokio::test]
async fn openapi_documents_the_error_body_and_the_admin_refusals_of_every_management_operation() {
    let h = Harness::start().await;
    let doc = h.admin_json("/api/openapi.json").await;
    assert_eq!(
        doc["components"]["schemas"]["ErrorDetail"],
        json!({
            "type": "object",
            "description": "The `error` member of [`ErrorBody`]. Facts of some errors (diagnostics, quota,\nretry hints) sit beside these four members.",
            "required": ["message", "type", "code", "param"],
            "properties": {
                "message": {"type": "string", "description": "What went wrong, in words."},
                "type": {"type": "string", "description": "The OpenAI error type: `invalid_request_error`, `permission_error`,\n`rate_limit_error`, `server_error`, ..."},
                "code": {"type": "string", "description": "The typed code: `admin_required`, `not_found`, `invalid_json`, ..."},
                "param": {"type": ["string", "null"], "description": "The member of the request at fault, when one is."},
            }
        })
    );
    let error_body =
        json!({"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}});
    let mut refused = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let responses = op["responses"].as_object().unwrap();
            if path.starts_with("/api/") && op.get("security").is_some() {
                refused += 1;
                for status in ["401", "403"] {
                    assert!(responses.contains_key(status), "{method} {path} {status}");
                }
            }
            if !path.starts_with("/api/") && path != "/metrics" {
                continue;
            }
            for (status, response) in responses {
                if status.starts_with(['4', '5']) && path != "/api/monitoring/health" {
                    assert_eq!(response["content"], error_body, "{method} {path} {status}");
                }
            }
        }
    }
    // Every operation under `/api` but the public health and document.
    assert_eq!(refused, 58);
    // What is sent is that shape.
    let r = h.http.get(h.url("/api/keys")).send().await.unwrap();
    assert_eq!(
        status_and_json(r).await,
        (
            401,
            json!({"error": {
                "message": "management API requires the admin token or a key with the `admin` scope",
                "type": "invalid_request_error",
                "code": "admin_required",
                "param": null,
            }})
        )
    );
}

#[tokio::test]
async fn openapi_documents_the_health_status_alone_as_answered_without_a_credential() {
    let h = Harness::start().await;
    let doc = h.admin_json("/api/openapi.json").await;
    let op = operation(&doc, "get", "/api/monitoring/health");
    let answer =
        json!({"application/json": {"schema": {"$ref": "#/components/schemas/HealthAnswer"}}});
    assert_eq!(op["responses"]["200"]["content"], answer);
    assert_eq!(op["responses"]["503"]["content"], answer);
    assert_eq!(
        doc["components"]["schemas"]["HealthAnswer"],
        json!({
            "oneOf": [
                {"$ref": "#/components/schemas/Health"},
                {"$ref": "#/components/schemas/Status"},
            ],
            "description": "What `GET /api/monitoring/health` answers: the whole summary for the admin\ncredential, the status alone for anyone else.",
        })
    );
    assert_eq!(
        doc["components"]["schemas"]["Status"]["additionalProperties"],
        false
    );
    let r = h
        .http
        .get(h.url("/api/monitoring/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(status_and_json(r).await, (200, json!({"status": "ok"})));
}

#[tokio::test]
async fn openapi_documents_setting_values_as_scalars_and_metrics_as_openmetrics() {
    let h = Harness::start().await;
    let doc = h.admin_json("/api/openapi.json").await;
    let view = &doc["components"]["schemas"]["SettingView"]["properties"];
    let scalar = json!(["boolean", "number", "string"]);
    assert_eq!(view["value"]["type"], scalar);
    assert_eq!(view["default"]["type"], scalar);
    let settings = h.admin_json("/api/settings").await;
    let degrade_at = settings
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == "breaker.apiKey.degradeAt")
        .unwrap();
    assert_eq!(
        (&degrade_at["value"], &degrade_at["default"]),
        (&json!(7), &json!(7))
    );

    let metrics = operation(&doc, "get", "/metrics");
    let documented: Vec<&String> = metrics["responses"]["200"]["content"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(documented, ["application/openmetrics-text"]);
    let r = h.http.get(h.url("/metrics")).send().await.unwrap();
    assert_eq!(
        r.headers()["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
}

#[tokio::test]
async fn a_json_array_is_not_taken_for_an_object_body() {
    let h = Harness::start().await;
    let before = h.admin_json("/api/keys/k1").await;
    let r = h
        .admin_send(Method::PATCH, "/api/keys/k1", json!([null, null]))
        .await;
    assert_eq!(
        status_and_json(r).await,
        (
            400,
            json!({"error": {
                "message": "Failed to deserialize the JSON body into the target type: invalid type: sequence, expected a JSON object at line 1 column 0",
                "type": "invalid_request_error",
                "code": "invalid_json",
                "param": null,
            }})
        )
    );
    assert_eq!(h.admin_json("/api/keys/k1").await, before);
    // A list body is still a list.
    let r = h
        .admin_send(Method::POST, "/api/quota/import", json!({}))
        .await;
    assert_eq!(r.status(), 400);
}

/// `GET /api/logs` as `(status, body, x-next-before)`.
async fn logs_page(h: &Harness, query: &str) -> (u16, Value, Option<String>) {
    let r = h.admin_get(&format!("/api/logs?{query}")).await;
    let next = r
        .headers()
        .get("x-next-before")
        .map(|v| v.to_str().unwrap().to_owned());
    (r.status().as_u16(), r.json().await.unwrap(), next)
}

/// The request ids of a `/api/logs` body, in its order.
fn request_ids(rows: &Value) -> Vec<String> {
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| r["request_id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn logs_search_narrows_by_each_filter_pages_by_the_header_cursor_and_rejects_bad_filters() {
    use switchyard_gateway::clock::{Clock, ManualClock, SystemClock};
    let t0 = SystemClock.now_ms();
    let clock = std::sync::Arc::new(ManualClock::new(t0));
    let h = Harness::start_with_clock(Config::standard, &[], clock.clone()).await;
    h.rule(json!({"match": {"model": "mock-large"}, "status": 429}))
        .await;
    // One request a second: k1 `fast` (alpha, 200), k1 `beta/mock-small` (beta, 200),
    // ops `alpha/mock-large` (alpha, 429), ops `fast` (alpha, 200).
    let mut ids = Vec::new();
    for (i, (key, model, status)) in [
        (KEY, "fast", 200),
        (KEY, "beta/mock-small", 200),
        (OPS_KEY, "alpha/mock-large", 429),
        (OPS_KEY, "fast", 200),
    ]
    .into_iter()
    .enumerate()
    {
        clock.set(t0 + 1000 * i as u64);
        let r = h.chat_as(key, chat_body(model, false)).await;
        assert_eq!(r.status(), status, "{model}");
        ids.push(r.headers()["x-request-id"].to_str().unwrap().to_owned());
    }
    eventually("the four log rows", || async {
        h.admin_json("/api/logs").await.as_array().map(Vec::len) == Some(4)
    })
    .await;
    let want = |rows: &[usize]| -> Vec<String> { rows.iter().map(|i| ids[*i].clone()).collect() };

    // Unfiltered: every row, newest first, as a bare array; no older page.
    let (status, all, next) = logs_page(&h, "").await;
    assert_eq!((status, next), (200, None));
    assert_eq!(request_ids(&all), want(&[3, 2, 1, 0]));
    assert_eq!(all[1]["status"], 429);
    assert_eq!(all[1]["key_id"], "ops");
    assert_eq!(all[1]["provider"], "alpha");
    assert_eq!(all[1]["ts"], t0 + 2000);

    let (since, until) = (t0 + 1000, t0 + 2000);
    for (query, expected) in [
        ("key_id=ops".to_owned(), vec![3, 2]),
        ("key_id=k1".to_owned(), vec![1, 0]),
        ("provider=beta".to_owned(), vec![1]),
        ("provider=alpha".to_owned(), vec![3, 2, 0]),
        ("model=mock-large".to_owned(), vec![2]),
        ("model=fast".to_owned(), vec![3, 0]),
        ("status=429".to_owned(), vec![2]),
        ("status=4xx".to_owned(), vec![2]),
        ("status=errors".to_owned(), vec![2]),
        ("status=200".to_owned(), vec![3, 1, 0]),
        ("status=5xx".to_owned(), vec![]),
        (format!("since={since}"), vec![3, 2, 1]),
        (format!("until={until}"), vec![2, 1, 0]),
        (format!("since={since}&until={until}"), vec![2, 1]),
        (format!("since={until}&until={until}"), vec![2]),
        ("key_id=ops&status=200".to_owned(), vec![3]),
        ("model=no-such-model".to_owned(), vec![]),
        ("limit=2".to_owned(), vec![3, 2]),
    ] {
        let (status, rows, _) = logs_page(&h, &query).await;
        assert_eq!(status, 200, "{query}");
        assert_eq!(request_ids(&rows), want(&expected), "{query}");
    }

    // Paging: each page's header is the cursor of exactly the older rows.
    let (_, first, cursor) = logs_page(&h, "limit=2").await;
    assert_eq!(request_ids(&first), want(&[3, 2]));
    let cursor = cursor.expect("a first page of two has an older page");
    let (status, second, next) = logs_page(&h, &format!("limit=2&before={cursor}")).await;
    assert_eq!((status, next), (200, None));
    assert_eq!(request_ids(&second), want(&[1, 0]));
    // Filters hold across pages.
    let mut walked = Vec::new();
    let mut query = "provider=alpha&limit=1".to_owned();
    loop {
        let (status, rows, next) = logs_page(&h, &query).await;
        assert_eq!(status, 200, "{query}");
        walked.extend(request_ids(&rows));
        match next {
            Some(before) => query = format!("provider=alpha&limit=1&before={before}"),
            None => break,
        }
    }
    assert_eq!(walked, want(&[3, 2, 0]));

    // Bad filters: 400 with the search's own message, naming the parameter.
    for (query, param, message) in [
        (
            "status=6xx".to_owned(),
            "status",
            "status: `6xx` is not a status (100-599), a class (1xx-5xx) or `errors`",
        ),
        (
            format!("since={until}&until={since}"),
            "since",
            "since: the start of the time range is after its end",
        ),
    ] {
        let (status, body, next) = logs_page(&h, &query).await;
        assert_eq!((status, next), (400, None), "{query}");
        assert_eq!(body["error"]["message"], message, "{query}");
        assert_eq!(body["error"]["param"], param, "{query}");
    }
    let (status, body, _) = logs_page(&h, "before=abc").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_query"))
    );

    // The OpenAPI document names every parameter and the cursor header.
    let doc: Value = h.admin_json("/api/openapi.json").await;
    let op = &doc["paths"]["/api/logs"]["get"];
    let params: Vec<&str> = op["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        params,
        ["limit", "key_id", "provider", "model", "status", "since", "until", "before"]
    );
    assert_eq!(
        op["responses"]["200"]["headers"]["x-next-before"]["schema"]["type"],
        "integer"
    );
    assert!(op["responses"]["400"].is_object());
}
