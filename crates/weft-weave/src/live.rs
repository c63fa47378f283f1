//! LTTng live sessions into spans, re-attaching: the agent's `--lttng-live`.
//!
//! A [`Follower`] follows a [`LiveTarget`] — one session of `lttng-relayd`, or every session of
//! it (listed again every [`FollowOptions::list_every`], so sessions created later are
//! followed too) — each session through a [`LiveReader`] into its own BlkKin weaver
//! ([`crate::blkin`], the weaver `weft import ctf` runs, live or not), which outputs a span
//! once no event touched it for [`FollowOptions::span_idle_ns`] of trace time past the
//! reader's watermark. The spans come out of [`Follower::poll`].
//!
//! Without [`FollowOptions::reconnect`], any error of the relay daemon is the caller's. With
//! it, a session whose connection fails is re-attached with
//! exponential backoff ([`FollowOptions::backoff_min`] doubling to
//! [`FollowOptions::backoff_max`]); the new reader starts at the old one's
//! [`Positions`], so an event is woven (and its span shipped) at most once per stream, and
//! the weaver keeps the spans still open across the gap. A relay daemon that restarts has
//! forgotten its sessions (lttng-tools 2.13's session daemon does not stream an existing
//! session to a new relay daemon): once the relay daemon lists sessions again and a followed
//! one is not among them, that session ends (its open spans are output); sessions created
//! afterwards — also under the same name — are followed as new ones. Following one session by
//! its URL, the follower waits for that name to come back instead.
//!
//! Memory: per session a reader (one packet per stream, the metadata) and a weaver (bounded
//! by [`BlkkinOptions::max_open`]); at most [`FollowOptions::max_sessions`] sessions, more are
//! not followed (warned once).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use weft_model::{Event, SourceId, Span};
use weft_sources::ctf::StreamStats;
use weft_sources::ctf::live::{
    LiveError, LiveOptions, LiveReader, LiveStats, LiveTarget, LiveUrl, Poll, Positions, Viewer,
};

use crate::blkin::{BlkkinOptions, BlkkinWeaver};

/// Settings of a [`Follower`].
#[derive(Debug, Clone)]
pub struct FollowOptions {
    /// The readers' settings.
    pub live: LiveOptions,
    /// A span is output once no event touched it for this long (trace time, ns).
    pub span_idle_ns: u64,
    /// Re-attach after errors (else they are the caller's).
    pub reconnect: bool,
    /// First wait before a re-attach.
    pub backoff_min: Duration,
    /// Longest wait between re-attaches.
    pub backoff_max: Duration,
    /// Following a whole relay daemon: how often its sessions are listed.
    pub list_every: Duration,
    /// Sessions followed at most.
    pub max_sessions: usize,
    /// Events taken from a session per poll at most.
    pub batch_events: usize,
}

impl Default for FollowOptions {
    fn default() -> Self {
        FollowOptions {
            live: LiveOptions::default(),
            span_idle_ns: 1_000_000_000,
            reconnect: false,
            backoff_min: Duration::from_millis(200),
            backoff_max: Duration::from_secs(10),
            list_every: Duration::from_secs(1),
            max_sessions: 256,
            batch_events: 4096,
        }
    }
}

/// Where a followed session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// Attached and reading.
    Following,
    /// The connection failed: re-attaching (with backoff).
    Reconnecting,
    /// Destroyed and read to its end, or gone from a restarted relay daemon; its spans are
    /// all out.
    Ended,
}

impl SessionState {
    /// `following`, `reconnecting`, `ended`.
    pub fn name(self) -> &'static str {
        match self {
            SessionState::Following => "following",
            SessionState::Reconnecting => "reconnecting",
            SessionState::Ended => "ended",
        }
    }
}

/// A session's counters, or their sums over sessions ([`Follower::totals`]: monotonic,
/// sessions that left the list count on).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveCounts {
    /// Events read (each once, re-attaches included).
    pub events: u64,
    /// Spans output.
    pub spans: u64,
    /// Events the tracer discarded (the packets' counts: the tracer's buffers were full).
    pub discarded_events: u64,
    /// Packets missing (gaps in the packets' sequence numbers).
    pub lost_packets: u64,
    /// Events read again after a re-attach and not used (they were before).
    pub replayed_events: u64,
    /// Re-attaches that succeeded.
    pub reconnects: u64,
    /// Decoding errors (packets skipped in part).
    pub decode_errors: u64,
}

