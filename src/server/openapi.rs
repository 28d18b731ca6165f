//! The OpenAPI document, generated from the handlers and types. A copy is committed at
//! docs/openapi.json; a test fails when it drifts from this.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "loopguard",
        description = "Tells an LLM-agent orchestrator, event by event, whether its agent is stuck in a loop — also when the agent rewords what it repeats — and what to do next.",
        license(name = "Apache-2.0")
    ),
    paths(
        super::routes::evaluate,
        super::overview::list_tasks,
        super::routes::get_task,
        super::routes::get_history,
        super::routes::reset_task,
        super::routes::delete_task,
        super::overview::recent_loops,
        super::routes::similar_loops,
        super::routes::feedback,
        super::routes::export_feedback,
        super::routes::livez,
        super::routes::readyz,
        super::routes::metrics,
        super::overview::stats,
    ),
    components(schemas(
        super::routes::BatchItem,
        loopguard::event::Event,
    )),
    modifiers(&BearerAuth),
    tags(
        (name = "evaluate", description = "Events in, verdicts out"),
        (name = "tasks", description = "Task listing, state, audit trail, reset, delete"),
        (name = "loops", description = "Cross-task loop memory: recent loops, similar loops"),
        (name = "feedback", description = "False positives and missed loops, exported for calibration"),
        (name = "operations", description = "Health, metrics and live figures"),
    )
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

pub fn document() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    // Stable across builds: the committed copy must not change with the crate version.
    doc.info.version = "1".into();
    doc
}

/// The document as committed: pretty JSON with a trailing newline.
pub fn document_json() -> String {
    let mut s = serde_json::to_string_pretty(&document()).expect("the OpenAPI document serialises");
    s.push('\n');
    s
}
