//! The web UI: static assets at `/` and `/ui/*`, and its JSON API under `/api/ui/` ([`api`]).
//!
//! The assets are the repository's `ui/` directory — plain ES modules, CSS and one HTML page,
//! no build step — compiled into the binary with `include_bytes!` (the list is [`ASSETS`]; a
//! test checks it matches the directory, so a new file cannot be forgotten). For UI work,
//! `WEFT_UI_DIR=/path/to/ui weft serve` serves the files from disk instead, so a browser reload
//! shows an edit without rebuilding.
//!
//! Routing in the browser is by URL fragment (`/#/trace/<id>?...`), so every view and its
//! state is a sharable link and the server needs no catch-all route.

pub mod api;
pub mod breakdown;
pub mod view;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::state::AppState;

macro_rules! asset {
    ($name:literal, $ct:literal) => {
        ($name, $ct, include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../ui/", $name)) as &[u8])
    };
}

/// Every UI file: (name under `ui/`, content type, bytes).
pub const ASSETS: &[(&str, &str, &[u8])] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("favicon.svg", "image/svg+xml"),
    asset!("theme.js", "text/javascript; charset=utf-8"),
    asset!("app.js", "text/javascript; charset=utf-8"),
    asset!("util.js", "text/javascript; charset=utf-8"),
    asset!("search.js", "text/javascript; charset=utf-8"),
    asset!("trace.js", "text/javascript; charset=utf-8"),
    asset!("compare.js", "text/javascript; charset=utf-8"),
    asset!("deps.js", "text/javascript; charset=utf-8"),
    asset!("sql.js", "text/javascript; charset=utf-8"),
    asset!("breakdown.js", "text/javascript; charset=utf-8"),
    asset!("explore.js", "text/javascript; charset=utf-8"),
    asset!("live.js", "text/javascript; charset=utf-8"),
    asset!("capture.js", "text/javascript; charset=utf-8"),
];

/// Routes: the UI page, its assets, its JSON API.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(index))
        .route("/ui", get(index))
        .route("/ui/", get(index))
        .route("/ui/{file}", get(file))
        .route("/favicon.ico", get(favicon))
        .merge(api::routes())
}

fn etag(bytes: &[u8]) -> String {
    // FNV-1a: a content fingerprint for revalidation, not security.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("\"{h:016x}\"")
}

fn serve(name: &str, headers: &HeaderMap) -> Response {
    let Some(&(_, ct, embedded)) = ASSETS.iter().find(|a| a.0 == name) else {
        return (StatusCode::NOT_FOUND, format!("no UI file {name:?}")).into_response();
    };
    let from_disk =
        std::env::var_os("WEFT_UI_DIR").and_then(|d| std::fs::read(std::path::Path::new(&d).join(name)).ok());
    let bytes: Vec<u8> = from_disk.unwrap_or_else(|| embedded.to_vec());
    let tag = etag(&bytes);
    if headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()) == Some(tag.as_str()) {
        return StatusCode::NOT_MODIFIED.into_response();
    }
    let mut r = (StatusCode::OK, bytes).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    if let Ok(v) = HeaderValue::from_str(&tag) {
        h.insert(header::ETAG, v);
    }
    r
}

async fn index(headers: HeaderMap) -> Response {
    serve("index.html", &headers)
}

async fn favicon(headers: HeaderMap) -> Response {
    serve("favicon.svg", &headers)
}

async fn file(Path(name): Path<String>, headers: HeaderMap) -> Response {
    serve(&name, &headers)
}
