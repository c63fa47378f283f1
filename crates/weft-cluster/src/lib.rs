//! # weft-cluster
//!
//! Distributed SQL over a weft store's segments on Apache DataFusion Ballista.
//!
//! [`register_store`] registers the tables `spans`, `span_events`, `span_links` and `events`
//! in a (Ballista) DataFusion session, with the columns of [`weft_store::Store::sql`], built
//! from the Parquet files that the store's manifests name — a data directory's manifest, or
//! in a bucket (`s3://bucket/prefix`, see [`StoreAt`]) the collectors' that a read-only store
//! over that URL serves: the manifest at the URL, if any, and every manifest one level down
//! (`<prefix>/<collector>/`), each naming files under its own prefix. One listing table per
//! table over exactly those files. Segments that keep their resources apart (a
//! `span_resources` file, span rows carrying a `resource_ref`) get the `resource_*` columns
//! back by a join on `resource_ref` and, over several collectors, the collector (segment ids,
//! and so `resource_ref`s, repeat across collectors), which a cluster runs like any other join.
//! Unlike the read-only store, which serves the intact collectors, a manifest that cannot be
//! read fails the registration naming its prefix: an answer never silently lacks a
//! collector. [`query`] connects to a Ballista scheduler, registers the tables and runs one
//! read-only statement.
//!
//! Where the files are read: from a data directory, every node must see it at the same path (a
//! shared file system); from a bucket, each node reads the objects itself, with the S3 client
//! a store uses ([`weft_store::s3_store`]: the `AWS_*` environment, over it a credentials
//! file), which [`BucketRegistry`] adds to the sessions of the scheduler (it plans with the
//! files' Parquet metadata) and the executors (they read the row groups).
//!
//! What a cluster sees is the segments only: spans still in a running store's write-ahead log
//! and in-memory buffer (not yet flushed) are not in its answers. Trace by id and search stay
//! on weft's own single-node path.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ballista::prelude::SessionContextExt;
use url::Url;
use weft_store::datafusion::arrow::compute::concat_batches;
use weft_store::datafusion::arrow::datatypes::SchemaRef;
use weft_store::datafusion::catalog::TableProvider;
use weft_store::datafusion::datasource::file_format::parquet::ParquetFormat;
use weft_store::datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use weft_store::datafusion::error::DataFusionError;
use weft_store::datafusion::execution::object_store::{DefaultObjectStoreRegistry, ObjectStoreRegistry};
use weft_store::datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use weft_store::datafusion::logical_expr::JoinType;
use weft_store::datafusion::object_store::ObjectStore;
use weft_store::datafusion::prelude::{SQLOptions, SessionContext, col, lit};
use weft_store::manifest::{self, Manifest};
use weft_store::schema;
use weft_store::{BucketConfig, SqlResult, StoreError};

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The directory or the bucket's prefix holds no manifest (a prefix: nor one level down).
    #[error("{0} is not a weft data directory or bucket prefix with segments (no MANIFEST.json)")]
    NotAStore(String),
    /// A prefix of the bucket could not be listed, or its manifest read.
    #[error("{url}: its manifest cannot be read, so an answer would lack its segments: {source}")]
    Collector {
        /// The prefix (`s3://bucket/prefix`).
        url: String,
        /// Why.
        source: StoreError,
    },
    /// The manifest could not be read.
    #[error("reading the manifest: {0}")]
    Manifest(#[from] StoreError),
    /// A file path could not be made a table location.
    #[error("{path}: {reason}")]
    Path {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Registering the tables failed.
    #[error("registering table {table}: {source}")]
    Register {
        /// The table.
        table: &'static str,
        /// DataFusion's error.
        source: DataFusionError,
    },
    /// The scheduler could not be reached.
    #[error("connecting to the Ballista scheduler at {url}: {source}")]
    Connect {
        /// The scheduler URL.
        url: String,
        /// Ballista's error.
        source: DataFusionError,
    },
    /// The query failed (planning or on the cluster).
    #[error("query failed: {0}")]
    Query(DataFusionError),
}

/// Result of this crate.
pub type Result<T> = std::result::Result<T, ClusterError>;

/// What [`register_store`] registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    /// Manifests read (a directory: 1; a bucket: its collectors').
    pub manifests: usize,
    /// Segments named by the manifests.
    pub segments: usize,
    /// Parquet files the tables read.
    pub files: usize,
}

/// File extension that no file has: the listing of a table without files (a store without
/// span links, say) finds nothing and the table is empty, with its columns.
const NO_FILE: &str = ".weft-cluster-table-without-files";

