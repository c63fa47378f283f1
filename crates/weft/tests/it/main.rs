//! End-to-end tests of the `weft` binary (one test binary): real `weft serve` and `weft agent`
//! processes, the archipelago example's four tiers as further processes, real HTTP.

mod agent;