impl LiveCounts {
    /// Adds `o`.
    pub fn add(&mut self, o: &LiveCounts) {
        self.events += o.events;
        self.spans += o.spans;
        self.discarded_events += o.discarded_events;
        self.lost_packets += o.lost_packets;
        self.replayed_events += o.replayed_events;
        self.reconnects += o.reconnects;
        self.decode_errors += o.decode_errors;
    }
}

/// A followed session's figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionReport {
    /// The session.
    pub url: LiveUrl,
    /// Where it is.
    pub state: SessionState,
    /// Its counters.
    pub counts: LiveCounts,
    /// The last error, while reconnecting.
    pub last_error: Option<String>,
}

/// One followed session.
struct Followed {
    url: LiveUrl,
    /// The relay daemon's id of it (the last attach).
    relay_id: Option<u64>,
    reader: Option<LiveReader>,
    weaver: BlkkinWeaver,
    positions: Positions,
    state: SessionState,
    attached: bool,
    events: u64,
    spans: u64,
    reconnects: u64,
    /// The counters of readers already closed.
    closed: LiveStats,
    closed_decode: StreamStats,
    retry_at: Instant,
    backoff: Duration,
    last_error: Option<String>,
}

fn add_stats(to: &mut LiveStats, s: &LiveStats) {
    to.streams += s.streams;
    to.streams_ended += s.streams_ended;
    to.packets += s.packets;
    to.bytes += s.bytes;
    to.metadata_bytes += s.metadata_bytes;
    to.metadata_versions += s.metadata_versions;
    to.retries += s.retries;
    to.beacons += s.beacons;
    to.discarded_events += s.discarded_events;
    to.replayed_events += s.replayed_events;
}

impl Followed {
    fn new(url: LiveUrl, positions: Positions, opts: &FollowOptions) -> Followed {
        Followed {
            url,
            relay_id: None,
            reader: None,
            weaver: weaver(opts),
            positions,
            state: SessionState::Reconnecting,
            attached: false,
            events: 0,
            spans: 0,
            reconnects: 0,
            closed: LiveStats::default(),
            closed_decode: StreamStats::default(),
            retry_at: Instant::now(),
            backoff: opts.backoff_min,
            last_error: None,
        }
    }

    /// Attaches (at the positions so far).
    fn attach(&mut self, source: SourceId, opts: &FollowOptions) -> Result<(), LiveError> {
        let r = LiveReader::open_at(&self.url, source, opts.live.clone(), self.positions.clone())?;
        if self.attached {
            self.reconnects += 1;
            tracing::info!("{}: re-attached (session {})", self.url, r.session_id());
        }
        self.attached = true;
        self.relay_id = Some(r.session_id());
        self.reader = Some(r);
        self.state = SessionState::Following;
        self.backoff = opts.backoff_min;
        self.last_error = None;
        Ok(())
    }

    /// Drops the reader, keeping its positions and counters.
    fn close_reader(&mut self) {
        if let Some(r) = self.reader.take() {
            self.positions = r.positions();
            add_stats(&mut self.closed, r.stats());
            self.closed_decode.merge(&r.decode_stats());
        }
    }

    /// After a failure: re-attach later.
    fn failed(&mut self, e: &LiveError, now: Instant, opts: &FollowOptions) {
        self.close_reader();
        let msg = e.to_string();
        // (once per kind of failure in a row: a relay daemon away for long logs once)
        if self.last_error.as_deref() != Some(msg.as_str()) {
            tracing::warn!("{}: {msg}; re-attaching in {:?} (backing off)", self.url, self.backoff);
        }
        self.last_error = Some(msg);
        self.state = SessionState::Reconnecting;
        self.retry_at = now + self.backoff;
        self.backoff = (self.backoff * 2).min(opts.backoff_max);
    }

    /// Ends the session: every span still open goes to `spans`.
    fn end(&mut self, spans: &mut Vec<Span>, opts: &FollowOptions) {
        self.close_reader();
        let (rest, _) = std::mem::replace(&mut self.weaver, weaver(opts)).finish();
        self.spans += rest.len() as u64;
        spans.extend(rest);
        self.state = SessionState::Ended;
    }