/// Where a store's segments are: the data directory a collector writes (every node sees it
/// at this path), or the bucket it uploads them to (with the collectors one level down).
#[derive(Debug, Clone, PartialEq)]
pub enum StoreAt {
    /// A data directory.
    Dir(PathBuf),
    /// `s3://bucket/prefix`, and the credentials file read over the `AWS_*` environment: the
    /// manifest at the prefix, if any, and every one a level down (`<prefix>/<name>/`).
    Bucket(BucketConfig),
}

impl StoreAt {
    /// `s3://bucket/prefix` is a bucket (with `credentials_file`), anything else a directory.
    pub fn parse(at: &str, credentials_file: Option<PathBuf>) -> StoreAt {
        if at.starts_with("s3://") {
            StoreAt::Bucket(BucketConfig { url: at.to_owned(), credentials_file })
        } else {
            StoreAt::Dir(PathBuf::from(at))
        }
    }
}

/// One manifest (one collector's) and the location of its segment files (a directory path
/// or `s3://bucket/prefix/segments/`, ending in `/`).
struct Collector {
    manifest: Manifest,
    seg_dir: String,
}

impl Collector {
    /// Paths of its `table` files of the segments that `pick` accepts.
    fn files(&self, table: &str, pick: impl Fn(&weft_store::SegmentMeta) -> bool) -> Vec<String> {
        self.manifest
            .segments
            .iter()
            .filter(|s| pick(s))
            .filter_map(|s| s.file(table))
            .map(|f| format!("{}{}", self.seg_dir, f.file))
            .collect()
    }
}

/// The manifests at `at`: a directory's, or in a bucket the one at the URL (if any) and every
/// one a level down ([`weft_store::collector_prefixes`]); at least one. A bucket's client is
/// registered in `ctx`'s runtime too (a local session reads through it; a Ballista client's
/// session plans nothing).
fn collectors_at(ctx: &SessionContext, at: &StoreAt) -> Result<Vec<Collector>> {
    match at {
        StoreAt::Dir(dir) => {
            let manifest =
                manifest::load(dir)?.ok_or_else(|| ClusterError::NotAStore(dir.display().to_string()))?;
            let seg_dir = std::path::absolute(dir.join("segments"))
                .map_err(|e| ClusterError::Path { path: dir.join("segments"), reason: e.to_string() })?;
            Ok(vec![Collector { manifest, seg_dir: format!("{}/", seg_dir.display()) }])
        }
        StoreAt::Bucket(b) => {
            let failed = |url: &str| {
                let url = url.to_owned();
                move |source| ClusterError::Collector { url, source }
            };
            let mut found = Vec::new();
            for prefix in weft_store::collector_prefixes(b).map_err(failed(&b.url))? {
                let (m, seg_dir) = weft_store::read_manifest(&prefix).map_err(failed(&prefix.url))?;
                if let Some(manifest) = m {
                    found.push(Collector { manifest, seg_dir });
                }
            }
            let first = found.first().ok_or_else(|| ClusterError::NotAStore(b.url.clone()))?;
            let url = Url::parse(&first.seg_dir).map_err(|e| ClusterError::Path {
                path: PathBuf::from(&first.seg_dir),
                reason: e.to_string(),
            })?;
            let bucket = url.host_str().unwrap_or_default();
            let store = weft_store::s3_store(bucket, b.credentials_file.as_deref())?;
            ctx.runtime_env().register_object_store(&url, store);
            Ok(found)
        }
    }
}

/// Registers `spans`, `span_events`, `span_links` and `events` in `ctx` over the segments that
/// the manifests of the store at `at` name.
pub fn register_store(ctx: &SessionContext, at: &StoreAt) -> Result<Registered> {
    let collectors = collectors_at(ctx, at)?;
    // Where a table without files lists nothing.
    let seg_dir = collectors.first().map(|c| c.seg_dir.clone()).unwrap_or_default();
    let all = |table: &str, pick: &dyn Fn(&weft_store::SegmentMeta) -> bool| -> Vec<String> {
        collectors.iter().flat_map(|c| c.files(table, pick)).collect()
    };
    let mut files = 0;
    for (t, name) in schema::TABLE_NAMES.iter().enumerate().skip(1) {
        let paths = all(name, &|_| true);
        files += paths.len();
        let table = listing(&seg_dir, paths, schema::schema_of(t), name)?;
        ctx.register_table(*name, table).map_err(|source| ClusterError::Register { table: name, source })?;
    }
    let apart = |s: &weft_store::SegmentMeta| s.file(schema::SPAN_RESOURCES).is_some();
    let whole = all(schema::SPANS, &|s| !apart(s));
    files += whole.len();
    // Per collector: its split spans files and its resources files.
    let mut split = Vec::new();
    for c in &collectors {
        let (spans, resources) = (c.files(schema::SPANS, apart), c.files(schema::SPAN_RESOURCES, apart));
        files += spans.len() + resources.len();
        if !spans.is_empty() {
            split.push((spans, resources));
        }
    }
    let spans = spans_view(ctx, &seg_dir, whole, split)
        .map_err(|source| ClusterError::Register { table: schema::SPANS, source })?;
    ctx.register_table(schema::SPANS, spans)
        .map_err(|source| ClusterError::Register { table: schema::SPANS, source })?;
    let segments = collectors.iter().map(|c| c.manifest.segments.len()).sum();
    Ok(Registered { manifests: collectors.len(), segments, files })
}

