//! LTTng live: reading a tracing session while it records, as a viewer of `lttng-relayd`.
//!
//! The consumer daemon streams a live session's sub-buffers to `lttng-relayd`; a viewer
//! connects to the relay daemon's live port (5344 by default) and asks, stream by stream, for
//! the next packet's index and then the packet. [`Viewer`] is that protocol's client (the
//! viewer side of lttng-tools' `lttng-viewer-abi.h`, protocol 2.4, what lttng-tools 2.13
//! speaks): every message is a packed big-endian struct after a 16-byte command header.
//!
//! ```text
//!  CONNECT (handshake: major 2, the smaller minor wins) → CREATE_SESSION → LIST_SESSIONS
//!  → ATTACH_SESSION (streams; metadata streams flagged) → per trace: GET_METADATA until
//!  NO_NEW_METADATA → per stream: GET_NEXT_INDEX (OK / RETRY / INACTIVE beacon / HUP / ERR /
//!  EOF, flags NEW_METADATA and NEW_STREAM) → GET_PACKET → … → GET_NEW_STREAMS (HUP: the
//!  session is gone) → DETACH_SESSION
//! ```
//!
//! [`LiveReader`] follows one session: every data stream gets a live
//! [`StreamDecoder`](super::StreamDecoder) (the same decoder `weft import ctf DIR` uses, fed
//! packet by packet), the metadata is re-parsed as it grows, and events come out merged in
//! time order across streams. An event is released only when no stream can still produce an
//! earlier one: each stream without a decoded event bounds the merge with the time of its
//! last event, or of its last inactivity beacon (the relay daemon sends one per live timer
//! period for an idle stream); a stream that answers RETRY holds the merge until it answers
//! otherwise. That bound is the [`LiveReader::watermark`].
//!
//! Memory: one packet per stream (packets are capped by
//! [`DecodeOptions::max_packet_bytes`](super::DecodeOptions)), the metadata text (capped by
//! [`LiveOptions::max_metadata_bytes`]), and the streams the relay daemon announces (capped by
//! [`MAX_STREAMS`]). A viewer that falls behind does not make the relay daemon drop data (it
//! keeps the trace on disk); what the tracer itself could not write in time is reported by
//! the packets: [`LiveStats::discarded_events`] (from the indexes) and the decoders'
//! discarded-event and missing-packet counters.
//!
//! Errors ([`LiveError`]) name the relay daemon's address, the command and the state it
//! answered. A relay daemon that goes away mid-read is an error (the caller keeps what it
//! received); a destroyed session ends the read normally once every stream hung up.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use weft_model::{Event, SourceId};

use super::compile::{Compiled, compile};
use super::decode::{DecodeOptions, StreamDecoder, StreamStats};
use super::error::CtfError;
use super::meta::metadata_text;

/// The relay daemon's default live (viewer) port.
pub const DEFAULT_PORT: u16 = 5344;
/// The viewer protocol's major version.
pub const PROTOCOL_MAJOR: u32 = 2;
/// The viewer protocol's minor version this client speaks (lttng-tools 2.13 speaks 2.4).
pub const PROTOCOL_MINOR: u32 = 4;
/// Streams a session may announce at most (each holds a decoder and a packet).
pub const MAX_STREAMS: usize = 1 << 14;

const HOST_NAME_MAX: usize = 64;
const NAME_MAX: usize = 255;
const PATH_MAX: usize = 4096;
const SESSION_LEN: usize = 8 + 4 + 4 + 4 + HOST_NAME_MAX + NAME_MAX;
const STREAM_LEN: usize = 8 + 8 + 4 + PATH_MAX + NAME_MAX;
const INDEX_LEN: usize = 7 * 8 + 4 + 4;

/// Reply flag: the packet needs newer metadata.
pub const FLAG_NEW_METADATA: u32 = 1;
/// Reply flag: the session has new streams.
pub const FLAG_NEW_STREAM: u32 = 2;

/// A viewer command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmd {
    /// Handshake.
    Connect = 1,
    /// The relay daemon's sessions.
    ListSessions = 2,
    /// Attach to a session.
    AttachSession = 3,
    /// A stream's next packet index.
    GetNextIndex = 4,
    /// A packet's bytes.
    GetPacket = 5,
    /// New metadata of a trace.
    GetMetadata = 6,
    /// Streams added since the last ask.
    GetNewStreams = 7,
    /// Create the viewer session (before attaching).
    CreateSession = 8,
    /// Detach from a session.
    DetachSession = 9,
}

impl Cmd {
    /// The command's name in lttng-tools.
    pub fn name(self) -> &'static str {
        match self {
            Cmd::Connect => "CONNECT",
            Cmd::ListSessions => "LIST_SESSIONS",
            Cmd::AttachSession => "ATTACH_SESSION",
            Cmd::GetNextIndex => "GET_NEXT_INDEX",
            Cmd::GetPacket => "GET_PACKET",
            Cmd::GetMetadata => "GET_METADATA",
            Cmd::GetNewStreams => "GET_NEW_STREAMS",
            Cmd::CreateSession => "CREATE_SESSION",
            Cmd::DetachSession => "DETACH_SESSION",
        }
    }
}

