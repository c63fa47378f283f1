//! The instrumentation surface of the example: thin macros and a span wrapper over weft-probe
//! that compile to nothing without the `probes` feature (the overhead baseline).
//!
//! * [`crate::tp!`] declares a tracepoint (`weft_probe::tracepoint!` syntax).
//! * [`crate::ev!`] records an event; [`crate::on!`] tests a tracepoint.
//! * [`crate::span!`] begins a span (internal, or `Server`/`Client` with an optional remote
//!   parent); [`Span`] carries annotations, key/values, endpoints and the `traceparent` to send.
//! * [`enter_baggage`] scopes a request's incoming baggage to the handling thread, [`baggage`]
//!   is what to send downstream (both nothing unless a happened-before join query runs).

#[cfg(feature = "probes")]
#[macro_export]
macro_rules! tp {
    ($($t:tt)*) => { weft_probe::tracepoint!($($t)*); };
}

#[cfg(not(feature = "probes"))]
#[macro_export]
macro_rules! tp {
    ($(#[$m:meta])* $vis:vis static $id:ident = $($rest:tt)*) => {
        #[allow(dead_code)]
        $vis static $id: () = ();
    };
}

#[cfg(feature = "probes")]
#[macro_export]
macro_rules! ev {
    ($tp:ident $(, $k:ident = $v:expr)* $(,)?) => { weft_probe::event!($tp $(, $k = $v)*) };
}

#[cfg(not(feature = "probes"))]
#[macro_export]
macro_rules! ev {
    ($tp:ident $(, $k:ident = $v:expr)* $(,)?) => {{
        let _ = &$tp;
        let _ = || {
            $(let _ = &$v;)*
        };
    }};
}

#[cfg(feature = "probes")]
#[macro_export]
macro_rules! on {
    ($tp:ident) => {
        $tp.enabled()
    };
}

#[cfg(not(feature = "probes"))]
#[macro_export]
macro_rules! on {
    ($tp:ident) => {{
        let _ = &$tp;
        false
    }};
}

#[cfg(feature = "probes")]
#[macro_export]
macro_rules! span {
    ($tp:ident) => {
        $crate::obs::Span::wrap($tp.span())
    };
    ($tp:ident, $kind:ident, $remote:expr) => {
        $crate::obs::Span::wrap(
            $tp.span_with(weft_probe::SpanKind::$kind, $crate::obs::Remote::get(&$remote)),
        )
    };
}

#[cfg(not(feature = "probes"))]
#[macro_export]
macro_rules! span {
    ($tp:ident) => {{
        let _ = &$tp;
        $crate::obs::Span
    }};
    ($tp:ident, $kind:ident, $remote:expr) => {{
        let _ = (&$tp, &$remote);
        $crate::obs::Span
    }};
}

#[cfg(feature = "probes")]
mod imp {
    use weft_probe::value::KeyedValue;

    /// A remote parent extracted from a request (`traceparent`).
    #[derive(Debug, Clone, Copy, Default)]
    pub struct Remote(Option<weft_probe::Context>);

    impl Remote {
        /// No remote parent (the thread's current span is the parent).
        pub const NONE: Remote = Remote(None);

        pub fn extract(traceparent: Option<&str>) -> Remote {
            Remote(traceparent.and_then(|t| weft_probe::Context::from_traceparent(t).ok()))
        }
        pub fn get(&self) -> Option<&weft_probe::Context> {
            self.0.as_ref()
        }
    }

    /// A span (ends when dropped).
    pub struct Span(weft_probe::Span);

    impl Span {
        pub fn wrap(s: weft_probe::Span) -> Span {
            Span(s)
        }
        pub fn annotate(&self, a: &str) {
            self.0.annotate(a);
        }
        pub fn kv_str(&self, k: &str, v: &str) {
            self.0.kv(k, KeyedValue::Str(v));
        }
        pub fn kv_u64(&self, k: &str, v: u64) {
            self.0.kv(k, KeyedValue::U64(v));
        }
        pub fn endpoint(&self, service: &str, ip: &str, port: u16) {
            self.0.endpoint(weft_probe::Endpoint { service, ip, port });
        }
        /// What to send downstream (`None` when not recording).
        pub fn traceparent(&self) -> Option<String> {
            self.0.context().map(|c| c.to_traceparent())
        }
        pub fn is_recording(&self) -> bool {
            self.0.is_recording()
        }
    }

    /// Make a request's baggage the thread's until the guard drops.
    pub fn enter_baggage(header: Option<&str>) -> weft_probe::baggage::Guard {
        weft_probe::baggage::enter(header)
    }

    /// The baggage to send downstream.
    pub fn baggage() -> Option<String> {
        weft_probe::baggage::header()
    }

    /// Start the probe runtime (segment visible to the agent before the first event).
    pub fn init(service: &str) {
        let mut c = weft_probe::Config::from_env();
        if c.service.is_none() {
            c.service = Some(service.to_string());
        }
        weft_probe::init(c);
    }

    pub fn shutdown() {
        weft_probe::shutdown();
    }

    pub const ENABLED: bool = true;
}

#[cfg(not(feature = "probes"))]
mod imp {
    /// Nothing: probes are compiled out.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct Remote;

    impl Remote {
        pub const NONE: Remote = Remote;

        pub fn extract(_traceparent: Option<&str>) -> Remote {
            Remote
        }
    }

    /// A span that records nothing.
    pub struct Span;

    impl Span {
        #[inline(always)]
        pub fn annotate(&self, _a: &str) {}
        #[inline(always)]
        pub fn kv_str(&self, _k: &str, _v: &str) {}
        #[inline(always)]
        pub fn kv_u64(&self, _k: &str, _v: u64) {}
        #[inline(always)]
        pub fn endpoint(&self, _service: &str, _ip: &str, _port: u16) {}
        #[inline(always)]
        pub fn traceparent(&self) -> Option<String> {
            None
        }
        #[inline(always)]
        pub fn is_recording(&self) -> bool {
            false
        }
    }

    /// Nothing to restore.
    pub struct BaggageGuard;

    #[inline(always)]
    pub fn enter_baggage(_header: Option<&str>) -> BaggageGuard {
        BaggageGuard
    }

    #[inline(always)]
    pub fn baggage() -> Option<String> {
        None
    }

    pub fn init(_service: &str) {}
    pub fn shutdown() {}

    pub const ENABLED: bool = false;
}

pub use imp::*;
