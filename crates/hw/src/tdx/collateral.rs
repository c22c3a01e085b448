//! Intel DCAP collateral (dcap-qvl's `QuoteCollateralV3` JSON), size-capped, with its signed validity window read out.

use dcap_qvl::QuoteCollateralV3;
use serde::Deserialize;

use crate::time::parse_rfc3339_utc;

/// Largest collateral JSON accepted, checked before parsing. Genuine collateral is
/// 15–25 KiB; the margin leaves room for long CRLs.
pub const MAX_COLLATERAL_BYTES: usize = 512 * 1024;

/// Why collateral could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CollateralError {
    /// The input is over [`MAX_COLLATERAL_BYTES`].
    #[error("collateral is {got} bytes, over the limit of {limit}")]
    TooLarge {
        /// Size of the input.
        got: usize,
        /// The limit.
        limit: usize,
    },
    /// The input is not collateral JSON.
    #[error("collateral is not valid json: {0}")]
    Json(#[from] serde_json::Error),
    /// A signed document inside the collateral lacks a readable date.
    #[error("collateral `{document}` has no valid `{key}` timestamp")]
    BadDate {
        /// `tcb_info` or `qe_identity`.
        document: &'static str,
        /// `issueDate` or `nextUpdate`.
        key: &'static str,
    },
}

/// A closed interval of unix seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValidityWindow {
    /// First second of validity.
    pub not_before_unix: u64,
    /// Last second of validity.
    pub not_after_unix: u64,
}

impl ValidityWindow {
    /// Whether `unix_secs` lies inside the window (both ends included).
    #[must_use]
    pub fn contains(&self, unix_secs: u64) -> bool {
        (self.not_before_unix..=self.not_after_unix).contains(&unix_secs)
    }
}

/// Intel collateral for one quote: PCK CRLs, TCB info and QE identity with
/// their issuer chains, as Intel signed them.
#[derive(Clone, Debug)]
pub struct Collateral {
    inner: QuoteCollateralV3,
    signed_window: ValidityWindow,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Dated {
    issue_date: String,
    next_update: String,
}

fn window_of(document: &'static str, json: &str) -> Result<ValidityWindow, CollateralError> {
    let dated: Dated = serde_json::from_str(json)?;
    let read = |key, value: &str| {
        parse_rfc3339_utc(value).ok_or(CollateralError::BadDate { document, key })
    };
    Ok(ValidityWindow {
        not_before_unix: read("issueDate", &dated.issue_date)?,
        not_after_unix: read("nextUpdate", &dated.next_update)?,
    })
}

impl Collateral {
    /// Reads collateral in dcap-qvl's JSON form (hex for the binary fields).
    ///
    /// # Errors
    /// [`CollateralError`] when the input is too large, not that JSON, or its
    /// TCB info or QE identity carry no valid dates.
    pub fn from_json(bytes: &[u8]) -> Result<Self, CollateralError> {
        if bytes.len() > MAX_COLLATERAL_BYTES {
            return Err(CollateralError::TooLarge {
                got: bytes.len(),
                limit: MAX_COLLATERAL_BYTES,
            });
        }
        Self::from_dcap(serde_json::from_slice(bytes)?)
    }

    /// Wraps collateral already in dcap-qvl's type (for example assembled from
    /// separate PCS downloads).
    ///
    /// # Errors
    /// [`CollateralError`] when its TCB info or QE identity carry no valid dates.
    pub fn from_dcap(inner: QuoteCollateralV3) -> Result<Self, CollateralError> {
        let tcb = window_of("tcb_info", &inner.tcb_info)?;
        let qe = window_of("qe_identity", &inner.qe_identity)?;
        let signed_window = ValidityWindow {
            not_before_unix: tcb.not_before_unix.max(qe.not_before_unix),
            not_after_unix: tcb.not_after_unix.min(qe.not_after_unix),
        };
        Ok(Self {
            inner,
            signed_window,
        })
    }

    /// The window in which both the TCB info and the QE identity are current
    /// (latest `issueDate` to earliest `nextUpdate`), as written in them.
    #[must_use]
    pub fn signed_window(&self) -> ValidityWindow {
        self.signed_window
    }

    /// The collateral in dcap-qvl's type.
    #[must_use]
    pub fn as_dcap(&self) -> &QuoteCollateralV3 {
        &self.inner
    }
}
