//! From SQL text to a [`LivePlan`]: parse (sqlparser, PostgreSQL dialect, plus weft's own
//! trailing `INTERVAL`/`DURATION` clause), resolve columns against the sources' schemas, type
//! check, and split into the three levels.

use crate::source::{CONTEXT, Catalog, Source, Type, uprobe_fields};
use sqlparser::ast::{
    BinaryOperator, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, GroupByExpr, JoinConstraint,
    JoinOperator, LimitClause, OrderByKind, SelectItem, SetExpr, Spanned, Statement, TableFactor,
    UnaryOperator, Value,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::tokenizer::{Token, Tokenizer};
use std::time::Duration;
use weft_probe::agg::{AggKind, KEY_STR_MAX, Linear};
use weft_probe::query::{CmpOp, Const, Ctx, Filter, Operand};

/// An invalid query: where (1-based line and column of the offending token) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct QueryError {
    pub line: u64,
    pub column: u64,
    pub message: String,
}

fn err_at(span: sqlparser::tokenizer::Span, message: impl Into<String>) -> QueryError {
    let (line, column) = if span.start.line == 0 { (1, 1) } else { (span.start.line, span.start.column) };
    QueryError { line, column, message: message.into() }
}

/// Most bytes of upstream fields a happened-before join carries in a request's baggage.
pub const BAGGAGE_MAX: usize = 64;
/// Default per-thread group table size of a probe-level plan.
pub const DEFAULT_CAPACITY: usize = 1024;

/// A resolved column: which source, its name and type, and how the probe reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Col {
    pub side: usize,
    pub name: String,
    pub ty: Type,
    pub operand: Operand,
}

/// One aggregate of the query.
#[derive(Debug, Clone, PartialEq)]
pub struct Agg {
    pub kind: AggKind,
    pub input: Option<Col>,
    /// As written (`sum(len)`), for EXPLAIN and result headers.
    pub text: String,
}

/// What an output column shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutCol {
    /// Group key `i`.
    Key(usize),
    /// Aggregate `i`.
    Agg(usize),
}

/// The reporting window: results every `interval`, for `duration` (either may be absent: no
/// interval → one window for the whole duration; no duration → runs until stopped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Window {
    pub interval: Option<Duration>,
    pub duration: Option<Duration>,
}

/// A happened-before join: `upstream`'s `carried` columns travel in the request's baggage to
/// `downstream`, where the aggregate runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Join {
    pub upstream: usize,
    pub downstream: usize,
    pub carried: Vec<Col>,
}

/// The two probe-level plans of a happened-before join ([`LivePlan::join_plans`]).
#[derive(Debug, Clone, PartialEq)]
pub struct JoinPlans {
    /// Packs the carried columns into the request's baggage (its partial counts the packs).
    pub upstream: weft_probe::query::Plan,
    /// The query's aggregate, grouped by the carried columns read from the baggage.
    pub downstream: weft_probe::query::Plan,
}

/// A checked, planned live query.
#[derive(Debug, Clone, PartialEq)]
pub struct LivePlan {
    pub explain: bool,
    pub sources: Vec<(Source, Option<String>)>,
    pub join: Option<Join>,
    /// One filter per source (conjuncts of WHERE that name only that source).
    pub filters: Vec<Filter>,
    pub keys: Vec<Col>,
    pub aggs: Vec<Agg>,
    /// Output columns: name and content.
    pub outputs: Vec<(String, OutCol)>,
    /// Top-N: output column index, descending?
    pub order: Option<(usize, bool)>,
    pub limit: Option<usize>,
    pub window: Window,
    pub capacity: usize,
}

impl LivePlan {
    /// The side the aggregate runs at (the downstream source of a join, else the only one).
    pub fn aggregating_side(&self) -> usize {
        self.join.as_ref().map_or(0, |j| j.downstream)
    }

    /// The probe-level plan for weft-probe's in-process interpreter, when the query is a single
    /// weft-probe source (joins and kernel/uprobe sources run elsewhere).
    pub fn probe_plan(&self) -> Option<weft_probe::query::Plan> {
        match self.source_plan()? {
            (Source::Probe(_), plan) => Some(plan),
            _ => None,
        }
    }

    /// The probe-level plan of a query with one source (no join), of any kind, with that
    /// source: for weft-probe tracepoints `tracepoint` is its name, for kernel tracepoints and
    /// uprobes the source as written (`tracepoint('sched:sched_switch')`); fields are the
    /// tracepoint's, or `arg0`-`arg5`, `retval` and `latency` at uprobes.
    pub fn source_plan(&self) -> Option<(Source, weft_probe::query::Plan)> {
        if self.join.is_some() || self.sources.len() != 1 {
            return None;
        }
        let source = self.sources[0].0.clone();
        let name = match &source {
            Source::Probe(name) => name.clone(),
            other => other.to_string(),
        };
        Some((
            source,
            weft_probe::query::Plan {
                tracepoint: name,
                filter: self.filters[0].clone(),
                keys: self.keys.iter().map(|k| k.operand.clone()).collect(),
                aggs: self.agg_specs(),
                capacity: self.capacity,
                carry: Vec::new(),
            },
        ))
    }

