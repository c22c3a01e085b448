//! Reference (golden) measurements for a GPU and their comparison with the measurement blocks of verified evidence.

use std::collections::BTreeMap;

use super::spdm::MeasurementBlock;

/// Golden values for some measurement indices, from one source (a verified
/// driver or VBIOS RIM, or values a regulator wrote down).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReferenceMeasurements {
    source: String,
    entries: BTreeMap<u8, Vec<Vec<u8>>>,
}

impl ReferenceMeasurements {
    /// An empty set named after where its values come from.
    #[must_use]
    pub fn new(source: impl Into<String>) -> Self {
        Self {
            source: source.into(),
            entries: BTreeMap::new(),
        }
    }

    /// Accepts any of `alternatives` for SPDM measurement block `index` (from 1).
    pub fn insert(&mut self, index: u8, alternatives: Vec<Vec<u8>>) {
        self.entries.insert(index, alternatives);
    }

    /// Where the values come from.
    #[must_use]
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Block index to accepted values.
    #[must_use]
    pub fn entries(&self) -> &BTreeMap<u8, Vec<Vec<u8>>> {
        &self.entries
    }
}

/// Why evidence does not match its reference measurements.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReferenceError {
    /// Two sources give values for the same index.
    #[error("measurement index {index} is covered by both `{first}` and `{second}`")]
    Overlap {
        /// The index.
        index: u8,
        /// First source.
        first: String,
        /// Second source.
        second: String,
    },
    /// The evidence has no block at an index the reference covers.
    #[error("evidence has no measurement {index} required by `{source_name}`")]
    Missing {
        /// The index.
        index: u8,
        /// The reference source.
        source_name: String,
    },
    /// The evidence's value is none of the accepted ones.
    #[error("measurement {index} is `{got}`, not a value `{source_name}` accepts")]
    Mismatch {
        /// The index.
        index: u8,
        /// The reference source.
        source_name: String,
        /// The evidence's value, hex.
        got: String,
    },
}

/// Outcome of the reference comparison.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReferenceCheck {
    /// No reference measurements were supplied; the measurements are unappraised.
    NotSupplied,
    /// Every covered index matched.
    Matched {
        /// Sources compared against.
        sources: Vec<String>,
        /// How many indices were compared.
        indices: usize,
    },
}

pub(crate) fn compare(
    blocks: &[MeasurementBlock],
    references: &[ReferenceMeasurements],
) -> Result<ReferenceCheck, ReferenceError> {
    if references.is_empty() {
        return Ok(ReferenceCheck::NotSupplied);
    }
    let mut covered: BTreeMap<u8, &str> = BTreeMap::new();
    for reference in references {
        for (index, accepted) in &reference.entries {
            if let Some(first) = covered.insert(*index, &reference.source) {
                return Err(ReferenceError::Overlap {
                    index: *index,
                    first: first.to_owned(),
                    second: reference.source.clone(),
                });
            }
            let block = blocks.iter().find(|b| b.index == *index).ok_or_else(|| {
                ReferenceError::Missing {
                    index: *index,
                    source_name: reference.source.clone(),
                }
            })?;
            if !accepted.contains(&block.value) {
                return Err(ReferenceError::Mismatch {
                    index: *index,
                    source_name: reference.source.clone(),
                    got: hex::encode(&block.value),
                });
            }
        }
    }
    Ok(ReferenceCheck::Matched {
        sources: references.iter().map(|r| r.source.clone()).collect(),
        indices: covered.len(),
    })
}
