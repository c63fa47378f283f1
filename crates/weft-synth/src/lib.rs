//! # weft-synth
//!
//! Synthetic spans, simulator logs, CTF traces and stores for the demo, benches and tests:
//! every generator weft's own data comes from, deterministic for a seed, kept out of the
//! production crates (only the `weft` binary links it, for `serve --demo` and `loadgen`).
//!
//! | module | generates | used by |
//! |---|---|---|
//! | [`sample`] | spans with attributes of every type, events and links (`spans(n, seed)`) | codec tests and benches |
//! | [`shop`] | the traffic of a small online shop of microservices, OTel-instrumented ([`shop::Shop`]) | the demo, `weft loadgen`, store benches and tests |
//! | [`simlog`] | coherent SimBricks ping logs (gem5, nicbm, ns-3) and their symbol tables | weaving tests, benches, examples |
//! | [`ctf`] | CTF 1.8 traces in LTTng-UST's layout, with their metadata | CTF reader tests, benches, fuzzing |
//! | [`vaif`] | exhaustive traces of a checkout service with three injected performance problems and a quiet request type ([`vaif::Generator`]) | `weft explore`'s replay tests |
//! | [`demo`] | `weft serve --demo`: shop traffic, woven simulator requests, the woven ping | the weft binary, UI tests |

#![warn(missing_docs)]

pub mod ctf;
pub mod demo;
pub mod sample;
pub mod shop;
pub mod simlog;
pub mod vaif;