    /// The aggregates as the probe level runs them.
    fn agg_specs(&self) -> Vec<weft_probe::query::AggSpec> {
        self.aggs
            .iter()
            .map(|a| weft_probe::query::AggSpec {
                kind: a.kind,
                input: a.input.as_ref().map(|c| c.operand.clone()),
            })
            .collect()
    }

    /// The probe-level plans of a happened-before join of two weft-probe sources: the upstream
    /// one packs the carried columns into the request's baggage (member `<tracepoint>.<column>`;
    /// with none carried, a mark `<tracepoint>` holding the pid) and counts what it packed; the
    /// downstream one aggregates, reading the carried group keys from the baggage and skipping
    /// events whose request carries no pack. Its partials have the query's key order.
    pub fn join_plans(&self) -> Option<JoinPlans> {
        let j = self.join.as_ref()?;
        let (Source::Probe(up), Source::Probe(down)) =
            (&self.sources[j.upstream].0, &self.sources[j.downstream].0)
        else {
            return None;
        };
        let member = |c: &Col| format!("{up}.{}", c.name);
        let mut carry: Vec<(String, Operand)> =
            j.carried.iter().map(|c| (member(c), c.operand.clone())).collect();
        let mut filter = self.filters[j.downstream].clone();
        if carry.is_empty() {
            carry.push((up.clone(), Operand::Ctx(Ctx::Pid)));
            let mark = Filter::Cmp(Operand::Baggage(up.clone()), CmpOp::Ne, Const::Str(String::new()));
            filter = match filter {
                Filter::True => mark,
                f => Filter::And(Box::new(mark), Box::new(f)),
            };
        }
        let upstream = weft_probe::query::Plan {
            tracepoint: up.clone(),
            filter: self.filters[j.upstream].clone(),
            keys: Vec::new(),
            aggs: vec![weft_probe::query::AggSpec { kind: AggKind::Count, input: None }],
            capacity: 16,
            carry,
        };
        let downstream = weft_probe::query::Plan {
            tracepoint: down.clone(),
            filter,
            keys: self
                .keys
                .iter()
                .map(|k| if k.side == j.upstream { Operand::Baggage(member(k)) } else { k.operand.clone() })
                .collect(),
            aggs: self.agg_specs(),
            capacity: self.capacity,
            carry: Vec::new(),
        };
        Some(JoinPlans { upstream, downstream })
    }

    /// The aggregate kinds, in order (what partials carry).
    pub fn kinds(&self) -> Vec<AggKind> {
        self.aggs.iter().map(|a| a.kind).collect()
    }
}

