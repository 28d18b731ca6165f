//! The dashboard: one page, its script, its style sheet and its icon, compiled into the binary
//! (no CDN, works offline).
//!
//! Authentication: a browser cannot send a bearer header when it navigates, so the page shell is
//! public and holds no data. Everything it shows comes from the API (`/v1/tasks`, `/v1/loops`,
//! `/v1/stats`, `/v1/tasks/{id}`, `/history`), which needs the token as usual: on a 401 the page
//! asks for the token, keeps it in the tab's `sessionStorage` (gone when the tab closes) and
//! sends it as `Authorization: Bearer` on its requests. The token never goes in a URL, a cookie
//! or the page. A strict Content-Security-Policy (scripts and styles from this origin only, no
//! inline script, requests to this origin only) keeps task texts, which come from agents, from
//! becoming script even if one slipped past the page's escaping.

use axum::http::{header, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/app.js");
const STYLE: &str = include_str!("dashboard/style.css");
const ICON: &str = include_str!("dashboard/icon.svg");

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let headers: [(HeaderName, HeaderValue); 5] = [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        // Small files; always revalidated, so an upgraded binary's page is the one shown.
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        ),
    ];
    (headers, body).into_response()
}

/// `GET /`: the dashboard's page shell.
pub async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

/// `GET /dashboard/app.js`
pub async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// `GET /dashboard/style.css`
pub async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

/// `GET /dashboard/icon.svg`
pub async fn icon() -> Response {
    asset("image/svg+xml", ICON)
}
