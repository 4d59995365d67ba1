//! `GET /v1/models` and `GET /v1/models/{id}`: the models a key may use — every
//! provider's `provider/model` ids, the quota-share pools' `qtSd/` ids, the combos and
//! the aliases.
//! A request carrying `anthropic-version` (the Anthropic SDKs' `models.list`) gets
//! Anthropic's list shape and error shape. Reads the snapshot only.

use crate::error::{render, ApiError, ApiPath};
use crate::pipeline::auth;
use crate::snapshot::Snapshot;
use crate::state::AppState;
use crate::upstream::ProtocolHeaders;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use std::sync::Arc;
use switchyard_core::catalog::ApiKey;
use switchyard_core::format::Format;
use switchyard_core::routing::{self, OfferKind};
use utoipa::ToSchema;

/// One entry of `GET /v1/models`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ModelEntry {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: String,
}

/// `GET /v1/models` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelEntry>,
}

/// What `key` may ask for: providers' listed models, the quota-share pools' `qtSd/`
/// names, the combos and the aliases (exact names and glob patterns, in the order they
/// are tried). A provider that passes any model through has no entry of its own.
fn visible_models(snap: &Snapshot, key: &ApiKey) -> Vec<ModelEntry> {
    routing::offered(&snap.catalog, &snap.quota, key)
        .into_iter()
        .filter(|o| o.kind != OfferKind::AnyModel)
        .map(|o| ModelEntry {
            id: o.id,
            object: "model",
            created: 0,
            owned_by: o.owner,
        })
        .collect()
}

/// One entry of `GET /v1/models` in Anthropic's shape.
#[derive(Debug, Serialize, ToSchema)]
pub struct AnthropicModel {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub id: String,
    pub display_name: String,
    /// RFC 3339; the gateway does not know when a model was released.
    pub created_at: &'static str,
}

/// `GET /v1/models` answer in Anthropic's shape.
#[derive(Debug, Serialize, ToSchema)]
pub struct AnthropicModelList {
    pub data: Vec<AnthropicModel>,
    pub has_more: bool,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
}

impl From<ModelEntry> for AnthropicModel {
    fn from(m: ModelEntry) -> Self {
        Self {
            kind: "model",
            display_name: m.id.clone(),
            id: m.id,
            created_at: "1970-01-01T00:00:00Z",
        }
    }
}

/// The client API a models request speaks: Anthropic's when it carries
/// `anthropic-version`.
fn format_of(headers: &HeaderMap) -> Format {
    if headers.contains_key(ProtocolHeaders::VERSION) {
        Format::AnthropicMessages
    } else {
        Format::OpenAiChat
    }
}

/// `GET /v1/models`: the `provider/model` ids and combo names the key may use.
#[utoipa::path(get, path = "/v1/models", tag = "client",
    responses((status = 200, body = ModelList), (status = 401)), security(("bearer" = [])))]
pub async fn models(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let snap = state.snapshot();
    let format = format_of(&headers);
    let key = match auth::client_key(&snap.catalog, &headers) {
        Ok(key) => key,
        Err(e) => return render::response(&e, format),
    };
    let data = visible_models(&snap, key);
    match format {
        Format::OpenAiChat | Format::Responses => Json(ModelList {
            object: "list",
            data,
        })
        .into_response(),
        Format::AnthropicMessages => {
            let data: Vec<AnthropicModel> = data.into_iter().map(AnthropicModel::from).collect();
            Json(AnthropicModelList {
                has_more: false,
                first_id: data.first().map(|m| m.id.clone()),
                last_id: data.last().map(|m| m.id.clone()),
                data,
            })
            .into_response()
        }
    }
}

/// `GET /v1/models/{id}` (the SDKs' `models.retrieve`): one model the key may use. The
/// id may contain `/` (`provider/model`), sent as is or percent-encoded.
#[utoipa::path(get, path = "/v1/models/{id}", tag = "client",
    params(("id" = String, Path, description = "`provider/model` or a combo name")),
    responses((status = 200, body = ModelEntry), (status = 401), (status = 404)),
    security(("bearer" = [])))]
pub async fn model(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
) -> Response {
    let snap = state.snapshot();
    let format = format_of(&headers);
    let key = match auth::client_key(&snap.catalog, &headers) {
        Ok(k) => k,
        Err(e) => return render::response(&e, format),
    };
    match visible_models(&snap, key).into_iter().find(|m| m.id == id) {
        Some(entry) if format == Format::AnthropicMessages => {
            Json(AnthropicModel::from(entry)).into_response()
        }
        Some(entry) => Json(entry).into_response(),
        None => {
            let offered = visible_models(&snap, key)
                .into_iter()
                .map(|m| m.id)
                .collect();
            let unknown = routing::RouteError::UnknownModel { model: id, offered };
            render::response(&ApiError::Route(unknown), format)
        }
    }
}