/// Parse, check and plan `sql` against `catalog`.
pub fn plan(sql: &str, catalog: &dyn Catalog) -> Result<LivePlan, QueryError> {
    let (explain, body, window) = split_clauses(sql)?;
    let dialect = PostgreSqlDialect {};
    let stmts = sqlparser::parser::Parser::parse_sql(&dialect, &body).map_err(|e| parser_error(e, &body))?;
    let [Statement::Query(q)] = stmts.as_slice() else {
        return Err(QueryError { line: 1, column: 1, message: "expected one SELECT".into() });
    };
    let SetExpr::Select(sel) = q.body.as_ref() else {
        return Err(err_at(q.body.span(), "expected a plain SELECT (no UNION, VALUES, …)"));
    };
    if q.with.is_some() {
        return Err(err_at(q.span(), "WITH is not supported in live queries"));
    }
    if sel.having.is_some() || sel.distinct.is_some() {
        return Err(err_at(sel.span(), "HAVING and DISTINCT are not supported in live queries"));
    }

    // FROM: one source, or two joined ON a -> b
    let [from] = sel.from.as_slice() else {
        return Err(err_at(sel.span(), "FROM needs exactly one source (or one happened-before JOIN)"));
    };
    let mut b = Builder { catalog, sources: Vec::new(), schemas: Vec::new() };
    b.add_source(&from.relation)?;
    let mut join = None;
    match from.joins.as_slice() {
        [] => {}
        [j] => {
            b.add_source(&j.relation)?;
            let c = match &j.join_operator {
                JoinOperator::Join(c) | JoinOperator::Inner(c) => c,
                _ => {
                    return Err(err_at(
                        j.relation.span(),
                        "only JOIN … ON a -> b (happened before) is supported",
                    ));
                }
            };
            let JoinConstraint::On(on) = c else {
                return Err(err_at(
                    j.relation.span(),
                    "a happened-before join needs ON upstream -> downstream",
                ));
            };
            let Expr::BinaryOp { left, op: BinaryOperator::Arrow, right } = on else {
                return Err(err_at(
                    on.span(),
                    "the join condition must be `upstream -> downstream` (happened before)",
                ));
            };
            let up = b.side_named(left)?;
            let down = b.side_named(right)?;
            if up == down {
                return Err(err_at(on.span(), "a source cannot happen before itself"));
            }
            join = Some(Join { upstream: up, downstream: down, carried: Vec::new() });
        }
        [_, extra, ..] => return Err(err_at(extra.relation.span(), "at most one happened-before JOIN")),
    }
    let agg_side = join.as_ref().map_or(0, |j| j.downstream);

    // WHERE: conjuncts per side
    let mut filters = vec![Filter::True; b.sources.len()];
    if let Some(w) = &sel.selection {
        let mut conj = Vec::new();
        flatten_and(w, &mut conj);
        for c in conj {
            let (side, f) = b.filter(c)?;
            let slot = &mut filters[side];
            *slot = match std::mem::replace(slot, Filter::True) {
                Filter::True => f,
                prev => Filter::And(Box::new(prev), Box::new(f)),
            };
        }
    }

    // GROUP BY
    let mut keys: Vec<Col> = Vec::new();
    let group_exprs: &[Expr] = match &sel.group_by {
        GroupByExpr::Expressions(e, mods) if mods.is_empty() => e,
        GroupByExpr::Expressions(..) | GroupByExpr::All(_) => {
            return Err(err_at(sel.span(), "GROUP BY takes a list of columns"));
        }
    };
    for g in group_exprs {
        let g = match g {
            Expr::Value(v) => match &v.value {
                Value::Number(n, _) => {
                    let i: usize =
                        n.parse().map_err(|_| err_at(g.span(), "GROUP BY position must be a number"))?;
                    match sel.projection.get(i.wrapping_sub(1)) {
                        Some(SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. }) => e,
                        _ => return Err(err_at(g.span(), format!("GROUP BY {i}: no such SELECT item"))),
                    }
                }
                _ => return Err(err_at(g.span(), "GROUP BY takes columns")),
            },
            e => e,
        };
        let col = b.column(g)?;
        if keys.iter().any(|k| k.side == col.side && k.name == col.name) {
            continue;
        }
        keys.push(col);
    }
    if keys.len() > weft_probe::query::MAX_KEYS {
        return Err(err_at(sel.span(), format!("at most {} GROUP BY keys", weft_probe::query::MAX_KEYS)));
    }
    // a join's upstream keys are carried in baggage
    if let Some(j) = &mut join {
        j.carried = keys.iter().filter(|k| k.side == j.upstream).cloned().collect();
        let bytes: usize = j.carried.iter().map(|c| if c.ty.text() { 2 + KEY_STR_MAX } else { 9 }).sum();
        if bytes > BAGGAGE_MAX {
            return Err(err_at(
                sel.span(),
                format!("the upstream keys take up to {bytes} bytes of baggage, at most {BAGGAGE_MAX}"),
            ));
        }
    }

    // SELECT
    let mut aggs: Vec<Agg> = Vec::new();
    let mut outputs = Vec::new();
    for item in &sel.projection {
        let (e, alias) = match item {
            SelectItem::UnnamedExpr(e) => (e, None),
            SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.value.clone())),
            other => return Err(err_at(other.span(), "SELECT lists group keys and aggregates (no *)")),
        };
        let out = if let Expr::Function(_) = e {
            let a = b.aggregate(e, agg_side)?;
            let name = alias.unwrap_or_else(|| a.text.clone());
            aggs.push(a);
            (name, OutCol::Agg(aggs.len() - 1))
        } else {
            let c = b.column(e)?;
            let Some(i) = keys.iter().position(|k| k.side == c.side && k.name == c.name) else {
                return Err(err_at(e.span(), format!("`{e}` is neither aggregated nor in GROUP BY")));
            };
            (alias.unwrap_or_else(|| e.to_string()), OutCol::Key(i))
        };
        outputs.push(out);
    }
    if aggs.is_empty() {
        return Err(err_at(
            sel.span(),
            "a live query needs at least one aggregate (count(*), sum(x), hist(x), …)",
        ));
    }
    if aggs.len() > weft_probe::query::MAX_AGGS {
        return Err(err_at(sel.span(), format!("at most {} aggregates", weft_probe::query::MAX_AGGS)));
    }

    // ORDER BY … LIMIT n: top-N at the cluster level
    let mut order = None;
    if let Some(ob) = &q.order_by {
        let OrderByKind::Expressions(exprs) = &ob.kind else {
            return Err(err_at(q.span(), "ORDER BY takes one output column"));
        };
        let [o] = exprs.as_slice() else {
            return Err(err_at(q.span(), "ORDER BY takes one output column"));
        };
        let text = o.expr.to_string();
        let idx = match &o.expr {
            Expr::Value(v) => match &v.value {
                Value::Number(n, _) => {
                    n.parse::<usize>().ok().and_then(|i| i.checked_sub(1)).filter(|i| *i < outputs.len())
                }
                _ => None,
            },
            _ => outputs.iter().position(|(name, _)| *name == text).or_else(|| {
                outputs.iter().position(|(_, c)| matches!(c, OutCol::Agg(i) if aggs[*i].text == text))
            }),
        };
        let Some(idx) = idx else {
            return Err(err_at(o.expr.span(), format!("ORDER BY `{text}`: not an output column")));
        };
        order = Some((idx, o.options.asc == Some(false)));
    }
    let mut limit = None;
    if let Some(lc) = &q.limit_clause {
        let LimitClause::LimitOffset { limit: Some(l), offset: None, limit_by } = lc else {
            return Err(err_at(q.span(), "only LIMIT n is supported"));
        };
        if !limit_by.is_empty() {
            return Err(err_at(l.span(), "only LIMIT n is supported"));
        }
        let n = match l {
            Expr::Value(v) => match &v.value {
                Value::Number(n, _) => n.parse::<usize>().ok(),
                _ => None,
            },
            _ => None,
        };
        limit = Some(n.filter(|n| *n > 0).ok_or_else(|| err_at(l.span(), "LIMIT takes a positive integer"))?);
    }

    Ok(LivePlan {
        explain,
        sources: b.sources,
        join,
        filters,
        keys,
        aggs,
        outputs,
        order,
        limit,
        window,
        capacity: DEFAULT_CAPACITY,
    })
}

