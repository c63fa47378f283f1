//! `weft explore`'s hypothesis forest, kept next to the traces.
//!
//! | route | auth | what |
//! |---|---|---|
//! | `PUT /api/control/explore/forest` | bearer | store a run's forest (JSON, at most [`MAX_BYTES`]; validated: a malformed one gets 400 naming the field) |
//! | `GET /api/ui/explore` | — | `{"forest": Forest \| null, "updated_unix_ms": N}` for the UI's Explore view and `weft explore show/why --collector` |
//!
//! The forest is written atomically (a temporary file, fsynced, renamed, the directory
//! fsynced) to `<data-dir>/explore/forest.json`, so it survives restarts and a crash leaves
//! the previous one or the new one. A store opened read-only refuses to store one (409). The
//! route needs the control token, like the rest of `/api/control/*`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use weft_control::client::FOREST_ROUTE;
use weft_explore::forest::{FILE, Forest, MAX_BYTES, READ_ROUTE};

use crate::api::{ApiError, json_bytes};
use crate::state::AppState;

/// Routes (merged into the query router).
pub fn routes() -> Router<AppState> {
    Router::new().route(FOREST_ROUTE, put(store)).route(READ_ROUTE, get(read))
}

/// `<data-dir>/explore/forest.json`.
pub fn forest_path(data_dir: &Path) -> PathBuf {
    data_dir.join("explore").join(FILE)
}

fn internal(message: String) -> ApiError {
    tracing::error!(%message, "explore forest");
    ApiError { status: StatusCode::INTERNAL_SERVER_ERROR, message }
}

async fn store(State(st): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let c = &st.control;
    if let Err(e) = c.check(&headers) {
        return e.into_response();
    }
    let parsed = match crate::control::read_body(body, MAX_BYTES).await {
        Ok(b) => Forest::parse(&b).map(|f| (f, b)).map_err(|e| ApiError::bad_request(format!("forest: {e}"))),
        Err(e) => Err(e),
    };
    let (forest, bytes) = match parsed {
        Ok(x) => x,
        Err(e) => {
            c.counters.malformed.fetch_add(1, Ordering::Relaxed);
            return e.into_response();
        }
    };
    if st.store.config().read_only {
        return ApiError {
            status: StatusCode::CONFLICT,
            message: "the store is open read-only: it cannot keep a forest".into(),
        }
        .into_response();
    }
    let path = forest_path(st.store.dir());
    let (p, trees) = (path.clone(), forest.trees.len());
    match tokio::task::spawn_blocking(move || write_atomic(&p, &bytes)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return internal(format!("{}: {e}", path.display())).into_response(),
        Err(e) => return internal(format!("forest write task: {e}")).into_response(),
    }
    tracing::info!(epochs = forest.epochs, trees, "explore forest stored");
    let answer = serde_json::json!({ "stored": path, "epochs": forest.epochs, "trees": trees });
    json_bytes(answer.to_string().into_bytes())
}

/// Writes `bytes` to `path` so that a crash leaves the old file or the new one.
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    // one temporary file per writer: concurrent PUTs never write into each other's
    let tmp = dir.join(format!(".{FILE}.{}.{}.tmp", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed)));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    std::fs::File::open(dir)?.sync_all()
}

async fn read(State(st): State<AppState>) -> Response {
    let path = forest_path(st.store.dir());
    let p = path.clone();
    let got = tokio::task::spawn_blocking(move || -> std::io::Result<Option<(Vec<u8>, Option<u64>)>> {
        match std::fs::read(&p) {
            Ok(b) => {
                let modified = std::fs::metadata(&p)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map(|d| d.as_millis() as u64);
                Ok(Some((b, modified)))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    })
    .await;
    let (bytes, modified) = match got {
        Ok(Ok(Some(x))) => x,
        Ok(Ok(None)) => return json_bytes(br#"{"forest":null}"#.to_vec()),
        Ok(Err(e)) => return internal(format!("{}: {e}", path.display())).into_response(),
        Err(e) => return internal(format!("forest read task: {e}")).into_response(),
    };
    // Stored only once validated; checked again, as the file may have been edited by hand.
    if let Err(e) = Forest::parse(&bytes) {
        return internal(format!("{}: {e}", path.display())).into_response();
    }
    let mut out = Vec::with_capacity(bytes.len() + 64);
    out.extend_from_slice(b"{\"forest\":");
    out.extend_from_slice(&bytes);
    if let Some(ms) = modified {
        out.extend_from_slice(format!(",\"updated_unix_ms\":{ms}").as_bytes());
    }
    out.push(b'}');
    json_bytes(out)
}
