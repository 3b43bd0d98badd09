//! Round and flow limits: a flow whose upstream keeps asking, or that a client keeps alive
//! round after round, ends.
//!
//! Invariant: every token this sidecar mints carries its round number and the flow's
//! start (`n`, `fs` claims). Past `mrtr.max_rounds` the upstream's next `input_required`
//! becomes an error instead of a token; a retry whose flow started more than
//! `mrtr.max_flow_seconds` ago is refused before anything is forwarded. Tokens without
//! these claims (the reference SDK's) start a flow of their own.

use crate::token::Flow;

/// The configured limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowLimits {
    pub max_rounds: u32,
    pub max_flow_seconds: u64,
}

/// The upstream asked once more than `max_rounds` allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundLimit;

impl FlowLimits {
    /// The flow position of a round minted `now`, after `previous` (the retry's token,
    /// if it carried one).
    pub fn next(&self, previous: Option<Flow>, now: f64) -> Result<Flow, RoundLimit> {
        let flow = match previous {
            Some(previous) => Flow {
                round: previous.round.saturating_add(1),
                started: previous.started,
            },
            None => Flow {
                round: 1,
                started: now.floor(),
            },
        };
        if flow.round > self.max_rounds {
            return Err(RoundLimit);
        }
        Ok(flow)
    }

    /// Whether a flow started at `flow.started` is too old to go on `now`.
    pub(crate) fn too_old(&self, flow: Option<Flow>, now: f64) -> bool {
        flow.is_some_and(|flow| now - flow.started > self.max_flow_seconds as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_count_up_and_stop_at_the_limit() {
        let limits = FlowLimits {
            max_rounds: 3,
            max_flow_seconds: 60,
        };
        let first = limits.next(None, 1000.7).unwrap();
        assert_eq!(
            first,
            Flow {
                round: 1,
                started: 1000.0
            }
        );
        let second = limits.next(Some(first), 1010.0).unwrap();
        assert_eq!(
            second,
            Flow {
                round: 2,
                started: 1000.0
            }
        );
        let third = limits.next(Some(second), 1020.0).unwrap();
        assert_eq!(limits.next(Some(third), 1030.0), Err(RoundLimit));
        assert!(!limits.too_old(Some(third), 1060.0));
        assert!(limits.too_old(Some(third), 1060.5));
        assert!(!limits.too_old(None, 1e12));
    }
}
