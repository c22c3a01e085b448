//! The fields of a verified (or merely parsed) TDX or SGX report body, copied out of dcap-qvl's types.

use dcap_qvl::quote::{EnclaveReport, Report as DcapReport, TDReport10};

/// A 48-byte measurement register (SHA-384).
pub type Measurement48 = [u8; 48];

/// Which TEE produced the quote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tee {
    /// Intel TDX (trust domain).
    Tdx,
    /// Intel SGX (enclave).
    Sgx,
}

impl std::fmt::Display for Tee {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Tdx => "tdx",
            Self::Sgx => "sgx",
        })
    }
}

/// The report body a quote signs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    /// A TD report (TDX 1.0, 1.5 or 1.5 "ex").
    Td(Box<TdReport>),
    /// An SGX enclave report.
    Sgx(Box<SgxReport>),
}

impl Report {
    /// The TEE this report comes from.
    #[must_use]
    pub fn tee(&self) -> Tee {
        match self {
            Self::Td(_) => Tee::Tdx,
            Self::Sgx(_) => Tee::Sgx,
        }
    }

    /// The 64 bytes of report data the TEE software chose (for Knox: the hash
    /// of the in-TEE signing key).
    #[must_use]
    pub fn report_data(&self) -> &[u8; 64] {
        match self {
            Self::Td(td) => &td.report_data,
            Self::Sgx(sgx) => &sgx.report_data,
        }
    }

    /// The TD report, when this is one.
    #[must_use]
    pub fn as_td(&self) -> Option<&TdReport> {
        match self {
            Self::Td(td) => Some(td),
            Self::Sgx(_) => None,
        }
    }

    /// The SGX report, when this is one.
    #[must_use]
    pub fn as_sgx(&self) -> Option<&SgxReport> {
        match self {
            Self::Sgx(sgx) => Some(sgx),
            Self::Td(_) => None,
        }
    }
}

/// TD report fields (TDX module `TDREPORT` body as carried in a quote).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TdReport {
    /// Which layout the quote used: `1.0`, `1.5` or `1.5ex`.
    pub body: &'static str,
    /// TEE TCB SVN (TDX module and SEAM loader versions).
    pub tee_tcb_svn: [u8; 16],
    /// Measurement of the TDX module.
    pub mr_seam: Measurement48,
    /// Signer of the TDX module (zero for Intel).
    pub mr_signer_seam: Measurement48,
    /// SEAM attributes.
    pub seam_attributes: [u8; 8],
    /// TD attributes (bit 0: debug).
    pub td_attributes: [u8; 8],
    /// Extended features available to the TD.
    pub xfam: [u8; 8],
    /// MRTD: measurement of the initial TD contents (firmware).
    pub mr_td: Measurement48,
    /// Software-defined configuration id.
    pub mr_config_id: Measurement48,
    /// Software-defined owner id.
    pub mr_owner: Measurement48,
    /// Software-defined owner configuration.
    pub mr_owner_config: Measurement48,
    /// RTMR0..RTMR3: run-time extendable measurement registers.
    pub rtmr: [Measurement48; 4],
    /// Report data chosen by the TD.
    pub report_data: [u8; 64],
    /// TDX 1.5: second TEE TCB SVN.
    pub tee_tcb_svn2: Option<[u8; 16]>,
    /// TDX 1.5: measurement of bound service TDs.
    pub mr_service_td: Option<Measurement48>,
}

impl TdReport {
    /// Whether the TD runs in debug mode (its memory is readable by the host).
    #[must_use]
    pub fn debug(&self) -> bool {
        self.td_attributes.first().is_some_and(|b| b & 1 == 1)
    }
}

/// SGX enclave report fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SgxReport {
    /// CPU security version.
    pub cpu_svn: [u8; 16],
    /// Enclave attributes (flags bit 1: debug).
    pub attributes: [u8; 16],
    /// MRENCLAVE: measurement of the enclave.
    pub mr_enclave: [u8; 32],
    /// MRSIGNER: hash of the enclave signer's key.
    pub mr_signer: [u8; 32],
    /// Product id.
    pub isv_prod_id: u16,
    /// Security version.
    pub isv_svn: u16,
    /// Report data chosen by the enclave.
    pub report_data: [u8; 64],
}

impl SgxReport {
    /// Whether the enclave runs in debug mode.
    #[must_use]
    pub fn debug(&self) -> bool {
        self.attributes.first().is_some_and(|b| b & 2 == 2)
    }
}

fn td10(body: &'static str, r: &TDReport10) -> TdReport {
    TdReport {
        body,
        tee_tcb_svn: r.tee_tcb_svn,
        mr_seam: r.mr_seam,
        mr_signer_seam: r.mr_signer_seam,
        seam_attributes: r.seam_attributes,
        td_attributes: r.td_attributes,
        xfam: r.xfam,
        mr_td: r.mr_td,
        mr_config_id: r.mr_config_id,
        mr_owner: r.mr_owner,
        mr_owner_config: r.mr_owner_config,
        rtmr: [r.rt_mr0, r.rt_mr1, r.rt_mr2, r.rt_mr3],
        report_data: r.report_data,
        tee_tcb_svn2: None,
        mr_service_td: None,
    }
}

fn sgx(r: &EnclaveReport) -> SgxReport {
    SgxReport {
        cpu_svn: r.cpu_svn,
        attributes: r.attributes,
        mr_enclave: r.mr_enclave,
        mr_signer: r.mr_signer,
        isv_prod_id: r.isv_prod_id,
        isv_svn: r.isv_svn,
        report_data: r.report_data,
    }
}

impl From<&DcapReport> for Report {
    fn from(report: &DcapReport) -> Self {
        match report {
            DcapReport::SgxEnclave(r) => Self::Sgx(Box::new(sgx(r))),
            DcapReport::TD10(r) => Self::Td(Box::new(td10("1.0", r))),
            DcapReport::TD15(r) => Self::Td(Box::new(TdReport {
                tee_tcb_svn2: Some(r.tee_tcb_svn2),
                mr_service_td: Some(r.mr_service_td),
                ..td10("1.5", &r.base)
            })),
            DcapReport::TD15Ex(r) => Self::Td(Box::new(TdReport {
                tee_tcb_svn2: Some(r.base.tee_tcb_svn2),
                mr_service_td: Some(r.base.mr_service_td),
                ..td10("1.5ex", &r.base.base)
            })),
        }
    }
}
