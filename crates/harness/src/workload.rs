//! Workloads: `(t tasks, m sub-agents)` shapes of the paper's Table III.

use std::fmt;
use std::str::FromStr;

use knox_types::apm::{Topology, TopologyKind};

/// The 13 workloads of the paper, in its order.
pub const PAPER_WORKLOADS: [&str; 13] = [
    "st-sa",
    "mt-sa-seq:2",
    "mt-sa-seq:4",
    "mt-sa-seq:6",
    "mt-sa-int:2",
    "mt-sa-int:4",
    "mt-sa-int:6",
    "mt-ma:2:2",
    "mt-ma:4:2",
    "mt-ma:4:4",
    "mt-ma:6:2",
    "mt-ma:6:4",
    "mt-ma:6:6",
];

/// Most tasks or agents a workload may have.
pub const MAX_TASKS: u32 = 64;

/// A workload shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Workload(pub Topology);

/// A workload specification that does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "invalid workload `{0}`: expected st-sa, mt-sa-seq:T, mt-sa-int:T or mt-ma:T:M with 2 ≤ T ≤ 64 and 2 ≤ M ≤ T"
)]
pub struct WorkloadError(String);

impl FromStr for Workload {
    type Err = WorkloadError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || WorkloadError(s.to_string());
        let num = |x: &str| {
            x.parse::<u32>()
                .ok()
                .filter(|n| (2..=MAX_TASKS).contains(n))
                .ok_or_else(err)
        };
        let parts: Vec<&str> = s.split(':').collect();
        let topo = |kind, tasks, agents| Topology {
            kind,
            tasks,
            agents,
        };
        let t = match parts.as_slice() {
            ["st-sa"] => topo(TopologyKind::StSa, 1, 1),
            ["mt-sa-seq", t] => topo(TopologyKind::MtSaSeq, num(t)?, 1),
            ["mt-sa-int", t] => topo(TopologyKind::MtSaInt, num(t)?, 1),
            ["mt-ma", t, m] => {
                let (t, m) = (num(t)?, num(m)?);
                if m > t {
                    return Err(err());
                }
                topo(TopologyKind::MtMa, t, m)
            }
            _ => return Err(err()),
        };
        Ok(Self(t))
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Topology {
            kind,
            tasks,
            agents,
        } = self.0;
        match kind {
            TopologyKind::StSa => write!(f, "ST-SA (1,1)"),
            TopologyKind::MtSaSeq => write!(f, "MT-SA seq ({tasks},1)"),
            TopologyKind::MtSaInt => write!(f, "MT-SA int ({tasks},1)"),
            TopologyKind::MtMa => write!(f, "MT-MA ({tasks},{agents})"),
        }
    }
}

impl Workload {
    /// The CLI spelling (`mt-ma:4:2`).
    pub fn spec(&self) -> String {
        let Topology {
            kind,
            tasks,
            agents,
        } = self.0;
        match kind {
            TopologyKind::StSa => "st-sa".into(),
            TopologyKind::MtSaSeq => format!("mt-sa-seq:{tasks}"),
            TopologyKind::MtSaInt => format!("mt-sa-int:{tasks}"),
            TopologyKind::MtMa => format!("mt-ma:{tasks}:{agents}"),
        }
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn parses_all_paper_workloads_and_round_trips() {
        for w in PAPER_WORKLOADS {
            let parsed: Workload = w.parse().unwrap();
            assert_eq!(parsed.spec(), w);
        }
        for bad in [
            "",
            "st-sa:1",
            "mt-sa-seq:1",
            "mt-sa-seq:x",
            "mt-ma:2:4",
            "mt-ma:4",
            "mt-ma:100:2",
            "xx",
        ] {
            assert!(bad.parse::<Workload>().is_err(), "{bad}");
        }
    }
}
