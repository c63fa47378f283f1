//! SQL over the store with DataFusion.
//!
//! Every query runs against a [`Snapshot`]: the segments live when it started plus the
//! in-memory buffers. Each table is a [`SnapshotTable`] whose scan is a union of a Parquet scan
//! over the segment files (with the query's filters as a pruning predicate: row-group and page
//! statistics, bloom filters) and a memory scan over the buffered batches. The snapshot keeps
//! its segments alive, so compaction and retention never delete a file under a running query.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::DFSchema;
use datafusion::datasource::TableType;
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::physical_plan::parquet::ParquetAccessPlan;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder, ParquetSource};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::union::UnionExec;

use crate::resources::{ExpandExec, ResourceLookup};
use crate::schema;
use crate::segment::Segment;

/// Where segment files are read from: the data directory, or a bucket registered in the
/// runtime's object-store registry under `url`.
#[derive(Debug, Clone)]
pub(crate) struct FilesAt {
    pub url: ObjectStoreUrl,
    /// The segment files' directory (local) or key prefix (bucket).
    pub base: String,
}

impl FilesAt {
    /// The data directory's `segments/`.
    pub fn local(seg_dir: &Path) -> FilesAt {
        FilesAt { url: ObjectStoreUrl::local_filesystem(), base: seg_dir.to_string_lossy().into_owned() }
    }

    fn path(&self, file: &str) -> String {
        format!("{}/{file}", self.base)
    }
}

/// A collector whose segments a read-only store over several prefixes reads: segment ids are
/// its own (another collector's segment 7 is another segment), and so are the `resource_ref`s
/// its spans files carry.
#[derive(Debug)]
pub(crate) struct Origin {
    /// The collector's prefix below the store's URL (empty: the URL's own manifest).
    pub name: String,
    /// Where its segment files are (same bucket as the snapshot's `files_at`).
    pub files_at: FilesAt,
}

/// What a query sees: live segments and buffered batches, per table.
pub(crate) struct Snapshot {
    pub segments: Vec<Arc<Segment>>,
    pub files_at: FilesAt,
    /// Buffered batches (active and frozen buffers), per table; spans in the segment files'
    /// layout.
    pub memory: [Vec<RecordBatch>; 4],
    /// Each buffer's id and resources, which its span rows name.
    pub memory_resources: Vec<(u64, RecordBatch)>,
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("segments", &self.segments.len())
            .field("memory_batches", &self.memory.iter().map(Vec::len).collect::<Vec<_>>())
            .finish()
    }
}

/// One table of a snapshot.
#[derive(Debug)]
pub(crate) struct SnapshotTable {
    pub snapshot: Arc<Snapshot>,
    pub table: usize,
    pub schema: SchemaRef,
}

#[async_trait::async_trait]
impl TableProvider for SnapshotTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(&self, filters: &[&Expr]) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // Used for pruning only; DataFusion re-applies every filter above the scan.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let table_name = crate::schema::TABLE_NAMES[self.table];
        let partitions = state.config().target_partitions().max(1);
        let mut inputs: Vec<Arc<dyn ExecutionPlan>> = Vec::new();
        let projected = match projection {
            Some(p) => Arc::new(self.schema.project(p)?),
            None => self.schema.clone(),
        };

        // Parquet files of the segments. Spans files of segments that store their resources
        // apart are scanned without the resource columns, which `ExpandExec` puts back; those
        // written before scopes were stored once (scope columns on the span rows) apart from
        // the newer ones, each with its own file schema.
        let mut files: Vec<PartitionedFile> = Vec::new();
        let mut split: Vec<Split> = Vec::new();
        for seg in &self.snapshot.segments {
            let res = if self.table == crate::memtable::T_SPANS { seg.resources() } else { None };
            // Segment ids (in `resource_ref`) are per collector: one lookup per origin.
            let origin = seg.origin.as_ref().map(|o| o.name.as_str());
            let group = res.map(|r| {
                let layout = seg.spans_file_schema();
                let at = match split.iter().position(|g| g.schema == layout && g.origin == origin) {
                    Some(at) => at,
                    None => {
                        split.push(Split {
                            schema: layout,
                            origin,
                            files: Vec::new(),
                            resources: Vec::new(),
                        });
                        split.len() - 1
                    }
                };
                split[at].resources.push((seg.meta.id, r));
                at
            });
            let files_at = seg.origin.as_ref().map_or(&self.snapshot.files_at, |o| &o.files_at);
            for f in seg.meta.files.iter().filter(|f| f.table == table_name) {
                let f = PartitionedFile::new(files_at.path(&f.file), f.bytes);
                match group {
                    Some(g) => split[g].files.push(f),
                    None => files.push(f),
                }
            }
        }
        if let Some(scan) = parquet_scan(
            state,
            (&self.snapshot.files_at.url, files),
            self.schema.clone(),
            projection.cloned(),
            filters,
            limit,
            partitions,
        )
        .await?
        {
            inputs.push(scan);
        }
        for group in split {
            let (cols, wants_resources) = file_projection(&projected, &group.schema)?;
            // Filters on resource columns cannot prune these files; DataFusion applies every
            // filter above the scan anyway.
            let usable: Vec<Expr> = filters
                .iter()
                .filter(|e| e.column_refs().iter().all(|c| group.schema.index_of(&c.name).is_ok()))
                .cloned()
                .collect();
            if let Some(scan) = parquet_scan(
                state,
                (&self.snapshot.files_at.url, group.files),
                group.schema,
                Some(cols),
                &usable,
                limit,
                partitions,
            )
            .await?
            {
                inputs.push(with_resources(scan, &projected, wants_resources, group.resources.into_iter())?);
            }
        }

        // Buffered batches. Buffered spans name their resources like the segments' spans
        // files do.
        let mem = &self.snapshot.memory[self.table];
        if !mem.is_empty() {
            let spans = self.table == crate::memtable::T_SPANS;
            let file_schema = schema::spans_file_schema();
            let (cols, wants_resources) = file_projection(&projected, &file_schema)?;
            let (schema, proj) =
                if spans { (file_schema, Some(cols)) } else { (self.schema.clone(), projection.cloned()) };
            let scan = memory_scan(mem, schema, proj, limit, partitions)?;
            if spans {
                let buffers = self.snapshot.memory_resources.iter().map(|(i, b)| (*i, b));
                inputs.push(with_resources(scan, &projected, wants_resources, buffers)?);
            } else {
                inputs.push(scan);
            }
        }

        if inputs.is_empty() {
            return Ok(Arc::new(EmptyExec::new(projected)));
        }
        UnionExec::try_new(inputs)
    }
}