/// An LTTng live error.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The URL is not `net://HOST[:PORT]/host/HOSTNAME/SESSION`.
    #[error("{url}: {msg} (expected net://HOST[:PORT]/host/HOSTNAME/SESSION)")]
    Url {
        /// The URL.
        url: String,
        /// What is wrong.
        msg: String,
    },
    /// Connecting failed.
    #[error("relay daemon {addr}: connecting: {source}")]
    Connect {
        /// HOST:PORT.
        addr: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Sending or receiving a command failed (the relay daemon went away, or timed out).
    #[error("relay daemon {addr}: {}: {source}", cmd.name())]
    Io {
        /// HOST:PORT.
        addr: String,
        /// The command.
        cmd: Cmd,
        /// The OS error.
        source: std::io::Error,
    },
    /// The relay daemon answered with an error state or something this client cannot use.
    #[error("relay daemon {addr}: {}: {msg}", cmd.name())]
    Protocol {
        /// HOST:PORT.
        addr: String,
        /// The command.
        cmd: Cmd,
        /// The state or what is wrong.
        msg: String,
    },
    /// The session is not on the relay daemon.
    #[error("relay daemon {addr}: no live session {session:?} of host {host:?} (it has: {have})")]
    NoSession {
        /// HOST:PORT.
        addr: String,
        /// The traced host asked for.
        host: String,
        /// The session asked for.
        session: String,
        /// What the relay daemon has (`host/session`, comma-separated).
        have: String,
    },
    /// The metadata or a packet could not be decoded.
    #[error(transparent)]
    Ctf(#[from] CtfError),
}

/// A live session's address: `net://HOST[:PORT]/host/HOSTNAME/SESSION` (babeltrace2's form;
/// `net4://` and `tcp://` are accepted too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveUrl {
    /// The relay daemon's host.
    pub relay: String,
    /// Its live port.
    pub port: u16,
    /// The traced host's name, as the session daemon reported it.
    pub host: String,
    /// The session's name.
    pub session: String,
}

impl LiveUrl {
    /// Parses a URL.
    pub fn parse(url: &str) -> Result<LiveUrl, LiveError> {
        let bad = |msg: &str| LiveError::Url { url: url.to_owned(), msg: msg.to_owned() };
        let rest = ["net://", "net4://", "tcp://"]
            .iter()
            .find_map(|p| url.strip_prefix(p))
            .ok_or_else(|| bad("not a net:// URL"))?;
        let (hostport, path) = rest.split_once('/').ok_or_else(|| bad("no /host/HOSTNAME/SESSION part"))?;
        let (relay, port) = match hostport.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || p.parse::<u16>().is_ok() => {
                (h, p.parse::<u16>().map_err(|_| bad(&format!("bad port {p:?}")))?)
            }
            _ => (hostport, DEFAULT_PORT),
        };
        let relay = relay.trim_start_matches('[').trim_end_matches(']');
        if relay.is_empty() {
            return Err(bad("no relay daemon host"));
        }
        let mut parts = path.split('/');
        let (Some("host"), Some(host), Some(session), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("the path is not /host/HOSTNAME/SESSION"));
        };
        if host.is_empty() || session.is_empty() {
            return Err(bad("empty host or session name"));
        }
        Ok(LiveUrl { relay: relay.to_owned(), port, host: host.to_owned(), session: session.to_owned() })
    }

    /// `HOST:PORT` of the relay daemon.
    pub fn addr(&self) -> String {
        if self.relay.contains(':') {
            format!("[{}]:{}", self.relay, self.port)
        } else {
            format!("{}:{}", self.relay, self.port)
        }
    }
}

impl std::fmt::Display for LiveUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "net://{}/host/{}/{}", self.addr(), self.host, self.session)
    }
}

/// A session the relay daemon has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    /// The relay daemon's id of it.
    pub id: u64,
    /// Live timer period, µs.
    pub live_timer_us: u32,
    /// Viewers attached.
    pub clients: u32,
    /// Streams.
    pub streams: u32,
    /// The traced host.
    pub host: String,
    /// The session's name.
    pub name: String,
}

/// A stream the relay daemon announced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamInfo {
    /// The relay daemon's id of it.
    pub id: u64,
    /// The trace it belongs to (streams of one trace share a metadata stream).
    pub trace_id: u64,
    /// A metadata stream (else a data stream).
    pub metadata: bool,
    /// Its path (relative to the session's output).
    pub path: String,
    /// Its channel.
    pub channel: String,
}

/// Where to start reading an attached session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seek {
    /// From the first packet the relay daemon has.
    Beginning = 1,
    /// From now on.
    Last = 2,
}

/// The answer to GET_NEXT_INDEX.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexStatus {
    /// A packet is ready.
    Ok,
    /// Nothing yet: ask again.
    Retry,
    /// The stream is gone (its session was destroyed) and fully read.
    Hup,
    /// Inactivity beacon: no events up to `timestamp_end`.
    Inactive,
    /// The end of the stream's index.
    Eof,
}

/// A packet index (sizes in bits, timestamps in cycles of the stream's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Index {
    /// The answer.
    pub status: IndexStatus,
    /// Byte offset of the packet in the stream.
    pub offset: u64,
    /// Packet size, bits.
    pub packet_size: u64,
    /// Content size, bits.
    pub content_size: u64,
    /// First timestamp of the packet.
    pub timestamp_begin: u64,
    /// Last timestamp of the packet (or of the beacon).
    pub timestamp_end: u64,
    /// Events the tracer discarded on this stream so far.
    pub events_discarded: u64,
    /// The CTF stream class id.
    pub stream_class: u64,
    /// `FLAG_*` bits.
    pub flags: u32,
}

