//! Client API round trips.

use futures_util::StreamExt;
use serde_json::{json, Value};
use switchyard_core::sse::SseParser;
use switchyard_mock::openai;
use switchyard_test_support::*;

#[tokio::test]
async fn non_streaming_round_trip_returns_the_upstream_body_unchanged() {
    let h = Harness::start().await;
    let r = h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    assert!(r.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .starts_with("req_"));
    let body: Value = r.json().await.unwrap();
    assert_eq!(body, openai::completion("mock-small", 5, PROMPT_TOKENS));
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "Hello from the Switchyard mock"
    );
}

#[tokio::test]
async fn streaming_round_trip_passes_frames_byte_for_byte_in_order() {
    let h = Harness::start().await;
    let mut body = chat_body("alpha/mock-small", true);
    body["stream_options"] = json!({"include_usage": true});
    let r = h.chat(body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let text = r.text().await.unwrap();
    assert_eq!(
        text,
        openai::full_stream("mock-small", 5, PROMPT_TOKENS, true)
    );
    let mut contents = Vec::new();
    let mut parser = SseParser::new();
    parser.feed(text.as_bytes(), |e| contents.push(e.data));
    assert_eq!(contents.len(), 9);
    assert_eq!(contents.last().unwrap(), "[DONE]");
    let words: String = contents[1..6]
        .iter()
        .map(|d| {
            let v: Value = serde_json::from_str(d).unwrap();
            v["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(words, "Hello from the Switchyard mock");
}

#[tokio::test]
async fn stream_frames_reach_the_client_while_the_upstream_is_still_sending() {
    let h = Harness::start().await;
    // The mock sends the head and two chunks, then stalls forever: a gateway that
    // buffered the stream would deliver nothing.
    h.rule(json!({"stall_after_chunks": 2})).await;
    let r = h.chat(chat_body("alpha/mock-small", true)).await;
    assert_eq!(r.status(), 200);
    let mut stream = r.bytes_stream();
    let mut received = Vec::new();
    let expected = format!(
        "{}{}{}",
        openai::stream_head("mock-small"),
        openai::stream_content("mock-small", 0),
        openai::stream_content("mock-small", 1)
    );
    while received.len() < expected.len() {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(10), stream.next())
            .await
            .expect("frames must arrive before the upstream finishes")
            .unwrap()
            .unwrap();
        received.extend_from_slice(&chunk);
    }
    assert_eq!(String::from_utf8(received).unwrap(), expected);
    assert_eq!(h.mock_stats().await["in_flight"], 1);
}

#[tokio::test]
async fn client_disconnect_cancels_the_upstream_request() {
    let h = Harness::start().await;
    h.rule(json!({"stall_after_chunks": 1})).await;
    let r = h.chat(chat_body("alpha/mock-small", true)).await;
    let mut stream = r.bytes_stream();
    stream.next().await.unwrap().unwrap();
    assert_eq!(h.mock_stats().await["in_flight"], 1);
    drop(stream);
    eventually("the mock sees the upstream request end", || async {
        h.mock_stats().await["in_flight"] == 0
    })
    .await;
    eventually("the request log records the disconnect", || async {
        let logs: Value = h.admin_json("/api/logs").await;
        logs[0]["status"] == 499 && logs[0]["error_code"] == "client_closed_request"
    })
    .await;
}

#[tokio::test]
async fn missing_unknown_and_revoked_keys_get_401_with_openai_error_bodies() {
    let h = Harness::start().await;
    let url = h.url("/v1/chat/completions");
    let body = chat_body("alpha/mock-small", false);
    let missing = h.http.post(&url).json(&body).send().await.unwrap();
    assert_eq!(missing.status(), 401);
    assert_eq!(
        missing.json::<Value>().await.unwrap(),
        json!({"error": {
            "message": "missing API key: send `Authorization: Bearer <key>`",
            "type": "invalid_request_error", "code": "invalid_api_key", "param": null}})
    );
    let unknown = h
        .http
        .post(&url)
        .bearer_auth("sy-nope")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 401);
    assert_eq!(
        unknown.json::<Value>().await.unwrap()["error"]["message"],
        "invalid API key"
    );
    let r = h
        .admin_send(reqwest::Method::POST, "/api/keys/k1/revoke", json!({}))
        .await;
    assert_eq!(r.status(), 200);
    let revoked = h.chat(body).await;
    assert_eq!(revoked.status(), 401);
    assert_eq!(
        revoked.json::<Value>().await.unwrap()["error"]["code"],
        "revoked_api_key"
    );
    assert_eq!(h.mock_stats().await["requests_total"], 0);
}

#[tokio::test]
async fn anthropic_style_x_api_key_header_is_accepted() {
    let h = Harness::start().await;
    let r = h
        .http
        .post(h.url("/v1/chat/completions"))
        .header("x-api-key", KEY)
        .json(&chat_body("alpha/mock-small", false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn bad_requests_get_typed_400_404_413_and_reach_no_upstream() {
    let h = Harness::start_with(Config::standard, &[("SWITCHYARD_MAX_BODY_BYTES", "2048")]).await;
    let send_raw = |body: Vec<u8>| {
        h.http
            .post(h.url("/v1/chat/completions"))
            .bearer_auth(KEY)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let r = send_raw(b"{not json".to_vec()).await.unwrap();
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "invalid_request");
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("request body is not valid JSON"));

    let r = send_raw(br#"{"model":"alpha/mock-small"}"#.to_vec())
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["message"],
        "`messages` is required and must be a non-empty array"
    );

    let r = h.chat(chat_body("alpha/no-such-model", false)).await;
    assert_eq!(r.status(), 404);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["code"],
        "model_not_found"
    );
    let r = h.chat(chat_body("nosuch/x", false)).await;
    assert_eq!(r.status(), 404);
    let r = h.chat(chat_body("gpt-4o", false)).await;
    assert_eq!(r.status(), 404);

    let big = json!({"model": "alpha/mock-small", "messages": [{"role": "user", "content": "x".repeat(4096)}]});
    let r = send_raw(serde_json::to_vec(&big).unwrap()).await.unwrap();
    assert_eq!(r.status(), 413);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"],
        json!({"message": "request body exceeds the limit of 2048 bytes", "type": "invalid_request_error", "code": "request_too_large", "param": null})
    );
    assert_eq!(h.mock_stats().await["requests_total"], 0);
}

#[tokio::test]
async fn client_headers_are_not_forwarded_and_the_connection_credential_is_used() {
    let h = Harness::start().await;
    let r = h
        .http
        .post(h.url("/v1/chat/completions"))
        .bearer_auth(KEY)
        .header("x-session-id", "s-1")
        .header("cookie", "session=abc")
        .header("x-custom-secret", "do-not-forward")
        .header("openai-organization", "org-client")
        .json(&chat_body("alpha/mock-small", false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let stats = h.mock_stats().await;
    let seen = &stats["recent"][0];
    assert_eq!(seen["credential"], CRED_ALPHA);
    let names: Vec<&str> = seen["headers"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        names,
        vec![
            "accept",
            "authorization",
            "content-length",
            "content-type",
            "host",
            "user-agent"
        ]
    );
    assert_eq!(
        seen["headers"]["authorization"],
        format!("Bearer {CRED_ALPHA}")
    );
    assert_eq!(seen["model"], "mock-small");
}

#[tokio::test]
async fn models_lists_provider_models_and_combos_the_key_may_use() {
    let h = Harness::start().await;
    let r = h
        .http
        .get(h.url("/v1/models"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    let ids: Vec<String> = r.json::<Value>().await.unwrap()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        ids,
        [
            "alpha/mock-small",
            "alpha/mock-large",
            "beta/mock-small",
            "fast"
        ]
    );

    let r = h
        .admin_send(
            reqwest::Method::PATCH,
            "/api/keys/k1",
            json!({"allowed_models": ["beta/*"]}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let r = h
        .http
        .get(h.url("/v1/models"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.json::<Value>().await.unwrap()["data"][0]["id"],
        "beta/mock-small"
    );
    let denied = h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(denied.status(), 403);
    assert_eq!(
        denied.json::<Value>().await.unwrap()["error"]["code"],
        "model_not_allowed"
    );
}

#[tokio::test]
async fn metrics_count_requests_by_status_provider_and_model() {
    let h = Harness::start().await;
    assert_eq!(
        h.chat(chat_body("alpha/mock-small", false)).await.status(),
        200
    );
    assert_eq!(
        h.chat(chat_body("alpha/mock-small", false)).await.status(),
        200
    );
    let text = h.metrics().await;
    assert!(
        text.contains(
            r#"switchyard_requests_total{status="200",provider="alpha",model="mock-small"} 2"#
        ),
        "{text}"
    );
    assert!(text.contains("switchyard_requests_in_flight 0"), "{text}");
    assert!(
        text.contains(r#"switchyard_upstream_latency_seconds_count{provider="alpha"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(
            r#"switchyard_upstream_attempts_total{provider="alpha",outcome="success"} 2"#
        ),
        "{text}"
    );
}

#[tokio::test]
async fn http2_is_spoken_to_clients_and_to_h2c_upstreams() {
    let h = Harness::start().await;
    let r = h.chat_http2(chat_body("alpha/mock-small", true)).await;
    assert_eq!(r.version(), reqwest::Version::HTTP_2);
    assert_eq!(
        r.text().await.unwrap(),
        openai::full_stream("mock-small", 5, PROMPT_TOKENS, false)
    );
    assert_eq!(h.mock_stats().await["recent"][0]["version"], "HTTP/1.1");

    let r = h
        .admin_send(
            reqwest::Method::PUT,
            "/api/connections/alpha-1",
            json!({"id": "alpha-1", "provider": "alpha", "auth_class": "apikey",
                   "provider_specific_data": {"http2_prior_knowledge": true}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let r = h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(r.status(), 200);
    let stats = h.mock_stats().await;
    assert_eq!(stats["recent"][1]["version"], "HTTP/2.0");
    assert_eq!(stats["recent"][1]["credential"], CRED_ALPHA);
}

/// The status and the typed error of a response.
async fn typed(r: reqwest::Response) -> (u16, Value) {
    let (status, body) = status_and_json(r).await;
    (status, body["error"].clone())
}

#[tokio::test]
async fn unknown_routes_wrong_methods_and_bad_paths_get_typed_json_after_the_credential() {
    let h = Harness::start().await;
    let get = |path: &str, token: Option<&str>| {
        let mut r = h.http.get(h.url(path));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };
    // Before the key is known, nothing says whether the route exists.
    let (s, e) = typed(get("/v1/nothing-here", None).await.unwrap()).await;
    assert_eq!((s, e["code"].as_str()), (401, Some("invalid_api_key")));
    let (s, e) = typed(get("/api/nothing-here", Some(KEY)).await.unwrap()).await;
    assert_eq!((s, e["code"].as_str()), (403, Some("admin_required")));
    // With it, a typed 404 / 405.
    let (s, e) = typed(get("/v1/nothing-here", Some(KEY)).await.unwrap()).await;
    assert_eq!(
        (s, e),
        (
            404,
            json!({"message": "no route for GET /v1/nothing-here", "type": "invalid_request_error", "code": "not_found", "param": null})
        )
    );
    let (s, e) = typed(get("/api/nothing-here", Some(ADMIN)).await.unwrap()).await;
    assert_eq!((s, e["code"].as_str()), (404, Some("not_found")));
    let (s, e) = typed(get("/elsewhere", None).await.unwrap()).await;
    assert_eq!((s, e["code"].as_str()), (404, Some("not_found")));
    let (s, e) = typed(get("/v1/chat/completions", Some(KEY)).await.unwrap()).await;
    assert_eq!(
        (s, e),
        (
            405,
            json!({"message": "GET is not allowed on /v1/chat/completions", "type": "invalid_request_error", "code": "method_not_allowed", "param": null})
        )
    );
    let (s, _) = typed(get("/v1/chat/completions", None).await.unwrap()).await;
    assert_eq!(s, 401);
    let r = h
        .http
        .delete(h.url("/api/monitoring/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(typed(r).await.0, 405);
    // Path and query rejections are typed too.
    let (s, e) = typed(get("/api/keys/%FF", Some(ADMIN)).await.unwrap()).await;
    assert_eq!((s, e["code"].as_str()), (400, Some("invalid_path")));
    let (s, e) = typed(get("/api/logs?limit=abc", Some(ADMIN)).await.unwrap()).await;
    assert_eq!((s, e["code"].as_str()), (400, Some("invalid_query")));
}

#[tokio::test]
async fn models_retrieve_answers_one_model_the_key_may_use() {
    let h = Harness::start().await;
    let get = |path: &str| h.http.get(h.url(path)).bearer_auth(KEY).send();
    let want =
        json!({"id": "alpha/mock-small", "object": "model", "created": 0, "owned_by": "alpha"});
    for path in [
        "/v1/models/alpha%2Fmock-small",
        "/v1/models/alpha/mock-small",
    ] {
        let r = get(path).await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(r.json::<Value>().await.unwrap(), want);
    }
    let r = get("/v1/models/fast").await.unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["owned_by"], "switchyard");
    let (s, e) = typed(get("/v1/models/alpha/unknown").await.unwrap()).await;
    assert_eq!((s, e["code"].as_str()), (404, Some("model_not_found")));
    let r = h.http.get(h.url("/v1/models/fast")).send().await.unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn non_json_bodies_get_415_and_oversized_max_tokens_400_naming_the_field() {
    let h = Harness::start().await;
    let body = serde_json::to_vec(&chat_body("alpha/mock-small", false)).unwrap();
    let r = h
        .http
        .post(h.url("/v1/chat/completions"))
        .bearer_auth(KEY)
        .header("content-type", "text/plain")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    let (s, e) = typed(r).await;
    assert_eq!(
        (s, e),
        (
            415,
            json!({"message": "unsupported content type `text/plain`: send `Content-Type: application/json`", "type": "invalid_request_error", "code": "unsupported_media_type", "param": null})
        )
    );
    let r = h
        .http
        .post(h.url("/v1/chat/completions"))
        .bearer_auth(KEY)
        .header("content-type", "application/json; charset=utf-8")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // The management API's JSON bodies too.
    let r = h
        .http
        .post(h.url("/api/keys"))
        .bearer_auth(ADMIN)
        .header("content-type", "text/plain")
        .body(r#"{"name":"x"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(typed(r).await.0, 415);
    for (field, value) in [
        ("max_tokens", json!(u64::MAX)),
        ("max_completion_tokens", json!(1u64 << 63)),
    ] {
        let mut b = chat_body("alpha/mock-small", false);
        b[field] = value;
        let (s, e) = typed(h.chat(b).await).await;
        assert_eq!(
            (s, e["code"].as_str(), e["param"].as_str()),
            (400, Some("invalid_request"), Some(field))
        );
    }
    assert_eq!(h.mock_stats().await["requests_total"], 1);
}