/// sqlparser's error with its position (`at Line: l, Column: c`), or the end of the input
/// when it has none (an unexpected end).
fn parser_error(e: sqlparser::parser::ParserError, body: &str) -> QueryError {
    let msg = e.to_string();
    let num_after = |tag: &str| -> Option<u64> {
        let i = msg.find(tag)? + tag.len();
        msg[i..].chars().take_while(|c| c.is_ascii_digit()).collect::<String>().parse().ok()
    };
    let end_line = 1 + body.matches('\n').count() as u64;
    let end_col = body.rsplit('\n').next().map_or(0, |l| l.chars().count()) as u64 + 1;
    let (line, column) = match (num_after("Line: "), num_after("Column: ")) {
        (Some(l), Some(c)) => (l, c),
        _ => (end_line, end_col),
    };
    let message =
        msg.split(" at Line: ").next().unwrap_or(&msg).trim_start_matches("sql parser error: ").to_string();
    QueryError { line, column, message }
}

/// Split off a leading `EXPLAIN` and the trailing `INTERVAL d` / `DURATION d` clauses (weft's
/// own syntax, not SQL's); returns the SELECT text for sqlparser.
fn split_clauses(sql: &str) -> Result<(bool, String, Window), QueryError> {
    let dialect = PostgreSqlDialect {};
    let toks = Tokenizer::new(&dialect, sql).tokenize_with_location().map_err(|e| QueryError {
        line: e.location.line.max(1),
        column: e.location.column.max(1),
        message: e.message,
    })?;
    let words: Vec<_> = toks.iter().filter(|t| !matches!(t.token, Token::Whitespace(_))).collect();
    let offset = |loc: sqlparser::tokenizer::Location| -> usize {
        let mut line = 1u64;
        let mut col = 1u64;
        for (i, ch) in sql.char_indices() {
            if line == loc.line && col == loc.column {
                return i;
            }
            if ch == '\n' {
                line += 1;
                col = 1;
            } else {
                col += 1;
            }
        }
        sql.len()
    };
    let is_word = |t: &Token, w: &str| matches!(t, Token::Word(x) if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w));
    // EXPLAIN is blanked out rather than cut, so that sqlparser's positions are the query's
    let mut blank = 0..0;
    let mut explain = false;
    if let Some(first) = words.first()
        && is_word(&first.token, "explain")
    {
        explain = true;
        let start = offset(first.span.start);
        blank = start..start + "explain".len();
    }
    let mut depth = 0i32;
    let mut cut = None;
    for (i, t) in words.iter().enumerate() {
        match &t.token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            tok if depth == 0 && (is_word(tok, "interval") || is_word(tok, "duration")) => {
                cut = Some(i);
                break;
            }
            _ => {}
        }
    }
    let mut window = Window::default();
    let end = match cut {
        None => sql.len(),
        Some(i) => {
            let end = offset(words[i].span.start);
            let mut j = i;
            while j < words.len() {
                let kw = &words[j];
                let slot = if is_word(&kw.token, "interval") {
                    &mut window.interval
                } else if is_word(&kw.token, "duration") {
                    &mut window.duration
                } else if matches!(kw.token, Token::SemiColon | Token::EOF) {
                    j += 1;
                    continue;
                } else {
                    return Err(err_at(
                        kw.span,
                        format!("unexpected `{}` after the window clause", kw.token),
                    ));
                };
                if slot.is_some() {
                    return Err(err_at(kw.span, format!("{} given twice", kw.token)));
                }
                let (d, used) = duration_at(&words[j + 1..]).map_err(|m| err_at(kw.span, m))?;
                *slot = Some(d);
                j += 1 + used;
            }
            end
        }
    };
    if let (Some(i), Some(d)) = (window.interval, window.duration)
        && i > d
    {
        return Err(err_at(words[cut.unwrap_or(0)].span, "INTERVAL is longer than DURATION"));
    }
    let body: String = sql
        .get(..end)
        .unwrap_or("")
        .char_indices()
        .map(|(i, c)| if blank.contains(&i) { ' ' } else { c })
        .collect();
    Ok((explain, body, window))
}