/// DataFusion's object-store registry that adds the client of an `s3://` bucket when a plan
/// first names it ([`weft_store::s3_store`]: the `AWS_*` environment, over it the credentials
/// file): the scheduler's and the executors' sessions get their stores from it, since the
/// buckets a query reads are known only from its plan.
#[derive(Debug)]
pub struct BucketRegistry {
    known: DefaultObjectStoreRegistry,
    credentials_file: Option<PathBuf>,
}

impl BucketRegistry {
    /// A registry whose buckets use `credentials_file` over the environment.
    pub fn new(credentials_file: Option<PathBuf>) -> BucketRegistry {
        BucketRegistry { known: DefaultObjectStoreRegistry::new(), credentials_file }
    }

    /// A runtime reading through this registry (spill files in `temp_dir`, if given).
    pub fn runtime(
        credentials_file: Option<PathBuf>,
        temp_dir: Option<&Path>,
    ) -> std::result::Result<Arc<RuntimeEnv>, DataFusionError> {
        let mut b =
            RuntimeEnvBuilder::new().with_object_store_registry(Arc::new(Self::new(credentials_file)));
        if let Some(d) = temp_dir {
            b = b.with_temp_file_path(d);
        }
        b.build_arc()
    }
}

impl ObjectStoreRegistry for BucketRegistry {
    fn register_store(&self, url: &Url, store: Arc<dyn ObjectStore>) -> Option<Arc<dyn ObjectStore>> {
        self.known.register_store(url, store)
    }

    fn deregister_store(&self, url: &Url) -> std::result::Result<Arc<dyn ObjectStore>, DataFusionError> {
        self.known.deregister_store(url)
    }

    fn get_store(&self, url: &Url) -> std::result::Result<Arc<dyn ObjectStore>, DataFusionError> {
        let known = self.known.get_store(url);
        let bucket = match url.host_str() {
            Some(b) if known.is_err() && url.scheme() == "s3" => b,
            _ => return known,
        };
        let store = weft_store::s3_store(bucket, self.credentials_file.as_deref())
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let key = Url::parse(&format!("s3://{bucket}"))
            .map_err(|e| DataFusionError::Configuration(format!("bucket {bucket}: {e}")))?;
        self.known.register_store(&key, store.clone());
        tracing::info!(bucket, "reading from bucket");
        Ok(store)
    }
}

/// A listing table of `schema` over exactly `paths` (no files: an empty table).
fn listing(
    seg_dir: &str,
    paths: Vec<String>,
    schema: SchemaRef,
    table: &'static str,
) -> Result<Arc<dyn TableProvider>> {
    let url = |p: &str| {
        ListingTableUrl::parse(p)
            .map_err(|e| ClusterError::Path { path: PathBuf::from(p), reason: e.to_string() })
    };
    let (urls, ext) = if paths.is_empty() {
        (vec![url(seg_dir)?], NO_FILE)
    } else {
        (paths.iter().map(|p| url(p)).collect::<Result<Vec<_>>>()?, ".parquet")
    };
    let options = ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(ext);
    let config =
        ListingTableConfig::new_with_multi_paths(urls).with_listing_options(options).with_schema(schema);
    let t = ListingTable::try_new(config).map_err(|source| ClusterError::Register { table, source })?;
    Ok(Arc::new(t))
}

