//! Runs left out, read from the chains of runs each in-TEE key signs (evidence format
//! v3, `summary.key_chain`): the key numbers every run it seals and names the run
//! sealed before it, so among the bundles a provider handed over, a missing number is a
//! run withheld, two runs at one number are a fork (the key signed both), a run naming
//! a predecessor other than the one handed over follows a run withheld, and a run
//! handed over after a later one of its key arrived late.
//!
//! A key announced when made (evidence format §6a, `knox run --stream-to`) has its
//! announcement as link 0 and its runs from 1: a key announced and never followed is
//! a process whose runs were all withheld (or that is still running).
//!
//! What a chain cannot show: runs sealed after the last one handed over. They show as
//! soon as any later run of the same key arrives.

use std::collections::BTreeMap;

/// One stored bundle's link (only links whose signed summary verified are stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Key id of the in-TEE key.
    pub key: String,
    /// Its number in the key's chain.
    pub seq: u64,
    /// The seal digest of the run before it (hex).
    pub prev: String,
    /// Its own seal digest (hex).
    pub seal: String,
    /// The stored bundle's digest.
    pub digest: String,
    /// Run id.
    pub run_id: String,
    /// Whether it is the key's announcement (link 0, no run) rather than a run.
    pub announcement: bool,
    /// Its verification outcome.
    pub outcome: String,
    /// Its index in the transparency log (submission order).
    pub log_index: i64,
}

/// One key's chain as handed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyChain {
    /// Key id.
    pub key: String,
    /// Its runs, by number (a number twice when forked).
    pub runs: Vec<Link>,
    /// Numbers missing below the highest handed over, as inclusive ranges.
    pub missing: Vec<(u64, u64)>,
    /// Numbers at which two different runs were signed.
    pub forks: Vec<u64>,
    /// Runs whose named predecessor is not the run handed over at the number before
    /// (that number is present: a run there was withheld and another handed over).
    pub broken: Vec<u64>,
    /// Runs handed over after a later run of the same key: `(late run, the later run
    /// already stored)`.
    pub late: Vec<(u64, u64)>,
}

impl KeyChain {
    /// How many runs are missing.
    pub fn missing_runs(&self) -> u64 {
        // Numbers are the key's to choose (a key anyone can make, on a simulated
        // platform): nothing here may overflow.
        self.missing.iter().fold(0u64, |n, (a, b)| {
            n.saturating_add(b.saturating_sub(*a).saturating_add(1))
        })
    }

    /// Whether the key's announcement (link 0) was handed over.
    pub fn announced(&self) -> bool {
        self.runs.iter().any(|l| l.announcement)
    }

    /// How many runs were handed over (the announcement is not one).
    pub fn run_count(&self) -> usize {
        self.runs.iter().filter(|l| !l.announcement).count()
    }

    /// Whether the key was announced and no run of it handed over: every run of the
    /// process withheld, or the process still running.
    pub fn unfollowed(&self) -> bool {
        self.announced() && self.run_count() == 0
    }

    /// Whether anything is wrong with the chain (a late run included), or nothing
    /// followed its announcement.
    pub fn has_gaps(&self) -> bool {
        !(self.missing.is_empty()
            && self.forks.is_empty()
            && self.broken.is_empty()
            && self.late.is_empty())
            || self.unfollowed()
    }

    /// The highest number handed over.
    pub fn last(&self) -> Option<u64> {
        self.runs.last().map(|l| l.seq)
    }

    /// One line in plain words: what was handed over and what is wrong.
    pub fn describe(&self) -> String {
        let short = self.key.get(..12).unwrap_or(&self.key);
        if self.unfollowed() && !self.has_other_gaps() {
            return format!(
                "key {short}…: announced, and no run of it handed over (its runs withheld, or its process still running)"
            );
        }
        let runs = self.run_count();
        let first = u64::from(self.announced());
        let mut s = format!(
            "key {short}…: {}{runs} run{} handed over",
            if self.announced() { "announced; " } else { "" },
            if runs == 1 { "" } else { "s" },
        );
        if runs > 0 {
            s.push_str(&format!(", numbered {first}–{}", self.last().unwrap_or(0)));
        }
        if !self.missing.is_empty() {
            let ranges: Vec<String> = self
                .missing
                .iter()
                .map(|&(a, b)| {
                    if a == b {
                        a.to_string()
                    } else {
                        format!("{a}–{b}")
                    }
                })
                .collect();
            s.push_str(&format!(
                "; {} missing: {}",
                self.missing_runs(),
                ranges.join(", ")
            ));
        }
        if !self.forks.is_empty() {
            s.push_str(&format!(
                "; forked (two runs signed) at {}",
                list(&self.forks)
            ));
        }
        if !self.broken.is_empty() {
            s.push_str(&format!(
                "; follows a run not handed over at {}",
                list(&self.broken)
            ));
        }
        if !self.late.is_empty() {
            let late: Vec<String> = self
                .late
                .iter()
                .map(|(n, after)| format!("{n} (after {after})"))
                .collect();
            s.push_str(&format!("; handed over late: {}", late.join(", ")));
        }
        if !self.has_gaps() {
            s.push_str("; no gap");
        }
        s
    }
}

