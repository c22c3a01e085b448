//! The paper's figures, to be shown beside ours and labelled as the paper's: Table III,
//! the per-bundle overhead of Figures 4–8 (its Python implementation on a TDX host) and
//! the effectiveness it reports (§VI-A). Nothing here is measured by Knox.

use crate::pool::Guard;

/// The paper's flow pool per guard: regulation 75 + 75, the others 200 + 200.
pub fn pool_size(g: Guard) -> usize {
    match g {
        Guard::Regulation => 150,
        Guard::Trajectory | Guard::Syscall | Guard::Stop => 400,
    }
}

/// The paper's toolkit count (the public InjecAgent data has 38).
pub const TOOLKITS: usize = 40;

/// One cell of Table III: how many bundles of `t` flows a pool of `pool` flows gives,
/// and how many flows they hold (trailing flows are dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Partition {
    /// Bundles.
    pub bundles: usize,
    /// Flows in them.
    pub flows: usize,
}

/// Table III's partition of a pool of `pool` flows into bundles of `t`.
pub fn table3(pool: usize, t: usize) -> Partition {
    let t = t.max(1);
    Partition {
        bundles: pool / t,
        flows: pool / t * t,
    }
}

/// A range the paper reports, in its unit.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Range {
    /// Lower end.
    pub lo: f64,
    /// Upper end.
    pub hi: f64,
}

impl std::fmt::Display for Range {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if (self.lo - self.hi).abs() < f64::EPSILON {
            write!(f, "~{}", self.lo)
        } else {
            write!(f, "{}–{}", self.lo, self.hi)
        }
    }
}

const fn r(lo: f64, hi: f64) -> Range {
    Range { lo, hi }
}

/// The paper's per-bundle overhead of one guard (ms), over the 13 workloads.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Overhead {
    /// AEG construction and guard checks.
    pub aeg: Range,
    /// Measurement (hashing the attested payloads).
    pub meas: Range,
    /// Hardware evidence (TDX quote and GPU evidence).
    pub hw: Range,
    /// In-TEE signature.
    pub sign: Range,
    /// Total.
    pub total: Range,
    /// The baseline: the LLM time of the run, in seconds.
    pub baseline_s: Range,
    /// The largest overhead relative to the baseline, in percent.
    pub max_pct: f64,
}

/// Figures 5–8 (DESIGN.md's table).
pub fn overhead(g: Guard) -> Overhead {
    match g {
        Guard::Regulation => Overhead {
            aeg: r(21.0, 40.0),
            meas: r(4.9, 9.1),
            hw: r(3.7, 4.6),
            sign: r(0.1, 0.1),
            total: r(30.0, 53.0),
            baseline_s: r(29.0, 231.0),
            max_pct: 0.125,
        },
        Guard::Trajectory => Overhead {
            aeg: r(13.0, 31.0),
            meas: r(3.0, 6.3),
            hw: r(3.2, 4.7),
            sign: r(0.1, 0.1),
            total: r(19.0, 41.0),
            baseline_s: r(5.9, 117.0),
            max_pct: 0.384,
        },
        Guard::Syscall => Overhead {
            aeg: r(12.0, 23.0),
            meas: r(2.8, 4.8),
            hw: r(3.3, 4.7),
            sign: r(0.1, 0.1),
            total: r(19.0, 32.0),
            baseline_s: r(4.5, 79.0),
            max_pct: 0.521,
        },
        Guard::Stop => Overhead {
            aeg: r(11.0, 19.0),
            meas: r(2.6, 3.9),
            hw: r(3.4, 4.6),
            sign: r(0.1, 0.1),
            total: r(18.0, 27.0),
            baseline_s: r(2.8, 77.0),
            max_pct: 0.699,
        },
    }
}

/// Figure 4: the APM's overhead (guard derivation, measurement, HW, sign) in ms, and the
/// planning baseline in seconds.
pub const APM: Overhead = Overhead {
    aeg: r(0.03, 0.04),
    meas: r(0.15, 0.30),
    hw: r(3.5, 4.5),
    sign: r(0.10, 0.16),
    total: r(4.5, 4.5),
    baseline_s: r(4.6, 37.7),
    max_pct: 0.1,
};

/// Effectiveness the paper reports (§VI-A), correctly blocked % and correctly allowed %
/// over its three model executors.
pub fn effectiveness(g: Guard) -> (Range, Range) {
    match g {
        Guard::Regulation => (r(81.8, 100.0), r(90.0, 96.0)),
        Guard::Trajectory | Guard::Syscall | Guard::Stop => (r(100.0, 100.0), r(100.0, 100.0)),
    }
}

/// The paper's unmediated system-call corpus (100 cases): prevented by the monitor alone,
/// and by the monitor with the kernel sandbox, in percent.
pub const CORPUS: (f64, f64, usize) = (74.0, 100.0, 100);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table3_matches_the_paper() {
        // (t, regulation bundles/flows, others bundles/flows) as printed in Table III.
        for (t, rb, rf, ob, of) in [
            (1, 150, 150, 400, 400),
            (2, 75, 150, 200, 400),
            (4, 37, 148, 100, 400),
            (6, 25, 150, 66, 396),
        ] {
            assert_eq!(
                table3(pool_size(Guard::Regulation), t),
                Partition {
                    bundles: rb,
                    flows: rf
                }
            );
            assert_eq!(
                table3(pool_size(Guard::Stop), t),
                Partition {
                    bundles: ob,
                    flows: of
                }
            );
        }
        assert_eq!(r(0.1, 0.1).to_string(), "~0.1");
        assert_eq!(r(13.0, 31.0).to_string(), "13–31");
    }
}