/// `spans` rows in the segment files' layout (`resource_ref` instead of the resource columns),
/// for search: the spans files of a snapshot's segments that store their resources apart (the
/// snapshot holds no others) and the buffered spans, never joined with their resources.
#[derive(Debug)]
pub(crate) struct FileLayoutSpans {
    pub snapshot: Arc<Snapshot>,
    /// Per segment of the snapshot, in order, the row groups of its spans file to read
    /// (`None`, or no entry: all).
    pub row_groups: Vec<Option<Vec<bool>>>,
}

#[async_trait::async_trait]
impl TableProvider for FileLayoutSpans {
    fn schema(&self) -> SchemaRef {
        schema::spans_file_schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(&self, filters: &[&Expr]) -> DfResult<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let partitions = state.config().target_partitions().max(1);
        let schema = schema::spans_file_schema();
        let files_at = &self.snapshot.files_at;
        // Spans files written before scopes were stored once have the scope columns too,
        // which no projection of this schema names. Row groups the search index rules out are
        // skipped; a file with none left is not read.
        let mut files = Vec::new();
        for (i, s) in self.snapshot.segments.iter().enumerate() {
            let Some(f) = s.meta.file(schema::SPANS) else { continue };
            let mut file = PartitionedFile::new(files_at.path(&f.file), f.bytes);
            if let Some(keep) = self.row_groups.get(i).and_then(Option::as_ref) {
                if !keep.contains(&true) {
                    continue;
                }
                let mut plan = ParquetAccessPlan::new_all(keep.len());
                keep.iter().enumerate().filter(|(_, k)| !**k).for_each(|(i, _)| plan.skip(i));
                file = file.with_extension(plan);
            }
            files.push(file);
        }
        let mut inputs: Vec<Arc<dyn ExecutionPlan>> = Vec::new();
        let proj = projection.cloned();
        let files = (&files_at.url, files);
        if let Some(scan) =
            parquet_scan(state, files, schema.clone(), proj.clone(), filters, limit, partitions).await?
        {
            inputs.push(scan);
        }
        let mem = &self.snapshot.memory[crate::memtable::T_SPANS];
        if !mem.is_empty() {
            inputs.push(memory_scan(mem, schema.clone(), proj, limit, partitions)?);
        }
        match inputs.len() {
            0 => Ok(Arc::new(EmptyExec::new(match projection {
                Some(p) => Arc::new(schema.project(p)?),
                None => schema,
            }))),
            _ => UnionExec::try_new(inputs),
        }
    }
}