impl KeyChain {
    /// Whether a number is missing, forked, broken or late.
    fn has_other_gaps(&self) -> bool {
        !(self.missing.is_empty()
            && self.forks.is_empty()
            && self.broken.is_empty()
            && self.late.is_empty())
    }
}

fn list(v: &[u64]) -> String {
    v.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
}

/// A provider's chains, one per in-TEE key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyChains {
    /// By key id.
    pub chains: Vec<KeyChain>,
}

impl KeyChains {
    /// Reads the gaps from a provider's links (any order).
    pub fn of(links: Vec<Link>) -> Self {
        let mut by_key: BTreeMap<String, Vec<Link>> = BTreeMap::new();
        for l in links {
            by_key.entry(l.key.clone()).or_default().push(l);
        }
        let chains = by_key
            .into_iter()
            .map(|(key, mut runs)| {
                runs.sort_by_key(|a| (a.seq, a.log_index));
                chain(key, runs)
            })
            .collect();
        Self { chains }
    }

    /// Chains with a gap, a fork, a broken link or a late run.
    pub fn with_gaps(&self) -> impl Iterator<Item = &KeyChain> {
        self.chains.iter().filter(|c| c.has_gaps())
    }

    /// How many runs are missing over every chain.
    pub fn missing_runs(&self) -> u64 {
        self.chains
            .iter()
            .fold(0u64, |n, c| n.saturating_add(c.missing_runs()))
    }
}

fn chain(key: String, runs: Vec<Link>) -> KeyChain {
    // The distinct seals handed over at each number.
    let mut seals: BTreeMap<u64, Vec<&str>> = BTreeMap::new();
    for l in &runs {
        let at = seals.entry(l.seq).or_default();
        if !at.contains(&l.seal.as_str()) {
            at.push(&l.seal);
        }
    }
    let forks = seals
        .iter()
        .filter(|(_, s)| s.len() > 1)
        .map(|(n, _)| *n)
        .collect();
    let mut missing = Vec::new();
    let mut expected = 0u64;
    for &n in seals.keys() {
        if n > expected {
            missing.push((expected, n - 1));
        }
        expected = n.saturating_add(1);
    }
    let mut broken: Vec<u64> = runs
        .iter()
        .filter(|l| {
            l.seq
                .checked_sub(1)
                .and_then(|p| seals.get(&p))
                .is_some_and(|before| !before.contains(&l.prev.as_str()))
        })
        .map(|l| l.seq)
        .collect();
    broken.dedup();
    // A run handed over after a higher-numbered run of the same key was stored: in
    // submission order, the highest number stored so far (n log n, however many runs
    // a key sealed).
    // Another copy of a run already handed over (the same seal: other bytes of the
    // same signed run) is not late.
    let mut arrival: Vec<(i64, u64, &str)> = runs
        .iter()
        .map(|l| (l.log_index, l.seq, l.seal.as_str()))
        .collect();
    arrival.sort_unstable();
    let mut late = Vec::new();
    let mut highest: Option<u64> = None;
    let mut seen = std::collections::BTreeSet::new();
    for (_, seq, seal) in arrival {
        if !seen.insert(seal) {
            continue;
        }
        match highest {
            Some(h) if h > seq => late.push((seq, h)),
            Some(h) if h >= seq => {}
            _ => highest = Some(seq),
        }
    }
    late.sort_unstable();
    late.dedup();
    KeyChain {
        key,
        runs,
        missing,
        forks,
        broken,
        late,
    }
}

