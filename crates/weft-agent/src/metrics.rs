//! The agent's counters, its per-process congestion figures, and their Prometheus text form
//! (served on the agent's own `GET /metrics` and summarised in the [`AgentReport`] pushed to
//! the collector).

use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::spool::SpoolStats;
use weft_control::proto::{AgentReport, LttngSessionReport, PipelineReport, ProcessReport};
use weft_weave::live::LiveCounts;

/// Counters (monotonic unless noted).
#[derive(Debug, Default)]
pub struct Metrics {
    pub segments_attached: AtomicU64,
    pub segments_removed: AtomicU64,
    pub attach_errors: AtomicU64,
    pub records: AtomicU64,
    /// Records the processes dropped (full ring or no ring), including exited processes.
    pub records_dropped: AtomicU64,
    pub record_errors: AtomicU64,
    pub skipped_bytes: AtomicU64,
    pub spans_built: AtomicU64,
    pub event_spans: AtomicU64,
    pub spans_incomplete: AtomicU64,
    pub spans_evicted: AtomicU64,
    pub endpoint_resources_full: AtomicU64,
    pub orphans_dropped: AtomicU64,
    pub pins_released: AtomicU64,
    pub batches_spooled: AtomicU64,
    pub spool_errors: AtomicU64,
    pub batches_sent: AtomicU64,
    pub spans_sent: AtomicU64,
    /// Spans the collector refused as invalid (partial success).
    pub spans_rejected: AtomicU64,
    /// Batches the collector refused as a whole (4xx).
    pub batches_refused: AtomicU64,
    pub spans_refused: AtomicU64,
    pub send_errors: AtomicU64,
    pub send_micros: AtomicU64,
    /// Gauge: the last send attempt reached the collector.
    pub collector_up: AtomicBool,
    pub control_requests: AtomicU64,
    /// Commands refused or failed (malformed messages included).
    pub control_errors: Arc<AtomicU64>,
    pub reports_sent: AtomicU64,
    pub report_errors: AtomicU64,
    /// Live queries' partials collected (one per query and window).
    pub live_partials: AtomicU64,
    /// Partials dropped because too many waited for the collector.
    pub live_partials_dropped: AtomicU64,
    /// Gauge: open spans over all processes.
    pub open_spans: AtomicU64,
    /// LTTng live spans dropped while the spool refused appends.
    pub lttng_spans_dropped: AtomicU64,
    processes: Mutex<Vec<ProcessReport>>,
    spool: Mutex<SpoolStats>,
    /// Per `--lttng-live` target (by its index), its sessions and its counters.
    lttng: Mutex<Vec<(Vec<LttngSessionReport>, LiveCounts)>>,
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

impl Metrics {
    /// Replace the per-process figures (the drain loop, every cycle).
    pub fn set_processes(&self, p: Vec<ProcessReport>) {
        *self.processes.lock().unwrap_or_else(|e| e.into_inner()) = p;
    }