/// A duration written `5s`, `250ms`, `1m`, or `'5s'`; returns it and the tokens used.
fn duration_at(toks: &[&sqlparser::tokenizer::TokenWithSpan]) -> Result<(Duration, usize), String> {
    let bad = || "expected a duration such as 1s, 250ms, 5m (units ns, us, ms, s, m, h)".to_string();
    let (text, used) = match toks {
        [a, b, ..]
            if matches!((&a.token, &b.token), (Token::Number(..), Token::Word(_)))
                && a.span.end == b.span.start =>
        {
            (format!("{}{}", a.token, b.token), 2)
        }
        [a, ..] => match &a.token {
            Token::SingleQuotedString(s) => (s.clone(), 1),
            Token::Number(n, _) => (n.clone(), 1),
            _ => return Err(bad()),
        },
        [] => return Err(bad()),
    };
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().map_err(|_| bad())?;
    let ns = match unit.trim() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" | "" => 1e9,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        _ => return Err(bad()),
    };
    let total = v * ns;
    if !(1e6..=7.0 * 86400e9).contains(&total) {
        return Err("a window lasts from 1ms to 7 days".into());
    }
    Ok((Duration::from_nanos(total as u64), used))
}

fn flatten_and<'a>(e: &'a Expr, out: &mut Vec<&'a Expr>) {
    match e {
        Expr::BinaryOp { left, op: BinaryOperator::And, right } => {
            flatten_and(left, out);
            flatten_and(right, out);
        }
        Expr::Nested(inner) if matches!(**inner, Expr::BinaryOp { op: BinaryOperator::And, .. }) => {
            flatten_and(inner, out)
        }
        _ => out.push(e),
    }
}

struct Builder<'c> {
    catalog: &'c dyn Catalog,
    sources: Vec<(Source, Option<String>)>,
    schemas: Vec<Vec<(String, Type)>>,
}

fn string_arg(a: &FunctionArg) -> Option<String> {
    match a {
        FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(v))) => match &v.value {
            Value::SingleQuotedString(s) => Some(s.clone()),
            _ => None,
        },
        _ => None,
    }
}