#[cfg(test)]
#[expect(clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;

    fn link(seq: u64, prev: &str, seal: &str, log_index: i64) -> Link {
        Link {
            key: "k".repeat(64),
            seq,
            prev: prev.into(),
            seal: seal.into(),
            digest: format!("d-{seal}"),
            run_id: format!("run-{seq}"),
            announcement: false,
            outcome: "complete".into(),
            log_index,
        }
    }

    fn announcement(seal: &str, log_index: i64) -> Link {
        Link {
            announcement: true,
            run_id: "key-announcement".into(),
            ..link(0, "start", seal, log_index)
        }
    }

    #[test]
    fn a_key_announced_and_never_followed_shows() {
        let c = KeyChains::of(vec![announcement("a", 0)]);
        let k = &c.chains[0];
        assert!(k.announced() && k.unfollowed() && k.has_gaps());
        assert_eq!(k.run_count(), 0);
        assert_eq!(c.missing_runs(), 0);
        assert!(
            k.describe()
                .contains("announced, and no run of it handed over"),
            "{}",
            k.describe()
        );
        // Followed by runs 1 and 2: no gap, the runs numbered from 1.
        let c = KeyChains::of(vec![
            announcement("a", 0),
            link(1, "a", "b", 1),
            link(2, "b", "c", 2),
        ]);
        let k = &c.chains[0];
        assert!(k.announced() && !k.unfollowed() && !k.has_gaps());
        assert_eq!(
            k.describe(),
            format!(
                "key {}…: announced; 2 runs handed over, numbered 1–2; no gap",
                "k".repeat(12)
            )
        );
        // Announced, run 1 withheld, run 2 handed over: run 1 is missing.
        let c = KeyChains::of(vec![announcement("a", 0), link(2, "b", "c", 1)]);
        assert_eq!(c.chains[0].missing, vec![(1, 1)]);
        // Runs of an announced key whose announcement was withheld: number 0 missing.
        let c = KeyChains::of(vec![link(1, "a", "b", 0)]);
        assert_eq!(c.chains[0].missing, vec![(0, 0)]);
        assert!(!c.chains[0].announced());
    }

    #[test]
    fn an_unbroken_chain_has_no_gap() {
        let c = KeyChains::of(vec![
            link(1, "a", "b", 1),
            link(0, "start", "a", 0),
            link(2, "b", "c", 2),
        ]);
        assert_eq!(c.chains.len(), 1);
        assert!(!c.chains[0].has_gaps(), "{}", c.chains[0].describe());
        assert!(c.chains[0].describe().ends_with("no gap"));
    }

    #[test]
    fn a_withheld_run_a_fork_a_broken_link_and_a_late_run_each_show() {
        // Run 1 withheld.
        let c = KeyChains::of(vec![link(0, "s", "a", 0), link(2, "b", "c", 1)]);
        assert_eq!(c.chains[0].missing, vec![(1, 1)]);
        assert_eq!(c.missing_runs(), 1);
        assert!(c.chains[0].describe().contains("1 missing: 1"));
        // Runs 0–1 withheld: the first run handed over is 2.
        let c = KeyChains::of(vec![link(2, "b", "c", 0), link(3, "c", "d", 1)]);
        assert_eq!(c.chains[0].missing, vec![(0, 1)]);
        // Two runs signed at number 1.
        let c = KeyChains::of(vec![
            link(0, "s", "a", 0),
            link(1, "a", "b", 1),
            link(1, "a", "b2", 2),
        ]);
        assert_eq!(c.chains[0].forks, vec![1]);
        // Run 2 names a run 1 other than the one handed over.
        let c = KeyChains::of(vec![
            link(0, "s", "a", 0),
            link(1, "a", "b", 1),
            link(2, "x", "c", 2),
        ]);
        assert_eq!(c.chains[0].broken, vec![2]);
        assert!(c.chains[0].missing.is_empty());
        // Run 1 handed over after run 2: no gap left, but late.
        let c = KeyChains::of(vec![
            link(0, "s", "a", 0),
            link(2, "b", "c", 1),
            link(1, "a", "b", 2),
        ]);
        assert!(c.chains[0].missing.is_empty());
        assert_eq!(c.chains[0].late, vec![(1, 2)]);
        assert!(c.chains[0].has_gaps());
        // Numbers at the ends of the range: no overflow, no list of every number.
        let c = KeyChains::of(vec![link(u64::MAX, "x", "y", 0), link(5, "s", "a", 1)]);
        assert_eq!(c.chains[0].missing, vec![(0, 4), (6, u64::MAX - 1)]);
        assert_eq!(c.missing_runs(), u64::MAX - 1);
        assert_eq!(c.chains[0].late, vec![(5, u64::MAX)]);
        // The same run handed over twice (two byte-copies): one seal, no fork, and the
        // copy handed over after a later run is not late.
        let c = KeyChains::of(vec![
            link(0, "s", "a", 0),
            link(1, "a", "b", 1),
            link(0, "s", "a", 2),
        ]);
        assert!(!c.chains[0].has_gaps(), "{}", c.chains[0].describe());
    }
}