/// The answer to GET_PACKET.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketStatus {
    /// The bytes are in the buffer.
    Ok,
    /// Not yet.
    Retry,
    /// Refused; the flags may say why (new metadata or streams first).
    Err(u32),
    /// The stream ended.
    Eof,
}

/// The answer to GET_METADATA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetadataStatus {
    /// New metadata bytes were appended.
    Ok,
    /// Nothing new.
    NoNew,
    /// The metadata stream is gone (its application or session ended).
    Closed,
}

/// A connection to a relay daemon's live port (blocking, with timeouts).
pub struct Viewer {
    sock: TcpStream,
    addr: String,
    minor: u32,
    buf: Vec<u8>,
}

fn be64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

fn be32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_be_bytes(a)
}

/// A fixed-size, NUL-padded C string field.
fn cstr(b: &[u8]) -> String {
    let end = memchr::memchr(0, b).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

impl Viewer {
    /// Connects to `host:port` and does the version handshake; every later read or write
    /// waits at most `timeout`.
    pub fn connect(host: &str, port: u16, timeout: Duration) -> Result<Viewer, LiveError> {
        let addr = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
        let cerr = |source| LiveError::Connect { addr: addr.clone(), source };
        let mut last = None;
        let mut sock = None;
        for a in (host, port).to_socket_addrs().map_err(cerr)? {
            match TcpStream::connect_timeout(&a, timeout) {
                Ok(s) => {
                    sock = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let sock = sock.ok_or_else(|| {
            cerr(last.unwrap_or_else(|| std::io::Error::other("the name resolves to no address")))
        })?;
        let setup = |s: &TcpStream| -> std::io::Result<()> {
            s.set_read_timeout(Some(timeout))?;
            s.set_write_timeout(Some(timeout))?;
            s.set_nodelay(true)
        };
        setup(&sock).map_err(cerr)?;
        let mut v = Viewer { sock, addr, minor: PROTOCOL_MINOR, buf: Vec::new() };
        let mut p = Vec::with_capacity(20);
        p.extend(u64::MAX.to_be_bytes());
        p.extend(PROTOCOL_MAJOR.to_be_bytes());
        p.extend(PROTOCOL_MINOR.to_be_bytes());
        p.extend(1u32.to_be_bytes()); // a command connection
        v.send(Cmd::Connect, &p)?;
        let r = v.recv(Cmd::Connect, 20)?;
        let (major, minor) = (be32(r, 8), be32(r, 12));
        if major != PROTOCOL_MAJOR {
            return Err(v.protocol(
                Cmd::Connect,
                format!("the relay daemon speaks viewer protocol {major}.{minor}, this client {PROTOCOL_MAJOR}.{PROTOCOL_MINOR}"),
            ));
        }
        v.minor = minor.min(PROTOCOL_MINOR);
        if v.minor < 4 {
            return Err(v.protocol(
                Cmd::Connect,
                format!("the relay daemon speaks viewer protocol 2.{minor}; 2.4 (lttng-tools 2.4 or later) is needed"),
            ));
        }
        Ok(v)
    }

    /// The protocol version agreed on.
    pub fn version(&self) -> (u32, u32) {
        (PROTOCOL_MAJOR, self.minor)
    }

    /// `HOST:PORT`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    fn protocol(&self, cmd: Cmd, msg: String) -> LiveError {
        LiveError::Protocol { addr: self.addr.clone(), cmd, msg }
    }

    fn io(&self, cmd: Cmd, source: std::io::Error) -> LiveError {
        let source = match source.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                std::io::Error::new(source.kind(), "the relay daemon closed the connection")
            }
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                std::io::Error::new(source.kind(), "no answer within the timeout")
            }
            _ => source,
        };
        LiveError::Io { addr: self.addr.clone(), cmd, source }
    }

    /// Sends a command header and its payload in one write.
    fn send(&mut self, cmd: Cmd, payload: &[u8]) -> Result<(), LiveError> {
        let mut m = Vec::with_capacity(16 + payload.len());
        m.extend((payload.len() as u64).to_be_bytes());
        m.extend((cmd as u32).to_be_bytes());
        m.extend(0u32.to_be_bytes());
        m.extend_from_slice(payload);
        self.sock.write_all(&m).map_err(|e| self.io(cmd, e))
    }

    /// Receives exactly `n` bytes into the reused buffer.
    fn recv(&mut self, cmd: Cmd, n: usize) -> Result<&[u8], LiveError> {
        self.buf.resize(n, 0);
        if let Err(e) = self.sock.read_exact(&mut self.buf[..n]) {
            return Err(self.io(cmd, e));
        }
        Ok(&self.buf[..n])
    }

    /// Creates the viewer session (needed before attaching).
    pub fn create_session(&mut self) -> Result<(), LiveError> {
        self.send(Cmd::CreateSession, &[])?;
        let status = be32(self.recv(Cmd::CreateSession, 4)?, 0);
        if status != 1 {
            return Err(self.protocol(Cmd::CreateSession, format!("status {status} (CREATE_SESSION_ERR)")));
        }
        Ok(())
    }

    /// The relay daemon's sessions.
    pub fn list_sessions(&mut self) -> Result<Vec<SessionInfo>, LiveError> {
        self.send(Cmd::ListSessions, &[])?;
        let n = be32(self.recv(Cmd::ListSessions, 4)?, 0) as usize;
        if n > MAX_STREAMS {
            return Err(self.protocol(Cmd::ListSessions, format!("{n} sessions (more than {MAX_STREAMS})")));
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let b = self.recv(Cmd::ListSessions, SESSION_LEN)?;
            out.push(SessionInfo {
                id: be64(b, 0),
                live_timer_us: be32(b, 8),
                clients: be32(b, 12),
                streams: be32(b, 16),
                host: cstr(&b[20..20 + HOST_NAME_MAX]),
                name: cstr(&b[20 + HOST_NAME_MAX..]),
            });
        }
        Ok(out)
    }

    fn streams(&mut self, cmd: Cmd, n: usize) -> Result<Vec<StreamInfo>, LiveError> {
        if n > MAX_STREAMS {
            return Err(self.protocol(cmd, format!("{n} streams (more than {MAX_STREAMS})")));
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let b = self.recv(cmd, STREAM_LEN)?;
            out.push(StreamInfo {
                id: be64(b, 0),
                trace_id: be64(b, 8),
                metadata: be32(b, 16) != 0,
                path: cstr(&b[20..20 + PATH_MAX]),
                channel: cstr(&b[20 + PATH_MAX..]),
            });
        }
        Ok(out)
    }

    /// Attaches to session `id`; returns its streams so far.
    pub fn attach(&mut self, id: u64, seek: Seek) -> Result<Vec<StreamInfo>, LiveError> {
        let mut p = Vec::with_capacity(20);
        p.extend(id.to_be_bytes());
        p.extend(0u64.to_be_bytes());
        p.extend((seek as u32).to_be_bytes());
        self.send(Cmd::AttachSession, &p)?;
        let b = self.recv(Cmd::AttachSession, 8)?;
        let (status, n) = (be32(b, 0), be32(b, 4) as usize);
        let why = match status {
            1 => return self.streams(Cmd::AttachSession, n),
            2 => "ATTACH_ALREADY: another viewer is attached to the session",
            3 => "ATTACH_UNK: the session id is unknown",
            4 => "ATTACH_NOT_LIVE: the session is not a live session (lttng create --live)",
            5 => "ATTACH_SEEK_ERR",
            6 => "ATTACH_NO_SESSION: no viewer session",
            _ => "unknown status",
        };
        Err(self.protocol(Cmd::AttachSession, format!("session {id}: status {status} ({why})")))
    }

    /// Streams added to session `id` since the last ask; `None` when the session is gone.
    pub fn new_streams(&mut self, id: u64) -> Result<Option<Vec<StreamInfo>>, LiveError> {
        self.send(Cmd::GetNewStreams, &id.to_be_bytes())?;
        let b = self.recv(Cmd::GetNewStreams, 8)?;
        let (status, n) = (be32(b, 0), be32(b, 4) as usize);
        match status {
            1 => self.streams(Cmd::GetNewStreams, n).map(Some),
            2 => Ok(Some(Vec::new())),
            4 => Ok(None),
            s => Err(self.protocol(
                Cmd::GetNewStreams,
                format!("session {id}: status {s} ({})", if s == 3 { "NEW_STREAMS_ERR" } else { "unknown" }),
            )),
        }
    }

    /// Appends new metadata of metadata stream `stream` to `out` (at most `max` bytes in all).
    pub fn metadata(
        &mut self,
        stream: u64,
        out: &mut Vec<u8>,
        max: usize,
    ) -> Result<MetadataStatus, LiveError> {
        self.send(Cmd::GetMetadata, &stream.to_be_bytes())?;
        let b = self.recv(Cmd::GetMetadata, 12)?;
        let (len, status) = (be64(b, 0), be32(b, 8));
        match status {
            1 => {}
            2 => return Ok(MetadataStatus::NoNew),
            3 | 4 => return Ok(MetadataStatus::Closed),
            s => return Err(self.protocol(Cmd::GetMetadata, format!("stream {stream}: unknown status {s}"))),
        }
        if len == 0 || (out.len() as u64).saturating_add(len) > max as u64 {
            return Err(self.protocol(
                Cmd::GetMetadata,
                format!(
                    "stream {stream}: {len} bytes of metadata (limit {max} in all, {} so far)",
                    out.len()
                ),
            ));
        }
        let start = out.len();
        out.resize(start + len as usize, 0);
        if let Err(e) = self.sock.read_exact(&mut out[start..]) {
            out.truncate(start);
            return Err(self.io(Cmd::GetMetadata, e));
        }
        Ok(MetadataStatus::Ok)
    }

    /// The next packet index of data stream `stream`.
    pub fn next_index(&mut self, stream: u64) -> Result<Index, LiveError> {
        self.send(Cmd::GetNextIndex, &stream.to_be_bytes())?;
        let b = self.recv(Cmd::GetNextIndex, INDEX_LEN)?;
        let raw = be32(b, 56);
        let mut ix = Index {
            status: IndexStatus::Ok,
            offset: be64(b, 0),
            packet_size: be64(b, 8),
            content_size: be64(b, 16),
            timestamp_begin: be64(b, 24),
            timestamp_end: be64(b, 32),
            events_discarded: be64(b, 40),
            stream_class: be64(b, 48),
            flags: be32(b, 60),
        };
        ix.status = match raw {
            1 => IndexStatus::Ok,
            2 => IndexStatus::Retry,
            3 => IndexStatus::Hup,
            5 => IndexStatus::Inactive,
            6 => IndexStatus::Eof,
            4 => return Err(self.protocol(Cmd::GetNextIndex, format!("stream {stream}: INDEX_ERR"))),
            s => return Err(self.protocol(Cmd::GetNextIndex, format!("stream {stream}: unknown status {s}"))),
        };
        Ok(ix)
    }

    /// Reads `len` bytes at `offset` of data stream `stream` into `out` (replacing it).
    pub fn packet(
        &mut self,
        stream: u64,
        offset: u64,
        len: u32,
        out: &mut Vec<u8>,
    ) -> Result<PacketStatus, LiveError> {
        let mut p = Vec::with_capacity(20);
        p.extend(stream.to_be_bytes());
        p.extend(offset.to_be_bytes());
        p.extend(len.to_be_bytes());
        self.send(Cmd::GetPacket, &p)?;
        let b = self.recv(Cmd::GetPacket, 12)?;
        let (status, got, flags) = (be32(b, 0), be32(b, 4), be32(b, 8));
        match status {
            1 => {}
            2 => return Ok(PacketStatus::Retry),
            3 => return Ok(PacketStatus::Err(flags)),
            4 => return Ok(PacketStatus::Eof),
            s => return Err(self.protocol(Cmd::GetPacket, format!("stream {stream}: unknown status {s}"))),
        }
        if got == 0 || got > len {
            return Err(self.protocol(
                Cmd::GetPacket,
                format!("stream {stream}: {got} bytes sent for a request of {len} at offset {offset}"),
            ));
        }
        out.resize(got as usize, 0);
        if let Err(e) = self.sock.read_exact(out) {
            out.clear();
            return Err(self.io(Cmd::GetPacket, e));
        }
        Ok(PacketStatus::Ok)
    }

    /// Detaches from session `id`.
    pub fn detach(&mut self, id: u64) -> Result<(), LiveError> {
        self.send(Cmd::DetachSession, &id.to_be_bytes())?;
        match be32(self.recv(Cmd::DetachSession, 4)?, 0) {
            1 => Ok(()),
            s => Err(self.protocol(
                Cmd::DetachSession,
                format!(
                    "session {id}: status {s} ({})",
                    match s {
                        2 => "DETACH_SESSION_UNK",
                        3 => "DETACH_SESSION_ERR",
                        _ => "unknown",
                    }
                ),
            )),
        }
    }
}

