//! Black-box tests: the real `knox-probe` binary under the real filter, rules and limits.

mod suite;
