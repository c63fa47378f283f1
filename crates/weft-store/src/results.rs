//! Result tables: rows other parts of weft keep for later SQL (a live query's closed windows),
//! apart from the span engine. Table `NAME` is the Parquet files under
//! `<data-dir>/tables/NAME/`, each written atomically (a `.tmp` file, fsync, rename, fsync of
//! the directory) and named so that they sort oldest first; [`Store::sql`] reads it as
//! `live_NAME`. Every file of a table has the same columns (the first file's). Bounded: past
//! [`MAX_RESULT_ROWS`] rows the oldest files of the table are deleted (the span store's size
//! and age retention does not apply to them). A read-only store reads them too; a table whose
//! files cannot be read is left out of SQL (logged), the others stay. The temp file of a write
//! a crash interrupted is deleted by the table's next write.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use datafusion::prelude::SessionContext;

use crate::error::{Result, StoreError, io_err};
use crate::{RecordBatch, Store};

/// The directory (under the data directory) holding the result tables.
pub const TABLES_DIR: &str = "tables";
/// SQL name prefix of a result table (`NAME` is read as `live_NAME`).
pub const SQL_PREFIX: &str = "live_";
/// Rows a result table keeps at most: the oldest files go first past it.
pub const MAX_RESULT_ROWS: u64 = 1_000_000;

/// Serialises writers (file names and retention).
static WRITE: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
static SEQ: AtomicU64 = AtomicU64::new(0);

/// Checks a result table's name: `[a-z0-9_]{1,64}`; the error says what is wrong.
pub fn check_name(name: &str) -> std::result::Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "result table name {name:?} is invalid: use 1 to 64 of a-z, 0-9 and _ (it is read as {SQL_PREFIX}NAME)"
        ))
    }
}

fn table_dir(data: &Path, name: &str) -> PathBuf {
    data.join(TABLES_DIR).join(name)
}

/// The table's Parquet files, oldest first.
fn files(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err("list", dir)(e)),
    };
    let mut out = Vec::new();
    for e in rd {
        let p = e.map_err(io_err("list", dir))?.path();
        if p.extension().is_some_and(|x| x == "parquet") {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

fn footer(path: &Path) -> Result<ParquetRecordBatchReaderBuilder<File>> {
    let file = File::open(path).map_err(io_err("open", path))?;
    ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|source| StoreError::Parquet { path: path.to_owned(), source })
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_err("fsync", dir))
}

/// Registers every result table of `data` in `ctx` as `live_NAME`.
pub(crate) fn register(data: &Path, ctx: &SessionContext) -> Result<()> {
    let root = data.join(TABLES_DIR);
    let Ok(rd) = std::fs::read_dir(&root) else { return Ok(()) };
    for e in rd {
        let e = e.map_err(io_err("list", &root))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if check_name(&name).is_err() {
            continue;
        }
        // an unreadable table is left out (and said so), the span tables and the others stay
        let table = schema_in(&e.path()).and_then(|schema| {
            let Some(schema) = schema else { return Ok(None) };
            let url = ListingTableUrl::parse(e.path().to_string_lossy())?;
            let opts =
                ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
            let config = ListingTableConfig::new(url).with_listing_options(opts).with_schema(schema);
            Ok(Some(ListingTable::try_new(config)?))
        });
        match table {
            Ok(Some(t)) => {
                ctx.register_table(format!("{SQL_PREFIX}{name}"), Arc::new(t))?;
            }
            Ok(None) => {}
            Err(err) => tracing::warn!(table = %name, error = %err, "result table left out of SQL"),
        }
    }
    Ok(())
}

/// The columns of a table's first file (`None`: no file).
fn schema_in(dir: &Path) -> Result<Option<SchemaRef>> {
    match files(dir)?.first() {
        Some(f) => Ok(Some(footer(f)?.schema().clone())),
        None => Ok(None),
    }
}

impl Store {
    /// The columns of result table `name` (`None` when it holds no file yet).
    pub fn result_table_schema(&self, name: &str) -> Result<Option<SchemaRef>> {
        check_name(name).map_err(StoreError::ResultTable)?;
        schema_in(&table_dir(self.dir(), name))
    }

    /// Appends `batch` to result table `name` as one new Parquet file (durable when this
    /// returns), then deletes the table's oldest files past [`MAX_RESULT_ROWS`] rows. The
    /// batch must have the columns of the table's files.
    pub fn append_result_rows(&self, name: &str, batch: &RecordBatch) -> Result<()> {
        self.append_capped(name, batch, MAX_RESULT_ROWS)
    }