/// Settings of a [`LiveReader`].
#[derive(Debug, Clone)]
pub struct LiveOptions {
    /// Decoder settings (strictness, packet size cap).
    pub decode: DecodeOptions,
    /// Longest wait for any answer of the relay daemon.
    pub timeout: Duration,
    /// Metadata bytes kept at most per trace.
    pub max_metadata_bytes: usize,
    /// Where to start: the session's first packet or now.
    pub seek: Seek,
}

impl Default for LiveOptions {
    fn default() -> Self {
        LiveOptions {
            decode: DecodeOptions::default(),
            timeout: Duration::from_secs(10),
            max_metadata_bytes: 64 << 20,
            seek: Seek::Beginning,
        }
    }
}

/// What a live read saw so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveStats {
    /// Data streams announced.
    pub streams: u64,
    /// Data streams that hung up (fully read).
    pub streams_ended: u64,
    /// Packets received.
    pub packets: u64,
    /// Packet bytes received.
    pub bytes: u64,
    /// Metadata bytes received.
    pub metadata_bytes: u64,
    /// Metadata versions parsed (it grows as tracepoints register).
    pub metadata_versions: u64,
    /// RETRY answers (nothing new yet).
    pub retries: u64,
    /// Inactivity beacons.
    pub beacons: u64,
    /// Events the tracer discarded (the indexes' cumulative counts, summed over streams).
    pub discarded_events: u64,
}