/// A scan of buffered batches (schema `schema`), spread over `partitions` partitions.
fn memory_scan(
    mem: &[RecordBatch],
    schema: SchemaRef,
    projection: Option<Vec<usize>>,
    limit: Option<usize>,
    partitions: usize,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    let mut parts: Vec<Vec<RecordBatch>> = vec![Vec::new(); partitions.min(mem.len()).max(1)];
    for (i, b) in mem.iter().enumerate() {
        let n = parts.len();
        parts[i % n].push(b.clone());
    }
    let mut exec = MemorySourceConfig::try_new(&parts, schema, projection)?;
    if let Some(l) = limit {
        exec = exec.with_limit(Some(l));
    }
    Ok(datafusion::datasource::source::DataSourceExec::from_data_source(exec))
}

/// `scan` (spans in the segment files' layout) as rows of `projected`, the resource columns
/// looked up in `resources` — (segment or buffer id, its resources) — when it has any.
fn with_resources<'a>(
    scan: Arc<dyn ExecutionPlan>,
    projected: &SchemaRef,
    wants_resources: bool,
    resources: impl Iterator<Item = (u64, &'a RecordBatch)>,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    let ext = |e: crate::error::StoreError| DataFusionError::External(Box::new(e));
    let lookup = ResourceLookup::new(resources.filter(|_| wants_resources)).map_err(ext)?;
    Ok(Arc::new(ExpandExec::new(scan, projected.clone(), Arc::new(lookup)).map_err(ext)?))
}

/// Spans files of segments with a resources file, of one layout and one origin.
struct Split<'a> {
    /// The files' schema.
    schema: SchemaRef,
    /// The collector the segments come from ([`Origin::name`]; `None`: the store's own).
    origin: Option<&'a str>,
    /// (path, bytes) of each file.
    files: Vec<PartitionedFile>,
    /// (segment id, its resources) of each file's segment.
    resources: Vec<(u64, &'a RecordBatch)>,
}

/// The columns of a spans file layout (`file_schema`) that give the logical `spans` columns of
/// `projected` (`resource_ref` for the resource columns it lacks), and whether any resource
/// column is wanted.
fn file_projection(projected: &SchemaRef, file_schema: &SchemaRef) -> DfResult<(Vec<usize>, bool)> {
    let mut cols: Vec<usize> = Vec::new();
    let mut wants_resources = false;
    for f in projected.fields() {
        let name = if schema::RESOURCE_COLUMNS.contains(&f.name().as_str())
            && file_schema.index_of(f.name()).is_err()
        {
            wants_resources = true;
            schema::RESOURCE_REF
        } else {
            f.name().as_str()
        };
        // Tables other than spans have columns the spans file does not: they never use this.
        if let Ok(i) = file_schema.index_of(name)
            && !cols.contains(&i)
        {
            cols.push(i);
        }
    }
    Ok((cols, wants_resources))
}

/// A Parquet scan of `files` in the object store at `url` (table schema `schema`), spread over `partitions` groups by size,
/// with the filters as a pruning predicate; `None` without files.
async fn parquet_scan(
    state: &dyn Session,
    (url, mut files): (&ObjectStoreUrl, Vec<PartitionedFile>),
    schema: SchemaRef,
    projection: Option<Vec<usize>>,
    filters: &[Expr],
    limit: Option<usize>,
    partitions: usize,
) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
    if files.is_empty() {
        return Ok(None);
    }
    files.sort_by_key(|f| std::cmp::Reverse(f.object_meta.size));
    let mut groups: Vec<(u64, Vec<PartitionedFile>)> =
        (0..partitions.min(files.len())).map(|_| (0, Vec::new())).collect();
    for file in files {
        if let Some(g) = groups.iter_mut().min_by_key(|g| g.0) {
            g.0 += file.object_meta.size;
            g.1.push(file);
        }
    }
    let mut source =
        ParquetSource::new(schema.clone()).with_table_parquet_options(state.table_options().parquet.clone());
    if let Some(pred) = conjunction(filters.iter().cloned()) {
        let df_schema = DFSchema::try_from(schema.as_ref().clone())?;
        let phys = state.create_physical_expr(pred, &df_schema)?;
        source = source.with_predicate(phys);
    }
    let conf = FileScanConfigBuilder::new(url.clone(), Arc::new(source))
        .with_file_groups(groups.into_iter().map(|g| FileGroup::new(g.1)).collect())
        .with_projection_indices(projection)?
        .with_limit(limit)
        .build();
    let format = ParquetFormat::default().with_options(state.table_options().parquet.clone());
    Ok(Some(format.create_physical_plan(state, conf).await?))
}

/// Quotes a string as an SQL literal (`'` doubled).
pub fn sql_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for ch in s.chars() {
        if ch == '\'' {
            out.push('\'');
        }
        out.push(ch);
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn quoting() {
        assert_eq!(super::sql_str("it's"), "'it''s'");
        assert_eq!(super::sql_str(""), "''");
    }
}