/// `spans`: the spans files that keep their resource columns, and those that keep a
/// `resource_ref` joined with their collector's resources files, in the columns of
/// [`schema::spans_schema`]. A `resource_ref` names one resource of one segment, and segment
/// ids are per collector: over several collectors both sides carry the collector's index
/// (its place in `split`), and the join matches it too, so that a span never gets the
/// resources of another collector's segment of the same id.
fn spans_view(
    ctx: &SessionContext,
    seg_dir: &str,
    whole: Vec<String>,
    split: Vec<(Vec<String>, Vec<String>)>,
) -> std::result::Result<Arc<dyn TableProvider>, DataFusionError> {
    let register = |r: Result<Arc<dyn TableProvider>>| r.map_err(|e| DataFusionError::External(Box::new(e)));
    let logical = schema::spans_schema();
    let names: Vec<&str> = logical.fields().iter().map(|f| f.name().as_str()).collect();
    let whole_df = |ctx: &SessionContext, whole: Vec<String>| -> std::result::Result<_, DataFusionError> {
        let t = register(listing(seg_dir, whole, logical.clone(), schema::SPANS))?;
        ctx.read_table(t)?.select_columns(&names)
    };
    // The resources side's `resource_ref` (and collector) renamed, so that every column of
    // the join has a name of its own.
    let (renamed, collector, res_collector) =
        ("weft_resources_ref", "weft_collector", "weft_resources_collector");
    let keyed = split.len() > 1;
    let (mut files, mut res) = (None, None);
    for (i, (spans, resources)) in split.into_iter().enumerate() {
        let f =
            ctx.read_table(register(listing(seg_dir, spans, schema::spans_file_schema(), schema::SPANS))?)?;
        let r =
            register(listing(seg_dir, resources, schema::span_resources_schema(), schema::SPAN_RESOURCES))?;
        let mut res_cols = vec![col(schema::RESOURCE_REF).alias(renamed)];
        res_cols.extend(schema::RESOURCE_COLUMNS.iter().map(|c| col(*c)));
        let r = ctx.read_table(r)?.select(res_cols)?;
        let (f, r) = if keyed {
            let index = u32::try_from(i).unwrap_or(u32::MAX);
            (f.with_column(collector, lit(index))?, r.with_column(res_collector, lit(index))?)
        } else {
            (f, r)
        };
        files = Some(match files {
            Some(all) => f.union(all)?,
            None => f,
        });
        res = Some(match res {
            Some(all) => r.union(all)?,
            None => r,
        });
    }
    // No segment keeps its resources apart.
    let (Some(files), Some(res)) = (files, res) else {
        return Ok(whole_df(ctx, whole)?.into_view());
    };
    let (left, right) = if keyed {
        (vec![schema::RESOURCE_REF, collector], vec![renamed, res_collector])
    } else {
        (vec![schema::RESOURCE_REF], vec![renamed])
    };
    let joined = files
        .alias("f")?
        .join(res.alias("r")?, JoinType::Inner, &left, &right, None)?
        .select_columns(&names)?;
    if whole.is_empty() {
        return Ok(joined.into_view());
    }
    Ok(whole_df(ctx, whole)?.union(joined)?.into_view())
}

/// Runs one read-only statement (no DDL, DML or `SET`) on the Ballista cluster whose scheduler
/// is at `cluster` (`df://host:port`) over the store at `at`; at most `max_rows` rows.
pub async fn query(cluster: &str, at: &StoreAt, sql: &str, max_rows: usize) -> Result<SqlResult> {
    let ctx = SessionContext::remote(cluster)
        .await
        .map_err(|source| ClusterError::Connect { url: cluster.to_owned(), source })?;
    let reg = {
        let (ctx, at) = (ctx.clone(), at.clone());
        // A bucket's manifest is read with blocking calls.
        tokio::task::spawn_blocking(move || register_store(&ctx, &at))
            .await
            .map_err(|e| ClusterError::Query(DataFusionError::External(Box::new(e))))??
    };
    tracing::debug!(
        manifests = reg.manifests,
        segments = reg.segments,
        files = reg.files,
        "tables registered"
    );
    let opts = SQLOptions::new().with_allow_ddl(false).with_allow_dml(false).with_allow_statements(false);
    let df = ctx.sql_with_options(sql, opts).await.map_err(ClusterError::Query)?;
    let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
    // One row past the limit tells whether more existed.
    let df = df.limit(0, Some(max_rows.saturating_add(1))).map_err(ClusterError::Query)?;
    let batches = df.collect().await.map_err(ClusterError::Query)?;
    let all = concat_batches(&schema, &batches).map_err(|e| ClusterError::Query(e.into()))?;
    let truncated = all.num_rows() > max_rows;
    let batches = vec![all.slice(0, all.num_rows().min(max_rows))];
    Ok(SqlResult { schema, batches, truncated })
}