    fn append_capped(&self, name: &str, batch: &RecordBatch, max_rows: u64) -> Result<()> {
        check_name(name).map_err(StoreError::ResultTable)?;
        if self.config().read_only {
            return Err(StoreError::ReadOnly);
        }
        let dir = table_dir(self.dir(), name);
        let _guard = WRITE.lock();
        if let Some(have) = schema_in(&dir)?
            && have.fields() != batch.schema().fields()
        {
            return Err(StoreError::ResultTable(format!(
                "result table {name} holds other columns ({}); keep these rows under another name",
                have.fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>().join(", ")
            )));
        }
        std::fs::create_dir_all(&dir).map_err(io_err("create", &dir))?;
        // writers hold the lock: a temp file here is a write a crash interrupted
        for e in std::fs::read_dir(&dir).map_err(io_err("list", &dir))?.flatten() {
            if e.path().extension().is_some_and(|x| x == "tmp") {
                std::fs::remove_file(e.path()).map_err(io_err("remove", e.path()))?;
            }
        }
        let stem = format!(
            "{:020}-{:08}",
            weft_model::time::now_unix_nanos(),
            SEQ.fetch_add(1, Ordering::Relaxed) % 100_000_000
        );
        let tmp = dir.join(format!("{stem}.tmp"));
        let path = dir.join(format!("{stem}.parquet"));
        let pq = |source| StoreError::Parquet { path: tmp.clone(), source };
        let file = File::create(&tmp).map_err(io_err("create", &tmp))?;
        let mut w = ArrowWriter::try_new(file, batch.schema(), None).map_err(pq)?;
        w.write(batch).map_err(pq)?;
        let file = w.into_inner().map_err(pq)?;
        file.sync_all().map_err(io_err("fsync", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(io_err("rename", &tmp))?;
        sync_dir(&dir)?;
        let all = files(&dir)?;
        let mut rows = Vec::with_capacity(all.len());
        for f in &all {
            rows.push(footer(f)?.metadata().file_metadata().num_rows().max(0) as u64);
        }
        let mut total: u64 = rows.iter().sum();
        for (f, n) in all.iter().zip(rows) {
            // the newest file stays, whatever its size
            if total <= max_rows || f == &path {
                break;
            }
            std::fs::remove_file(f).map_err(io_err("remove", f))?;
            total -= n;
            tracing::info!(table = name, file = %f.display(), rows = n, "result table past its row cap: oldest file deleted");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;
    use crate::StoreConfig;

    fn batch(keys: &[&str], n: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("kind", DataType::Utf8, true),
            Field::new("count", DataType::Int64, true),
        ]));
        let counts: Vec<i64> = keys.iter().map(|_| n).collect();
        RecordBatch::try_new(
            schema,
            vec![Arc::new(StringArray::from(keys.to_vec())), Arc::new(Int64Array::from(counts))],
        )
        .expect("batch")
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("run_1").is_ok());
        for bad in ["", "Run", "a-b", "a.b", "../x", &"x".repeat(65)] {
            let e = check_name(bad).expect_err(bad);
            assert!(e.contains("a-z, 0-9 and _"), "{e}");
        }
    }

    #[tokio::test]
    async fn rows_are_read_by_sql_also_read_only_and_after_reopen() {
        let tmp = tempfile::tempdir().expect("tmp");
        let store = Store::open(StoreConfig::new(tmp.path())).expect("open");
        store.append_result_rows("t1", &batch(&["read", "write"], 2)).expect("append");
        store.append_result_rows("t1", &batch(&["sync"], 5)).expect("append");
        let other = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, true)])),
            vec![Arc::new(Int64Array::from(vec![1]))],
        )
        .expect("batch");
        let e = store.append_result_rows("t1", &other).expect_err("other columns");
        assert!(e.to_string().contains("kind, count"), "{e}");
        assert!(matches!(store.append_result_rows("T", &other), Err(StoreError::ResultTable(_))));
        let sum = |s: &Store| {
            let s = s.clone();
            async move {
                let r = s.sql("SELECT sum(count) AS n, count(*) AS c FROM live_t1", 10).await.expect("sql");
                let b = &r.batches[0];
                let col = |i: usize| b.column(i).as_any().downcast_ref::<Int64Array>().expect("i64").value(0);
                (col(0), col(1))
            }
        };
        assert_eq!(sum(&store).await, (9, 3));
        store.close().expect("close");
        drop(store);
        let mut cfg = StoreConfig::new(tmp.path());
        cfg.read_only = true;
        let ro = Store::open(cfg).expect("read-only");
        assert_eq!(sum(&ro).await, (9, 3));
        // a table whose file cannot be read is left out; the others and the span tables stay
        std::fs::create_dir_all(tmp.path().join("tables/broken")).expect("dir");
        std::fs::write(tmp.path().join("tables/broken/0.parquet"), b"not parquet").expect("file");
        assert_eq!(sum(&ro).await, (9, 3));
        ro.sql("SELECT count(*) FROM spans", 1).await.expect("span tables");
        let e = ro.sql("SELECT * FROM live_broken", 1).await.expect_err("left out");
        assert!(e.to_string().contains("live_broken"), "{e}");
        assert!(matches!(ro.append_result_rows("t1", &batch(&["x"], 1)), Err(StoreError::ReadOnly)));
    }

    #[test]
    fn the_oldest_files_go_past_the_row_cap() {
        let tmp = tempfile::tempdir().expect("tmp");
        let store = Store::open(StoreConfig::new(tmp.path())).expect("open");
        for n in 1..=4 {
            store.append_capped("capped", &batch(&["a", "b"], n), 5).expect("append");
        }
        // 8 rows written, 5 kept at most: the two oldest files went, the newest ones stay
        let dir = table_dir(store.dir(), "capped");
        let left = files(&dir).expect("files");
        assert_eq!(left.len(), 2, "{left:?}");
        let newest = footer(&left[1]).expect("footer").build().expect("reader").next().expect("batch");
        let counts =
            newest.expect("batch").column(1).as_any().downcast_ref::<Int64Array>().expect("i64").value(0);
        assert_eq!(counts, 4);
        // a single file larger than the cap is kept; an interrupted write's temp file goes
        std::fs::write(dir.join("00000000000000000001-00000000.tmp"), b"torn").expect("tmp");
        store.append_capped("capped", &batch(&["a", "b", "c", "d", "e", "f"], 9), 5).expect("append");
        let left: Vec<_> = std::fs::read_dir(&dir).expect("dir").flatten().map(|e| e.path()).collect();
        assert_eq!(left.len(), 1, "{left:?}");
    }
}
