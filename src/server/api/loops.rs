//! `GET /v1/loops/similar`: the cross-task loop memory, asked with a text.

use crate::server::http::error::{ApiError, ErrorBody};
use crate::server::http::limits::{check_param, Class, Limits};
use crate::server::http::params::QueryParams;
use crate::server::AppState;
use axum::extract::State;
use axum::Json;
use serde::Serialize;
use std::sync::Arc;

// The document's description of the parameters; `QueryParams` parses them.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[expect(
    dead_code,
    reason = "describes the parameters for the OpenAPI document only"
)]
pub struct SimilarQuery {
    /// The text of a loop: a failure message, a request, a tool call and its result.
    #[param(min_length = 1)]
    pub text: String,
    /// Most loops returned (default `memory.k`).
    #[param(minimum = 1, maximum = 50)]
    pub k: Option<u32>,
    /// Least cosine similarity (default `memory.min_similarity`).
    #[param(minimum = -1.0, maximum = 1.0)]
    pub min_similarity: Option<f32>,
}

/// Loops seen before that look like a text.
#[derive(Serialize, utoipa::ToSchema)]
pub struct SimilarLoops {
    pub loops: Vec<loopguard::verdict::SimilarLoop>,
}

/// `GET /v1/loops/similar?text=…`: the closest loops in the cross-task memory, with how their
/// tasks were resolved.
#[utoipa::path(
    get,
    path = "/v1/loops/similar",
    tag = "loops",
    params(SimilarQuery),
    responses((status = 200, body = SimilarLoops), (status = 400, body = ErrorBody), (status = 404, description = "The loop memory is disabled", body = ErrorBody)),
    security((), ("bearer" = []))
)]
pub async fn similar_loops(
    State(state): State<Arc<AppState>>,
    q: QueryParams,
) -> Result<Json<SimilarLoops>, ApiError> {
    let text = q.required("text")?;
    if text.is_empty() {
        return Err(ApiError::bad_request("invalid_parameter", "must not be empty").at("text"));
    }
    check_param("text", text, Class::Text, &Limits::of(&state.cfg.server))?;
    let k = q.number::<usize>("k", 1, 50)?;
    // Checked as f64: -1.0000000000000002 is out of range, though as an f32 it rounds to -1.
    let min = q
        .number::<f64>("min_similarity", -1.0, 1.0)?
        .map(|m| m as f32);
    let Some(mem) = state.engine.loop_memory() else {
        return Err(ApiError::not_found(
            "the loop memory is disabled ([memory] enabled = false)",
        ));
    };
    let min = min.unwrap_or(mem.config().min_similarity);
    let prepared = loopguard::signature::head_tail(
        &loopguard::signature::normalize(text),
        state.cfg.model.max_text_chars,
    );
    let v = state
        .engine
        .embedder()
        .embed(std::slice::from_ref(&prepared))
        .await?;
    let k = k.unwrap_or(mem.config().k);
    Ok(Json(SimilarLoops {
        loops: mem.similar(&v[0], k, min, None),
    }))
}