    pub fn processes(&self) -> Vec<ProcessReport> {
        self.processes.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set_spool(&self, s: SpoolStats) {
        *self.spool.lock().unwrap_or_else(|e| e.into_inner()) = s;
    }

    /// Replace the sessions of `--lttng-live` target `slot` (its follower thread).
    pub fn set_lttng(&self, slot: usize, sessions: Vec<LttngSessionReport>, totals: LiveCounts) {
        let mut l = self.lttng.lock().unwrap_or_else(|e| e.into_inner());
        if l.len() <= slot {
            l.resize(slot + 1, Default::default());
        }
        l[slot] = (sessions, totals);
    }

    /// Every followed LTTng live session.
    pub fn lttng(&self) -> Vec<LttngSessionReport> {
        let l = self.lttng.lock().unwrap_or_else(|e| e.into_inner());
        l.iter().flat_map(|(s, _)| s.iter().cloned()).collect()
    }

    /// The LTTng live counters over every target and session.
    pub fn lttng_totals(&self) -> LiveCounts {
        let l = self.lttng.lock().unwrap_or_else(|e| e.into_inner());
        let mut t = LiveCounts::default();
        for (_, x) in l.iter() {
            t.add(x);
        }
        t
    }

    pub fn spool(&self) -> SpoolStats {
        *self.spool.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The report pushed to the collector.
    pub fn report(&self, agent: &str, host: &str) -> AgentReport {
        let s = self.spool();
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        AgentReport {
            agent: agent.to_string(),
            host: host.to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            unix_ns: weft_probe::clock::realtime_ns(),
            processes: self.processes(),
            pipeline: PipelineReport {
                spool_bytes: s.bytes,
                spool_limit_bytes: s.limit_bytes,
                spool_batches: s.pending_batches,
                spool_dropped_batches: s.dropped_batches,
                spool_dropped_spans: s.dropped_spans,
                batches_sent: g(&self.batches_sent),
                spans_sent: g(&self.spans_sent),
                spans_rejected: g(&self.spans_rejected) + g(&self.spans_refused),
                send_errors: g(&self.send_errors),
            },
            lttng: self.lttng(),
            targets: Vec::new(),
        }
    }

    /// Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut o = String::new();
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut c = |name: &str, help: &str, kind: &str, v: u64| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
        };
        c(
            "weft_agent_segments_attached_total",
            "Probe segments attached.",
            "counter",
            g(&self.segments_attached),
        );
        c(
            "weft_agent_segments_removed_total",
            "Segments of exited processes drained and removed.",
            "counter",
            g(&self.segments_removed),
        );
        c(
            "weft_agent_attach_errors_total",
            "Segments that could not be attached (corrupt, busy, unreadable).",
            "counter",
            g(&self.attach_errors),
        );
        c("weft_agent_records_total", "Probe records read.", "counter", g(&self.records));
        c(
            "weft_agent_records_dropped_total",
            "Records the processes dropped (full ring, no ring), exited ones included.",
            "counter",
            g(&self.records_dropped),
        );
        c(
            "weft_agent_record_errors_total",
            "Corrupt records or ring headers (the rest of the ring was skipped).",
            "counter",
            g(&self.record_errors),
        );
        c(
            "weft_agent_skipped_bytes_total",
            "Ring bytes skipped after corruption.",
            "counter",
            g(&self.skipped_bytes),
        );
        c("weft_agent_spans_total", "Spans built (including event spans).", "counter", g(&self.spans_built));
        c(
            "weft_agent_event_spans_total",
            "Zero-length spans built from standalone tracepoint events.",
            "counter",
            g(&self.event_spans),
        );
        c(
            "weft_agent_spans_incomplete_total",
            "Spans emitted without their start or end.",
            "counter",
            g(&self.spans_incomplete),
        );
        c(
            "weft_agent_spans_evicted_total",
            "Open spans emitted early (open-span bound).",
            "counter",
            g(&self.spans_evicted),
        );
        c(
            "weft_agent_endpoint_resources_full_total",
            "Spans whose endpoint service was past the distinct ones kept per process (kept the process's resource).",
            "counter",
            g(&self.endpoint_resources_full),
        );
        c(
            "weft_agent_orphans_dropped_total",
            "Annotations/events of unknown spans dropped.",
            "counter",
            g(&self.orphans_dropped),
        );
        c(
            "weft_agent_pins_released_total",
            "Open spans whose records were released before they ended.",
            "counter",
            g(&self.pins_released),
        );
        c("weft_agent_open_spans", "Open spans being assembled.", "gauge", g(&self.open_spans));
        c(
            "weft_agent_batches_spooled_total",
            "Batches appended to the spool.",
            "counter",
            g(&self.batches_spooled),
        );
        c("weft_agent_spool_errors_total", "Spool I/O errors.", "counter", g(&self.spool_errors));
        c(
            "weft_agent_batches_sent_total",
            "Batches acknowledged by the collector.",
            "counter",
            g(&self.batches_sent),
        );
        c(
            "weft_agent_spans_sent_total",
            "Spans acknowledged by the collector.",
            "counter",
            g(&self.spans_sent),
        );
        c(
            "weft_agent_spans_rejected_total",
            "Spans the collector refused as invalid.",
            "counter",
            g(&self.spans_rejected),
        );
        c(
            "weft_agent_batches_refused_total",
            "Batches the collector refused (4xx) and that were dropped.",
            "counter",
            g(&self.batches_refused),
        );
        c("weft_agent_spans_refused_total", "Spans in refused batches.", "counter", g(&self.spans_refused));
        c("weft_agent_send_errors_total", "Failed send attempts (retried).", "counter", g(&self.send_errors));
        c(
            "weft_agent_collector_up",
            "1 when the last send reached the collector.",
            "gauge",
            self.collector_up.load(Ordering::Relaxed) as u64,
        );
        c(
            "weft_agent_control_requests_total",
            "Control commands executed.",
            "counter",
            g(&self.control_requests),
        );
        c(
            "weft_agent_control_errors_total",
            "Control commands refused.",
            "counter",
            self.control_errors.load(Ordering::Relaxed),
        );
        c(
            "weft_agent_reports_sent_total",
            "Congestion reports the collector accepted.",
            "counter",
            g(&self.reports_sent),
        );
        c(
            "weft_agent_report_errors_total",
            "Congestion reports that failed.",
            "counter",
            g(&self.report_errors),
        );
        c(
            "weft_agent_live_partials_total",
            "Live queries' partials collected (per query and window).",
            "counter",
            g(&self.live_partials),
        );
        c(
            "weft_agent_live_partials_dropped_total",
            "Live queries' partials dropped while the collector was unreachable.",
            "counter",
            g(&self.live_partials_dropped),
        );
        let s = self.spool();
        c("weft_agent_spool_bytes", "Bytes in the spool.", "gauge", s.bytes);
        c("weft_agent_spool_max_bytes", "Largest spool size reached.", "gauge", s.max_bytes);
        c("weft_agent_spool_limit_bytes", "Spool bound.", "gauge", s.limit_bytes);
        c(
            "weft_agent_spool_pending_batches",
            "Batches waiting for an acknowledgement.",
            "gauge",
            s.pending_batches,
        );
        c(
            "weft_agent_spool_pending_spans",
            "Spans waiting for an acknowledgement.",
            "gauge",
            s.pending_spans,
        );
        c(
            "weft_agent_spool_dropped_batches_total",
            "Batches dropped because the spool was full.",
            "counter",
            s.dropped_batches,
        );
        c(
            "weft_agent_spool_dropped_spans_total",
            "Spans dropped because the spool was full.",
            "counter",
            s.dropped_spans,
        );
        c(
            "weft_agent_spool_corrupt_records_total",
            "Torn or corrupt spool records cut.",
            "counter",
            s.corrupt_records,
        );
        let lttng = self.lttng();
        let totals = self.lttng_totals();
        type LGet = fn(&LiveCounts) -> u64;
        let per_session: [(&str, &str, LGet); 6] = [
            ("weft_agent_lttng_events_total", "Events read from the LTTng live sessions.", |s| s.events),
            ("weft_agent_lttng_spans_total", "Spans woven from the LTTng live sessions.", |s| s.spans),
            (
                "weft_agent_lttng_discarded_events_total",
                "Events the LTTng tracer discarded (its buffers were full).",
                |s| s.discarded_events,
            ),
            ("weft_agent_lttng_lost_packets_total", "LTTng packets missing.", |s| s.lost_packets),
            (
                "weft_agent_lttng_replayed_events_total",
                "Events read again after a re-attach and skipped.",
                |s| s.replayed_events,
            ),
            ("weft_agent_lttng_reconnects_total", "Re-attaches to LTTng live sessions.", |s| s.reconnects),
        ];
        for (name, help, get) in per_session {
            c(name, help, "counter", get(&totals));
        }
        c(
            "weft_agent_lttng_spans_dropped_total",
            "LTTng live spans dropped while the spool refused appends.",
            "counter",
            g(&self.lttng_spans_dropped),
        );
        let _ = writeln!(
            o,
            "# HELP weft_agent_lttng_sessions LTTng live sessions followed, by state.\n# TYPE weft_agent_lttng_sessions gauge"
        );
        for state in ["following", "reconnecting", "ended"] {
            let n = lttng.iter().filter(|s| s.state == state).count();
            let _ = writeln!(o, "weft_agent_lttng_sessions{{state=\"{state}\"}} {n}");
        }
        let procs = self.processes();
        type Get = fn(&ProcessReport) -> String;
        let per: [(&str, &str, &str, Get); 9] = [
            ("weft_agent_process_ring_occupancy_max", "Fullest ring's occupancy (0..1).", "gauge", |p| {
                format!("{}", p.max_occupancy)
            }),
            ("weft_agent_process_pending_bytes", "Recorded bytes not yet released.", "gauge", |p| {
                p.pending_bytes.to_string()
            }),
            ("weft_agent_process_capacity_bytes", "Ring bytes in all.", "gauge", |p| {
                p.capacity_bytes.to_string()
            }),
            ("weft_agent_process_rings_in_use", "Rings owned by live threads.", "gauge", |p| {
                p.rings_in_use.to_string()
            }),
            (
                "weft_agent_process_dropped_ring_full_total",
                "Records dropped because a ring was full.",
                "counter",
                |p| p.dropped_ring_full.to_string(),
            ),
            (
                "weft_agent_process_dropped_no_ring_total",
                "Records dropped because no ring was free.",
                "counter",
                |p| p.dropped_no_ring.to_string(),
            ),
            ("weft_agent_process_records_total", "Records read from the process.", "counter", |p| {
                p.records.to_string()
            }),
            ("weft_agent_process_spans_total", "Spans built from the process.", "counter", |p| {
                p.spans.to_string()
            }),
            ("weft_agent_process_tracepoints_enabled", "Tracepoints enabled.", "gauge", |p| {
                p.tracepoints_enabled.to_string()
            }),
        ];
        for (name, help, kind, get) in per {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for p in &procs {
                let _ = writeln!(o, "{name}{{pid=\"{}\",service=\"{}\"}} {}", p.pid, esc(&p.service), get(p));
            }
        }
        o
    }
}