/// What [`LiveReader::poll`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll {
    /// This many events were appended (at least one).
    Events(usize),
    /// Nothing can be released yet: wait a little (a fraction of the live timer) and poll again.
    Idle,
    /// The session is gone and everything it recorded was read.
    End,
}

struct TraceMeta {
    stream: Option<u64>,
    bytes: Vec<u8>,
    parsed_len: usize,
    compiled: Option<Arc<Compiled>>,
    closed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The decoder holds an event.
    Event,
    /// Ask for the next index; no event of this stream comes before `lower` (ns).
    Wait,
    /// Fully read.
    Ended,
}

struct Stream {
    id: u64,
    trace: u64,
    name: String,
    dec: Option<StreamDecoder>,
    state: State,
    /// No event of this stream comes before this time (ns).
    lower: u64,
    discarded: u64,
}

/// Follows one live session: its events, merged in time order (see the module docs).
pub struct LiveReader {
    viewer: Viewer,
    url: LiveUrl,
    session: u64,
    opts: LiveOptions,
    source: SourceId,
    traces: HashMap<u64, TraceMeta>,
    streams: Vec<Stream>,
    want_streams: bool,
    closed: bool,
    idle_rounds: u32,
    watermark: u64,
    packet: Vec<u8>,
    stats: LiveStats,
}