    /// Reads once; the number of events read.
    fn poll(
        &mut self,
        batch: &mut Vec<Event>,
        spans: &mut Vec<Span>,
        opts: &FollowOptions,
    ) -> Result<(usize, bool), LiveError> {
        let Some(r) = self.reader.as_mut() else { return Ok((0, false)) };
        batch.clear();
        let polled = r.poll(batch, opts.batch_events);
        // (what was released before an error is used too: the positions count it)
        for e in batch.iter() {
            self.weaver.push(e);
        }
        self.events += batch.len() as u64;
        let n = batch.len();
        self.weaver.advance(r.watermark());
        let before = spans.len();
        self.weaver.drain(spans);
        self.spans += (spans.len() - before) as u64;
        Ok((n, polled? == Poll::End))
    }

    fn report(&self) -> SessionReport {
        let (mut live, mut dec) = (self.closed.clone(), self.closed_decode.clone());
        if let Some(r) = &self.reader {
            add_stats(&mut live, r.stats());
            dec.merge(&r.decode_stats());
        }
        SessionReport {
            url: self.url.clone(),
            state: self.state,
            counts: LiveCounts {
                events: self.events,
                spans: self.spans,
                discarded_events: live.discarded_events.max(dec.discarded_events),
                lost_packets: dec.lost_packets,
                replayed_events: live.replayed_events,
                reconnects: self.reconnects,
                decode_errors: dec.errors,
            },
            last_error: self.last_error.clone(),
        }
    }
}

fn weaver(opts: &FollowOptions) -> BlkkinWeaver {
    BlkkinWeaver::new(BlkkinOptions { idle_ns: Some(opts.span_idle_ns), ..BlkkinOptions::default() })
}

/// What [`Follower::poll`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Polled {
    /// Events read (0: wait a little — a fraction of the live timer — before polling again).
    pub events: usize,
    /// Following one session: it ended (destroyed and read to its end). Never for a relay
    /// daemon's every session.
    pub ended: bool,
}

/// Follows a relay daemon's sessions, or one of them (see the module docs).
pub struct Follower {
    target: LiveTarget,
    source: SourceId,
    opts: FollowOptions,
    sessions: Vec<Followed>,
    lister: Option<Viewer>,
    next_list: Instant,
    list_backoff: Duration,
    /// The relay daemon's ids of sessions that ended while it stayed up (not re-attached
    /// while it still lists them; forgotten when it restarts).
    ended_ids: HashSet<u64>,
    relay_error: Option<String>,
    skipped: u64,
    /// The counters of sessions no longer in the list.
    retired: LiveCounts,
    batch: Vec<Event>,
}

impl Follower {
    /// A follower of `target`. Following one session without reconnecting, it attaches here
    /// (the relay daemon's errors are the caller's at once); else at the first poll.
    pub fn open(target: LiveTarget, source: SourceId, opts: FollowOptions) -> Result<Follower, LiveError> {
        let mut f = Follower {
            source,
            sessions: Vec::new(),
            lister: None,
            next_list: Instant::now(),
            list_backoff: opts.backoff_min,
            ended_ids: HashSet::new(),
            relay_error: None,
            skipped: 0,
            retired: LiveCounts::default(),
            batch: Vec::new(),
            target,
            opts,
        };
        if let LiveTarget::Session(u) = &f.target {
            let mut s = Followed::new(u.clone(), Positions::default(), &f.opts);
            if !f.opts.reconnect {
                s.attach(f.source, &f.opts)?;
            }
            f.sessions.push(s);
        }
        Ok(f)
    }

    /// What is followed.
    pub fn target(&self) -> &LiveTarget {
        &self.target
    }

    /// Reads every session once around; the spans finished go to `spans`. Errors only
    /// without [`FollowOptions::reconnect`].
    pub fn poll(&mut self, spans: &mut Vec<Span>) -> Result<Polled, LiveError> {
        let now = Instant::now();
        if matches!(self.target, LiveTarget::Relay { .. }) && now >= self.next_list {
            self.list(now, spans);
        }
        let mut n = 0;
        for i in 0..self.sessions.len() {
            let s = &mut self.sessions[i];
            let due = s.state == SessionState::Reconnecting && s.reader.is_none() && now >= s.retry_at;
            if due && let Err(e) = s.attach(self.source, &self.opts) {
                if !self.opts.reconnect {
                    return Err(e);
                }
                let gone = matches!(e, LiveError::NoSession { .. });
                if gone && matches!(self.target, LiveTarget::Relay { .. }) && s.attached {
                    tracing::info!("{}: no longer on the relay daemon: ended", s.url);
                    s.end(spans, &self.opts);
                    continue;
                }
                s.failed(&e, now, &self.opts);
            }
            match s.poll(&mut self.batch, spans, &self.opts) {
                Ok((k, ended)) => {
                    n += k;
                    if ended {
                        tracing::info!("{}: session destroyed and read to its end", s.url);
                        if let Some(id) = s.relay_id {
                            self.ended_ids.insert(id);
                        }
                        s.end(spans, &self.opts);
                    }
                }
                Err(e) if self.opts.reconnect => s.failed(&e, now, &self.opts),
                Err(e) => return Err(e),
            }
        }
        let ended = matches!(self.target, LiveTarget::Session(_))
            && self.sessions.iter().all(|s| s.state == SessionState::Ended);
        Ok(Polled { events: n, ended })
    }