impl Builder<'_> {
    fn add_source(&mut self, t: &TableFactor) -> Result<(), QueryError> {
        let TableFactor::Table { name, alias, args, .. } = t else {
            return Err(err_at(
                t.span(),
                "FROM takes tp('…'), tracepoint('…'), uprobe('…', '…') or uretprobe('…', '…')",
            ));
        };
        let Some(args) = args else {
            return Err(err_at(
                t.span(),
                format!("`{name}` is not a live source: use tp('{name}') for a weft-probe tracepoint"),
            ));
        };
        let strs: Option<Vec<String>> = args.args.iter().map(string_arg).collect();
        let Some(strs) = strs else { return Err(err_at(t.span(), "source arguments are quoted strings")) };
        let f = name.to_string().to_ascii_lowercase();
        let (source, schema) = match (f.as_str(), strs.as_slice()) {
            ("tp" | "probe", [n]) => {
                let fields = self.catalog.probe_fields(n).ok_or_else(|| {
                    err_at(t.span(), format!("no weft-probe tracepoint named '{n}' is known"))
                })?;
                (Source::Probe(n.clone()), fields)
            }
            ("tracepoint", [n]) => {
                let Some((sys, ev)) = n.split_once(':') else {
                    return Err(err_at(
                        t.span(),
                        format!("kernel tracepoints are named 'system:event', not '{n}'"),
                    ));
                };
                let fields = self
                    .catalog
                    .kernel_fields(sys, ev)
                    .ok_or_else(|| err_at(t.span(), format!("no kernel tracepoint '{n}' is known")))?;
                (Source::Kernel { system: sys.into(), event: ev.into() }, fields)
            }
            ("uprobe" | "uretprobe", [bin, sym]) => {
                let ret = f == "uretprobe";
                (Source::Uprobe { binary: bin.clone(), symbol: sym.clone(), ret }, uprobe_fields(ret))
            }
            _ => {
                return Err(err_at(
                    t.span(),
                    format!(
                        "unknown source {name}({}): use tp('name'), tracepoint('sys:event'), uprobe('binary', 'symbol') or uretprobe('binary', 'symbol')",
                        strs.len()
                    ),
                ));
            }
        };
        if let Some(clash) = schema.iter().find(|(n, _)| CONTEXT.iter().any(|(c, _)| c == n)) {
            return Err(err_at(
                t.span(),
                format!("field `{}` of {source} shadows a context column", clash.0),
            ));
        }
        self.sources.push((source, alias.as_ref().map(|a| a.name.value.clone())));
        self.schemas.push(schema);
        Ok(())
    }

    fn side_named(&self, e: &Expr) -> Result<usize, QueryError> {
        let Expr::Identifier(id) = e else { return Err(err_at(e.span(), "expected a source alias")) };
        self.sources.iter().position(|(_, a)| a.as_deref() == Some(id.value.as_str())).ok_or_else(|| {
            err_at(id.span, format!("no source is aliased `{}` (write FROM tp('…') AS {0})", id.value))
        })
    }

    fn lookup(&self, side: usize, name: &str) -> Option<Col> {
        if let Some((n, ty)) = self.schemas[side].iter().find(|(n, _)| n == name) {
            return Some(Col { side, name: n.clone(), ty: *ty, operand: Operand::Field(n.clone()) });
        }
        let (n, ty) = CONTEXT.iter().find(|(n, _)| *n == name)?;
        Some(Col { side, name: n.to_string(), ty: *ty, operand: Operand::Ctx(Ctx::parse(n)?) })
    }

    fn column(&self, e: &Expr) -> Result<Col, QueryError> {
        match e {
            Expr::Identifier(id) => {
                let found: Vec<Col> =
                    (0..self.sources.len()).filter_map(|s| self.lookup(s, &id.value)).collect();
                match found.as_slice() {
                    [c] => Ok(c.clone()),
                    [] => {
                        Err(err_at(id.span, format!("unknown column `{}` ({})", id.value, self.available())))
                    }
                    _ => Err(err_at(
                        id.span,
                        format!("column `{}` is ambiguous: qualify it with a source alias", id.value),
                    )),
                }
            }
            Expr::CompoundIdentifier(parts) => {
                let [a, f] = parts.as_slice() else {
                    return Err(err_at(e.span(), "columns are `name` or `alias.name`"));
                };
                let side = self.side_named(&Expr::Identifier(a.clone()))?;
                self.lookup(side, &f.value).ok_or_else(|| {
                    err_at(
                        f.span,
                        format!(
                            "{} has no column `{}` ({})",
                            self.sources[side].0,
                            f.value,
                            self.available()
                        ),
                    )
                })
            }
            Expr::Nested(inner) => self.column(inner),
            _ => Err(err_at(e.span(), format!("expected a column, found `{e}`"))),
        }
    }

    fn available(&self) -> String {
        let mut v: Vec<String> = Vec::new();
        for (i, s) in self.schemas.iter().enumerate() {
            let fields: Vec<String> = s.iter().map(|(n, t)| format!("{n}: {}", t.name())).collect();
            v.push(format!(
                "{} has {}",
                self.sources[i].0,
                if fields.is_empty() { "no fields".into() } else { fields.join(", ") }
            ));
        }
        v.push(format!(
            "every source has {}",
            CONTEXT.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
        ));
        v.join("; ")
    }

    /// A WHERE conjunct: its side and filter.
    fn filter(&self, e: &Expr) -> Result<(usize, Filter), QueryError> {
        let mut side = None;
        let f = self.bool_expr(e, &mut side)?;
        Ok((side.unwrap_or(0), f))
    }

    fn bool_expr(&self, e: &Expr, side: &mut Option<usize>) -> Result<Filter, QueryError> {
        match e {
            Expr::Nested(inner) => self.bool_expr(inner, side),
            Expr::UnaryOp { op: UnaryOperator::Not, expr } => {
                Ok(Filter::Not(Box::new(self.bool_expr(expr, side)?)))
            }
            Expr::BinaryOp { left, op: op @ (BinaryOperator::And | BinaryOperator::Or), right } => {
                let (a, b) = (self.bool_expr(left, side)?, self.bool_expr(right, side)?);
                Ok(if *op == BinaryOperator::And {
                    Filter::And(Box::new(a), Box::new(b))
                } else {
                    Filter::Or(Box::new(a), Box::new(b))
                })
            }
            Expr::BinaryOp { left, op, right } => {
                let cmp = match op {
                    BinaryOperator::Eq => CmpOp::Eq,
                    BinaryOperator::NotEq => CmpOp::Ne,
                    BinaryOperator::Lt => CmpOp::Lt,
                    BinaryOperator::LtEq => CmpOp::Le,
                    BinaryOperator::Gt => CmpOp::Gt,
                    BinaryOperator::GtEq => CmpOp::Ge,
                    _ => {
                        return Err(err_at(
                            e.span(),
                            format!("unsupported operator `{op}` (comparisons, AND, OR, NOT)"),
                        ));
                    }
                };
                let (col, lit, cmp) = match (literal(right), literal(left)) {
                    (Some(l), _) => (self.column(left)?, l.map_err(|m| err_at(right.span(), m))?, cmp),
                    (None, Some(l)) => {
                        (self.column(right)?, l.map_err(|m| err_at(left.span(), m))?, flip(cmp))
                    }
                    (None, None) => {
                        return Err(err_at(e.span(), "a comparison is between a column and a constant"));
                    }
                };
                match side {
                    Some(s) if *s != col.side => {
                        return Err(err_at(
                            e.span(),
                            "a WHERE condition (between ANDs) may name only one side of the join",
                        ));
                    }
                    _ => *side = Some(col.side),
                }
                check_cmp(&col, &lit).map_err(|m| err_at(e.span(), m))?;
                Ok(Filter::Cmp(col.operand, cmp, lit))
            }
            Expr::Value(v) if matches!(v.value, Value::Boolean(_)) => {
                Ok(if matches!(v.value, Value::Boolean(true)) {
                    Filter::True
                } else {
                    Filter::Not(Box::new(Filter::True))
                })
            }
            _ => Err(err_at(e.span(), format!("expected a condition, found `{e}`"))),
        }
    }

    fn aggregate(&self, e: &Expr, agg_side: usize) -> Result<Agg, QueryError> {
        let Expr::Function(f) = e else { return Err(err_at(e.span(), "expected an aggregate")) };
        let name = f.name.to_string().to_ascii_lowercase();
        let args: Vec<&FunctionArg> = match &f.args {
            FunctionArguments::List(l) if l.duplicate_treatment.is_none() && l.clauses.is_empty() => {
                l.args.iter().collect()
            }
            FunctionArguments::None => Vec::new(),
            _ => return Err(err_at(e.span(), format!("{name}: plain arguments only"))),
        };
        if f.filter.is_some() || f.over.is_some() || !matches!(f.parameters, FunctionArguments::None) {
            return Err(err_at(e.span(), format!("{name}: FILTER, OVER and parameters are not supported")));
        }
        let arg_expr = |i: usize| -> Result<&Expr, QueryError> {
            match args.get(i) {
                Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(x))) => Ok(x),
                _ => Err(err_at(e.span(), format!("{name}: argument {} must be an expression", i + 1))),
            }
        };
        let int_arg = |i: usize| -> Result<i64, QueryError> {
            let x = arg_expr(i)?;
            match literal(x) {
                Some(Ok(Const::Int(v))) => Ok(v),
                Some(Ok(Const::Uint(v))) => {
                    i64::try_from(v).map_err(|_| err_at(x.span(), "integer too large"))
                }
                _ => Err(err_at(x.span(), format!("{name}: argument {} must be an integer constant", i + 1))),
            }
        };
        let input = |needs: &str, ok: fn(Type) -> bool| -> Result<Col, QueryError> {
            let x = arg_expr(0)?;
            let c = self.column(x)?;
            if c.side != agg_side {
                return Err(err_at(
                    x.span(),
                    format!("{name} must aggregate a column of the downstream source"),
                ));
            }
            if !ok(c.ty) {
                return Err(err_at(
                    x.span(),
                    format!("{name}({}) needs {needs}, `{}` is {}", c.name, c.name, c.ty.name()),
                ));
            }
            Ok(c)
        };
        let arity = |n: usize| -> Result<(), QueryError> {
            if args.len() == n {
                Ok(())
            } else {
                Err(err_at(e.span(), format!("{name} takes {n} argument(s), not {}", args.len())))
            }
        };
        let (kind, col) = match name.as_str() {
            "count" => {
                if args.len() > 1 {
                    return Err(err_at(e.span(), "count takes * or nothing"));
                }
                (AggKind::Count, None)
            }
            "sum" | "min" | "max" | "avg" => {
                arity(1)?;
                let k = match name.as_str() {
                    "sum" => AggKind::Sum,
                    "min" => AggKind::Min,
                    "max" => AggKind::Max,
                    _ => AggKind::Avg,
                };
                (k, Some(input("an integer column (f64 sums are not exactly mergeable)", Type::integer)?))
            }
            "hist" | "log2" => {
                arity(1)?;
                (AggKind::Hist, Some(input("a numeric column", Type::numeric)?))
            }
            "lhist" => {
                arity(4)?;
                let l =
                    Linear::new(int_arg(1)?, int_arg(2)?, int_arg(3)?).map_err(|m| err_at(e.span(), m))?;
                (AggKind::Lhist(l), Some(input("a numeric column", Type::numeric)?))
            }
            "quantile" => {
                arity(2)?;
                let qx = arg_expr(1)?;
                let q = match literal(qx) {
                    Some(Ok(Const::Float(q))) if (0.0..=1.0).contains(&q) => q,
                    Some(Ok(Const::Int(0) | Const::Uint(0))) => 0.0,
                    Some(Ok(Const::Int(1) | Const::Uint(1))) => 1.0,
                    _ => return Err(err_at(qx.span(), "quantile(x, q): q is a number from 0 to 1")),
                };
                (AggKind::Quantile(q), Some(input("a numeric column", Type::numeric)?))
            }
            _ => {
                return Err(err_at(
                    e.span(),
                    format!("unknown aggregate `{name}` (count, sum, min, max, avg, hist, lhist, quantile)"),
                ));
            }
        };
        Ok(Agg { kind, input: col, text: e.to_string() })
    }
}