impl LiveReader {
    /// Connects, creates a viewer session, finds `url`'s session and attaches to it.
    pub fn open(url: &LiveUrl, source: SourceId, opts: LiveOptions) -> Result<LiveReader, LiveError> {
        let mut viewer = Viewer::connect(&url.relay, url.port, opts.timeout)?;
        viewer.create_session()?;
        let sessions = viewer.list_sessions()?;
        let Some(s) = sessions.iter().find(|s| s.host == url.host && s.name == url.session) else {
            let have: Vec<String> = sessions.iter().map(|s| format!("{}/{}", s.host, s.name)).collect();
            return Err(LiveError::NoSession {
                addr: viewer.addr.clone(),
                host: url.host.clone(),
                session: url.session.clone(),
                have: if have.is_empty() { "none".into() } else { have.join(", ") },
            });
        };
        let session = s.id;
        tracing::info!(
            "{url}: session {session}, live timer {} µs, {} stream(s), viewer protocol {}.{}",
            s.live_timer_us,
            s.streams,
            PROTOCOL_MAJOR,
            viewer.minor
        );
        let streams = viewer.attach(session, opts.seek)?;
        let mut r = LiveReader {
            viewer,
            url: url.clone(),
            session,
            opts,
            source,
            traces: HashMap::new(),
            streams: Vec::new(),
            want_streams: false,
            closed: false,
            idle_rounds: 0,
            watermark: 0,
            packet: Vec::new(),
            stats: LiveStats::default(),
        };
        r.add_streams(streams)?;
        Ok(r)
    }

    /// The session's URL.
    pub fn url(&self) -> &LiveUrl {
        &self.url
    }

    /// Counters so far.
    pub fn stats(&self) -> &LiveStats {
        &self.stats
    }

    /// The decoders' counters summed (events, packets, the tracer's discarded events and
    /// missing packets, decoding errors).
    pub fn decode_stats(&self) -> StreamStats {
        let mut s = StreamStats::default();
        for d in self.streams.iter().filter_map(|s| s.dec.as_ref()) {
            s.merge(d.stats());
        }
        s
    }

    /// Every event released so far is at or before this time (ns), and none released later
    /// will be before it.
    pub fn watermark(&self) -> u64 {
        self.watermark
    }

    /// The metadata of the session's traces parsed so far.
    pub fn traces(&self) -> impl Iterator<Item = &Arc<Compiled>> {
        self.traces.values().filter_map(|t| t.compiled.as_ref())
    }

    /// Data streams not fully read yet.
    pub fn active_streams(&self) -> usize {
        self.streams.iter().filter(|s| s.state != State::Ended).count()
    }

    fn add_streams(&mut self, list: Vec<StreamInfo>) -> Result<(), LiveError> {
        for s in list {
            let t = self.traces.entry(s.trace_id).or_insert_with(|| TraceMeta {
                stream: None,
                bytes: Vec::new(),
                parsed_len: 0,
                compiled: None,
                closed: false,
            });
            if s.metadata {
                t.stream = Some(s.id);
                continue;
            }
            if self.streams.len() >= MAX_STREAMS {
                return Err(self.viewer.protocol(
                    Cmd::GetNewStreams,
                    format!("more than {MAX_STREAMS} streams in session {}", self.session),
                ));
            }
            tracing::debug!("{}: stream {} {}/{}", self.url, s.id, s.path, s.channel);
            self.stats.streams += 1;
            let name = format!("{}/{}/{}", self.url, s.path, s.id);
            let dec = t.compiled.clone().map(|c| StreamDecoder::live(c, &name, self.opts.decode.clone()));
            self.streams.push(Stream {
                id: s.id,
                trace: s.trace_id,
                name,
                dec,
                state: State::Wait,
                lower: self.watermark,
                discarded: 0,
            });
        }
        Ok(())
    }

    /// Fetches trace `trace_id`'s new metadata and re-parses it when it grew.
    fn refresh_metadata(&mut self, trace_id: u64) -> Result<(), LiveError> {
        let Some(t) = self.traces.get_mut(&trace_id) else { return Ok(()) };
        let Some(ms) = t.stream else { return Ok(()) };
        if t.closed {
            return Ok(());
        }
        loop {
            let before = t.bytes.len();
            match self.viewer.metadata(ms, &mut t.bytes, self.opts.max_metadata_bytes)? {
                MetadataStatus::Ok => self.stats.metadata_bytes += (t.bytes.len() - before) as u64,
                MetadataStatus::NoNew => break,
                MetadataStatus::Closed => {
                    t.closed = true;
                    break;
                }
            }
        }
        if t.bytes.len() == t.parsed_len {
            return Ok(());
        }
        let name = format!("{}/metadata (trace {trace_id})", self.url);
        let path = std::path::Path::new(&name);
        // The relay daemon passes on what the consumer flushed: a chunk may end inside a
        // declaration; keep the previous version until the rest arrives.
        let parsed = metadata_text(&t.bytes, path)
            .and_then(|text| super::tsdl::parse(&text).map_err(|e| e.with_path(path)))
            .and_then(|md| compile(md, path));
        match parsed {
            Ok(c) => {
                let c = Arc::new(c);
                t.parsed_len = t.bytes.len();
                t.compiled = Some(c.clone());
                self.stats.metadata_versions += 1;
                for s in self.streams.iter_mut().filter(|s| s.trace == trace_id) {
                    match &mut s.dec {
                        Some(d) => d.set_trace(c.clone()),
                        None => {
                            s.dec = Some(StreamDecoder::live(c.clone(), &s.name, self.opts.decode.clone()))
                        }
                    }
                }
            }
            Err(e) if t.closed => return Err(e.into()),
            Err(e) => tracing::debug!("{name}: not parseable yet ({e}); waiting for more"),
        }
        Ok(())
    }