    /// Lists the relay daemon's sessions: follows new ones, ends the followed ones it lost.
    fn list(&mut self, now: Instant, spans: &mut Vec<Span>) {
        let (relay, port) = self.target.relay();
        let listed = match self.lister.take() {
            Some(v) => Ok(v),
            None => Viewer::connect(relay, port, self.opts.live.timeout),
        }
        .and_then(|mut v| v.list_sessions().map(|l| (v, l)));
        let list = match listed {
            Ok((v, l)) => {
                self.lister = Some(v);
                self.next_list = now + self.opts.list_every;
                self.list_backoff = self.opts.backoff_min;
                if let Some(e) = self.relay_error.take() {
                    // A relay daemon that was away restarted: its ids start over.
                    tracing::info!("relay daemon {relay}:{port} answers again (it was: {e})");
                    self.ended_ids.clear();
                }
                l
            }
            Err(e) => {
                if self.relay_error.is_none() {
                    tracing::warn!("{e}; listing again in {:?} (backing off)", self.list_backoff);
                }
                self.relay_error = Some(e.to_string());
                self.next_list = now + self.list_backoff;
                self.list_backoff = (self.list_backoff * 2).min(self.opts.backoff_max);
                return;
            }
        };
        // Followed sessions waiting to re-attach that the relay daemon no longer has: ended.
        for s in &mut self.sessions {
            if s.state == SessionState::Reconnecting
                && s.reader.is_none()
                && !list.iter().any(|l| l.host == s.url.host && l.name == s.url.session)
            {
                tracing::info!("{}: no longer on the relay daemon: ended", s.url);
                s.end(spans, &self.opts);
            }
        }
        for l in &list {
            if self.ended_ids.contains(&l.id) {
                continue;
            }
            let same = |s: &Followed| s.url.host == l.host && s.url.session == l.name;
            if self.sessions.iter().any(|s| same(s) && s.state != SessionState::Ended) {
                continue;
            }
            let url =
                LiveUrl { relay: relay.to_owned(), port, host: l.host.clone(), session: l.name.clone() };
            // A session of a name seen before: its positions (a new session has other streams).
            let positions = match self.sessions.iter().position(same) {
                Some(i) => {
                    let old = self.sessions.remove(i);
                    self.retired.add(&old.report().counts);
                    old.positions
                }
                None => Positions::default(),
            };
            if self.sessions.iter().filter(|s| s.state != SessionState::Ended).count()
                >= self.opts.max_sessions
            {
                if self.skipped == 0 {
                    tracing::warn!("{url}: not followed (more than {} sessions)", self.opts.max_sessions);
                }
                self.skipped += 1;
                continue;
            }
            tracing::info!("{url}: following (session {})", l.id);
            self.sessions.push(Followed::new(url, positions, &self.opts));
        }
        // Keep the ended sessions' reports bounded.
        while self.sessions.len() > 2 * self.opts.max_sessions {
            match self.sessions.iter().position(|s| s.state == SessionState::Ended) {
                Some(i) => self.retired.add(&self.sessions.remove(i).report().counts),
                None => break,
            }
        }
    }

    /// Detaches from every session and outputs every span still open.
    pub fn finish(&mut self, spans: &mut Vec<Span>) {
        for s in &mut self.sessions {
            if let Some(r) = s.reader.as_mut() {
                let _ = r.detach();
            }
            if s.state != SessionState::Ended {
                s.end(spans, &self.opts);
            }
        }
    }

    /// Every session followed so far (ended ones included, the latest per name).
    pub fn sessions(&self) -> Vec<SessionReport> {
        self.sessions.iter().map(Followed::report).collect()
    }

    /// The counters over every session followed so far.
    pub fn totals(&self) -> LiveCounts {
        let mut t = self.retired;
        for s in &self.sessions {
            t.add(&s.report().counts);
        }
        t
    }
}
