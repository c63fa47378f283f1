//! A kept live query's windows as rows of a store result table: the columns' names and types,
//! the values (a sum past Int64 is null, a histogram a list of buckets), and SQL over them
//! through the store (`live_NAME`, `unnest` of a histogram).

use weft_probe::agg::{KeyValue, Output};
use weft_query::merge::Cell;
use weft_server::live_keep::{KeptWindow, batch, plain, schema};
use weft_store::datafusion::arrow::array::{Array, AsArray};
use weft_store::datafusion::arrow::datatypes::{
    Float64Type, Int32Type, Int64Type, TimestampNanosecondType, UInt64Type,
};
use weft_store::{Store, StoreConfig, render};

#[test]
fn output_names_become_plain_columns() {
    assert_eq!(plain("count(*)"), "count");
    assert_eq!(plain("sum(len)"), "sum_len");
    assert_eq!(plain("Hist(len)"), "hist_len");
    assert_eq!(plain("p99"), "p99");
}

#[tokio::test]
async fn windows_become_typed_rows_sql_reads() {
    let cat = weft_query::ListCatalog::new().probe("blocker.write", "offset:u64,len:u64,path:str");
    let sql =
        "SELECT path, count(*), avg(len), hist(len) AS h, count(*) FROM tp('blocker.write') GROUP BY path";
    let plan = weft_query::plan(sql, &cat).expect("plan");
    let schema = schema(&plan);
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(
        names,
        [
            "window_start",
            "window_end",
            "path",
            "count",
            "avg_len",
            "h",
            "count_2",
            "agents_contributing",
            "agents_missing"
        ]
    );
    let key = |s: &str| Cell::Key(KeyValue::Str(s.as_bytes().to_vec()));
    let int = |v: i128| Cell::Value(Output::Int(v));
    let w = |start: u64, rows: Vec<Vec<Cell>>| KeptWindow {
        start_ns: start,
        end_ns: start + 10,
        rows,
        agents: 2,
        missing: 1,
    };
    let windows = [
        w(
            100,
            vec![
                vec![
                    key("/a"),
                    int(3),
                    Cell::Value(Output::Float(1.5)),
                    Cell::Value(Output::Buckets(vec![(0, 1), (3, 2)])),
                    int(3),
                ],
                vec![key("/b"), int(i128::MAX), Cell::Value(Output::Null), Cell::Value(Output::Null), int(1)],
            ],
        ),
        w(110, vec![]),
        w(
            120,
            vec![vec![
                key("/a"),
                int(1),
                Cell::Value(Output::Float(8.0)),
                Cell::Value(Output::Buckets(vec![(3, 1)])),
                int(1),
            ]],
        ),
    ];
    let b = batch(&plan, &schema, &windows).expect("batch");
    assert_eq!(b.num_rows(), 3);
    let end = b.column(1).as_primitive::<TimestampNanosecondType>();
    assert_eq!((end.value(0), end.value(1), end.value(2)), (110, 110, 130));
    assert_eq!(b.column(2).as_string::<i32>().value(1), "/b");
    let count = b.column(3).as_primitive::<Int64Type>();
    assert_eq!(count.value(0), 3);
    assert!(count.is_null(1), "past Int64's range: null");
    assert_eq!(b.column(4).as_primitive::<Float64Type>().value(0), 1.5);
    let h = b.column(5).as_list::<i32>();
    assert!(h.is_null(1));
    let first = h.value(0);
    let pairs = first.as_struct();
    assert_eq!(pairs.column(0).as_primitive::<Int32Type>().values(), &[0, 3]);
    assert_eq!(pairs.column(1).as_primitive::<UInt64Type>().values(), &[1, 2]);
    assert_eq!(b.column(7).as_primitive::<Int64Type>().value(0), 2);
    assert_eq!(b.column(8).as_primitive::<Int64Type>().value(1), 1);

    // through the store: one row per bucket with unnest, summed over the windows
    let tmp = tempfile::tempdir().expect("tmp");
    let store = Store::open(StoreConfig::new(tmp.path())).expect("open");
    store.append_result_rows("writes", &b).expect("append");
    let r = store
        .sql(
            "SELECT b['bucket'] AS bucket, sum(b['count']) AS n FROM \
             (SELECT unnest(h) AS b FROM live_writes WHERE path = '/a') GROUP BY 1 ORDER BY 1",
            100,
        )
        .await
        .expect("sql");
    assert_eq!(render::to_json(&r.schema, &r.batches)["rows"], serde_json::json!([[0, 1], [3, 3]]));
}