    /// Asks the relay daemon for stream `i`'s next packet and decodes its first event.
    fn fetch(&mut self, i: usize) -> Result<bool, LiveError> {
        let (id, trace) = (self.streams[i].id, self.streams[i].trace);
        if self.streams[i].dec.is_none() {
            self.refresh_metadata(trace)?;
            if self.streams[i].dec.is_none() {
                // No metadata will ever come (its stream is gone): nothing of this stream can
                // be decoded.
                if self.traces.get(&trace).is_none_or(|t| t.closed) {
                    tracing::warn!(
                        "{}: stream {id} has no metadata and its metadata stream is gone",
                        self.url
                    );
                    self.streams[i].state = State::Ended;
                    self.stats.streams_ended += 1;
                    return Ok(true);
                }
                return Ok(false);
            }
        }
        let ix = self.viewer.next_index(id)?;
        if ix.flags & FLAG_NEW_STREAM != 0 {
            self.want_streams = true;
        }
        if ix.flags & FLAG_NEW_METADATA != 0 {
            self.refresh_metadata(trace)?;
        }
        let to_ns = |me: &Self, cycles: u64| -> Option<u64> {
            let c = me.traces.get(&trace)?.compiled.as_ref()?;
            Some(c.cycles_to_ns(c.stream_class(ix.stream_class)?, cycles))
        };
        match ix.status {
            IndexStatus::Retry => {
                self.stats.retries += 1;
                Ok(false)
            }
            IndexStatus::Hup | IndexStatus::Eof => {
                self.streams[i].state = State::Ended;
                self.stats.streams_ended += 1;
                Ok(true)
            }
            IndexStatus::Inactive => {
                self.stats.beacons += 1;
                if let Some(ns) = to_ns(self, ix.timestamp_end) {
                    let s = &mut self.streams[i];
                    s.lower = s.lower.max(ns);
                }
                Ok(true)
            }
            IndexStatus::Ok => {
                let bytes = ix.packet_size / 8;
                if bytes == 0 || bytes > self.opts.decode.max_packet_bytes || bytes > u32::MAX as u64 {
                    return Err(self.viewer.protocol(
                        Cmd::GetNextIndex,
                        format!(
                            "stream {id}: packet of {bytes} bytes at offset {} (limit {})",
                            ix.offset, self.opts.decode.max_packet_bytes
                        ),
                    ));
                }
                let mut packet = std::mem::take(&mut self.packet);
                let mut tries = 0;
                let got = loop {
                    match self.viewer.packet(id, ix.offset, bytes as u32, &mut packet)? {
                        PacketStatus::Ok => break true,
                        PacketStatus::Eof => break false,
                        PacketStatus::Retry => {}
                        PacketStatus::Err(flags) if flags & (FLAG_NEW_METADATA | FLAG_NEW_STREAM) != 0 => {
                            if flags & FLAG_NEW_STREAM != 0 {
                                self.want_streams = true;
                            }
                            if flags & FLAG_NEW_METADATA != 0 {
                                self.refresh_metadata(trace)?;
                            }
                        }
                        PacketStatus::Err(flags) => {
                            return Err(self.viewer.protocol(
                                Cmd::GetPacket,
                                format!(
                                    "stream {id}: GET_PACKET_ERR at offset {} (flags {flags:#x})",
                                    ix.offset
                                ),
                            ));
                        }
                    }
                    tries += 1;
                    if tries > 100 {
                        return Err(self.viewer.protocol(
                            Cmd::GetPacket,
                            format!("stream {id}: the packet at offset {} stayed unavailable", ix.offset),
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                };
                let end = to_ns(self, ix.timestamp_end);
                let s = &mut self.streams[i];
                if !got {
                    s.state = State::Ended;
                    self.stats.streams_ended += 1;
                    self.packet = packet;
                    return Ok(true);
                }
                self.stats.packets += 1;
                self.stats.bytes += packet.len() as u64;
                if ix.events_discarded > s.discarded {
                    self.stats.discarded_events += ix.events_discarded - s.discarded;
                    s.discarded = ix.events_discarded;
                }
                let Some(dec) = s.dec.as_mut() else { return Ok(false) };
                dec.push_packet(&packet);
                self.packet = packet;
                if dec.next_event()? {
                    s.state = State::Event;
                } else if let Some(ns) = end {
                    // An empty packet: nothing before its end.
                    s.lower = s.lower.max(ns);
                }
                Ok(true)
            }
        }
    }

    /// Talks to the relay daemon once around (new streams, metadata, one index per waiting
    /// stream), then appends up to `max` events that can be released, in time order.
    pub fn poll(&mut self, out: &mut Vec<Event>, max: usize) -> Result<Poll, LiveError> {
        let no_data = self.streams.iter().all(|s| s.state == State::Ended);
        if self.want_streams || no_data || self.idle_rounds % 20 == 19 {
            self.want_streams = false;
            match self.viewer.new_streams(self.session)? {
                Some(list) => self.add_streams(list)?,
                None => self.closed = true,
            }
        }
        let pending: Vec<u64> = self
            .traces
            .iter()
            .filter(|(_, t)| t.stream.is_some() && t.compiled.is_none())
            .map(|(k, _)| *k)
            .collect();
        for t in pending {
            self.refresh_metadata(t)?;
        }
        let mut progress = false;
        for i in 0..self.streams.len() {
            if self.streams[i].state == State::Wait {
                progress |= self.fetch(i)?;
            }
        }
        let n = self.release(out, max)?;
        if n > 0 {
            self.idle_rounds = 0;
            return Ok(Poll::Events(n));
        }
        if self.closed && self.streams.iter().all(|s| s.state == State::Ended) {
            return Ok(Poll::End);
        }
        if !progress {
            self.idle_rounds = self.idle_rounds.wrapping_add(1);
        }
        Ok(Poll::Idle)
    }

    /// Releases events no waiting stream can precede.
    fn release(&mut self, out: &mut Vec<Event>, max: usize) -> Result<usize, LiveError> {
        let mut n = 0;
        loop {
            let bound = self.streams.iter().filter(|s| s.state == State::Wait).map(|s| s.lower).min();
            let mut best: Option<(u64, usize)> = None;
            for (i, s) in self.streams.iter().enumerate() {
                if s.state == State::Event
                    && let Some(d) = &s.dec
                {
                    let key = (d.time_ns(), i);
                    if best.is_none_or(|b| key < b) {
                        best = Some(key);
                    }
                }
            }
            let mark = match (best, bound) {
                (Some((t, _)), Some(b)) => t.min(b),
                (Some((t, _)), None) => t,
                (None, Some(b)) => b,
                (None, None) => self.watermark,
            };
            self.watermark = self.watermark.max(mark);
            let Some((t, i)) = best else { return Ok(n) };
            if n >= max || bound.is_some_and(|b| t > b) {
                return Ok(n);
            }
            let s = &mut self.streams[i];
            let Some(d) = s.dec.as_mut() else { return Ok(n) };
            out.push(d.event().to_event(self.source));
            n += 1;
            if !d.next_event()? {
                s.state = State::Wait;
                s.lower = s.lower.max(t);
            }
        }
    }

    /// Detaches from the session (the connection closes when the reader is dropped).
    pub fn detach(&mut self) -> Result<(), LiveError> {
        self.viewer.detach(self.session)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = LiveUrl::parse("net://127.0.0.1:15344/host/vm/s1").unwrap();
        assert_eq!(
            (u.relay.as_str(), u.port, u.host.as_str(), u.session.as_str()),
            ("127.0.0.1", 15344, "vm", "s1")
        );
        assert_eq!(u.to_string(), "net://127.0.0.1:15344/host/vm/s1");
        let u = LiveUrl::parse("net://relay/host/node-1/my-session").unwrap();
        assert_eq!((u.relay.as_str(), u.port), ("relay", DEFAULT_PORT));
        let u = LiveUrl::parse("net://[::1]:9/host/h/s").unwrap();
        assert_eq!((u.relay.as_str(), u.port, u.addr()), ("::1", 9, "[::1]:9".to_string()));
        for bad in [
            "file:///x",
            "net://h",
            "net://h/host/x",
            "net://h:99999/host/a/b",
            "net://h/session/a/b",
            "net:///host/a/b",
        ] {
            let e = LiveUrl::parse(bad).unwrap_err().to_string();
            assert!(e.contains("net://HOST[:PORT]/host/HOSTNAME/SESSION"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_closed_port_is_a_connect_error_naming_the_address() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        let e = Viewer::connect("127.0.0.1", port, Duration::from_secs(2)).err().unwrap().to_string();
        assert!(e.starts_with(&format!("relay daemon 127.0.0.1:{port}: connecting")), "{e}");
    }

    #[test]
    fn a_peer_that_hangs_up_is_an_error_naming_the_command() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; 36];
            s.read_exact(&mut b).unwrap();
            // The handshake header: 20 bytes of payload, command 1, version 0.
            assert_eq!(&b[..16], &[0, 0, 0, 0, 0, 0, 0, 20, 0, 0, 0, 1, 0, 0, 0, 0]);
            // Answer with protocol 3.0.
            let mut r = Vec::new();
            r.extend(7u64.to_be_bytes());
            r.extend(3u32.to_be_bytes());
            r.extend(0u32.to_be_bytes());
            r.extend(1u32.to_be_bytes());
            s.write_all(&r).unwrap();
        });
        let e = Viewer::connect("127.0.0.1", port, Duration::from_secs(5)).err().unwrap().to_string();
        t.join().unwrap();
        assert!(e.contains("CONNECT: the relay daemon speaks viewer protocol 3.0"), "{e}");
    }
}
