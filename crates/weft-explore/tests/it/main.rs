//! weft-explore's integration tests: the loop in replay against generated ground truth.

mod replay;