fn flip(c: CmpOp) -> CmpOp {
    match c {
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::Le => CmpOp::Ge,
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::Ge => CmpOp::Le,
        x => x,
    }
}

/// A constant: `None` if `e` is not one, `Some(Err)` if it is a bad one.
fn literal(e: &Expr) -> Option<Result<Const, String>> {
    match e {
        Expr::Nested(inner) => literal(inner),
        Expr::UnaryOp { op: UnaryOperator::Minus, expr } => Some(match literal(expr)? {
            Ok(Const::Uint(v)) => {
                if v <= i64::MAX as u64 + 1 {
                    Ok(Const::Int((v as i128).wrapping_neg() as i64))
                } else {
                    Err(format!("-{v} does not fit in i64"))
                }
            }
            Ok(Const::Int(v)) => Ok(Const::Int(v.wrapping_neg())),
            Ok(Const::Float(f)) => Ok(Const::Float(-f)),
            Ok(_) => Err("only numbers can be negated".into()),
            Err(m) => Err(m),
        }),
        Expr::Value(v) => Some(match &v.value {
            Value::Number(n, _) => {
                if let Ok(u) = n.parse::<u64>() {
                    Ok(Const::Uint(u))
                } else if let Some(h) = n.strip_prefix("0x").and_then(|h| u64::from_str_radix(h, 16).ok()) {
                    Ok(Const::Uint(h))
                } else {
                    n.parse::<f64>().map(Const::Float).map_err(|_| format!("bad number {n}"))
                }
            }
            Value::SingleQuotedString(s) => Ok(Const::Str(s.clone())),
            Value::Boolean(b) => Ok(Const::Bool(*b)),
            other => Err(format!("unsupported constant {other}")),
        }),
        _ => None,
    }
}

fn check_cmp(col: &Col, lit: &Const) -> Result<(), String> {
    let ok = match (col.ty, lit) {
        (Type::Any, _) => true,
        (Type::Bytes, Const::Str(s)) if col.name == "trace_id" => {
            s.len() == 32 && u128::from_str_radix(s, 16).is_ok()
        }
        (Type::I64 | Type::U64, Const::Int(_) | Const::Uint(_)) => true,
        (Type::F64, Const::Int(_) | Const::Uint(_) | Const::Float(_)) => true,
        (Type::Bool, Const::Bool(_)) => true,
        (Type::Str | Type::Bytes, Const::Str(_)) => true,
        _ => false,
    };
    if ok {
        Ok(())
    } else if col.name == "trace_id" {
        Err("trace_id compares with 32 hex digits".into())
    } else {
        let what = match lit {
            Const::Int(_) | Const::Uint(_) => "an integer",
            Const::Float(_) => "a float",
            Const::Bool(_) => "a boolean",
            Const::Str(_) => "a string",
        };
        Err(format!("`{}` is {} and cannot be compared with {what}", col.name, col.ty.name()))
    }
}
