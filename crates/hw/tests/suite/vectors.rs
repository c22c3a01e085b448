//! Walks the whole vendored vectors folder (`data/attestation`): every file has a stated expectation from its README, and every expectation holds.

use std::path::Path;

use knox_hw::nvidia::{self, ChainError, GpuError, SpdmError, parse_serialized, rim};
use knox_hw::tdx::{self, Collateral, Rejection, TcbStatus, TdxError, Tee};

use super::support::{read, read_hex, utc, vectors};

/// What a file must give, per the vectors README.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// A genuine quote that verifies with its collateral at a time, giving a status.
    TdxVerifies {
        collateral: &'static str,
        at: &'static str,
        status: TcbStatus,
        advisories: &'static [&'static str],
        hex: bool,
    },
    /// A genuine quote that dcap-qvl rejects with this class of reason.
    TdxRejected {
        collateral: &'static str,
        at: &'static str,
        kind: Rejection,
        hex: bool,
    },
    /// A genuine quote without collateral: parses only.
    TdxParses { tee: Tee, version: u16 },
    /// Quote from Intel's synthetic PKI: must fail against the genuine root.
    SyntheticQuote,
    /// A file used by another entry (collateral, chain, root, claims).
    Companion,
    /// GPU evidence (hex) + chain that verifies, with driver version.
    GpuHexVerifies {
        chain: &'static str,
        driver: &'static str,
    },
    /// NVIDIA serialized evidence: this many devices verify with their nonce.
    GpuJsonVerifies {
        devices: usize,
        driver: &'static str,
    },
    /// NVSwitch evidence: chain and signature fine, refused for lacking an FWID.
    SwitchUnsupported,
    /// Broken chain with the genuine report: refused.
    BrokenChain,
    /// A RIM that verifies at a time, with its version.
    RimVerifies {
        at: &'static str,
        version: &'static str,
    },
    /// A RIM whose signature is wrong.
    RimBadSignature,
    /// A RIM signed under another (debug) root.
    RimWrongRoot,
    /// Not verified by knox-hw (AMD SEV-SNP, NVIDIA sample outputs, licences).
    OutOfScope,
}

use Expect::*;

const TDX_COLL: &str = "intel-tdx/dcap-qvl/tdx_quote_collateral.json";

fn expectation(rel: &str) -> Option<Expect> {
    Some(match rel {
        "intel-tdx/dcap-qvl/tdx_quote" => TdxVerifies {
            collateral: TDX_COLL,
            at: "2025-06-19T11:32:27Z",
            status: TcbStatus::UpToDate,
            advisories: &[],
            hex: false,
        },
        "intel-tdx/dcap-qvl/tdx_quote_td15ex" => TdxVerifies {
            collateral: "intel-tdx/dcap-qvl/tdx_quote_td15ex_collateral.json",
            at: "2026-10-08T01:09:46Z",
            status: TcbStatus::UpToDate,
            advisories: &[],
            hex: false,
        },
        "intel-tdx/dcap-qvl/near_quote_hex.txt" => TdxVerifies {
            collateral: "intel-tdx/dcap-qvl/near_quote_collateral.json",
            at: "2025-09-02T08:41:59Z",
            status: TcbStatus::UpToDate,
            advisories: &[],
            hex: true,
        },
        "intel-tdx/dcap-qvl/sgx_quote" => TdxVerifies {
            collateral: "intel-tdx/dcap-qvl/sgx_quote_collateral.json",
            at: "2025-06-19T11:32:27Z",
            status: TcbStatus::ConfigurationAndSWHardeningNeeded,
            advisories: &["INTEL-SA-00289", "INTEL-SA-00615"],
            hex: false,
        },
        "intel-tdx/dcap-qvl/tdx_quote_outdated" => TdxRejected {
            collateral: "intel-tdx/dcap-qvl/tdx_quote_outdated_collateral.json",
            at: "2026-02-18T12:00:00Z",
            kind: Rejection::NoMatchingTcbLevel,
            hex: false,
        },
        "intel-tdx/dcap-qvl/tdx-quote.hex" | "intel-tdx/dcap-qvl/quote-from-tappd.hex" => {
            TdxRejected {
                collateral: TDX_COLL,
                at: "2025-06-19T11:32:27Z",
                kind: Rejection::NoMatchingTcbLevel,
                hex: true,
            }
        }
        "intel-tdx/trustee/tdx_quote_4.dat"
        | "intel-tdx/trustee/tdx_quote_6.dat"
        | "intel-tdx/trustee/az-tdx-vtpm/td-quote.bin" => TdxParses {
            tee: Tee::Tdx,
            version: 4,
        },
        "intel-tdx/trustee/tdx_quote_5.dat" => TdxParses {
            tee: Tee::Tdx,
            version: 5,
        },
        "intel-tdx/trustee/occlum_quote.dat" => TdxParses {
            tee: Tee::Sgx,
            version: 3,
        },
        "intel-tdx/intel-qvl-synthetic/tdx/quote.dat" => SyntheticQuote,
        "nvidia-gpu/nvtrust/hopperAttestationReport.txt" => GpuHexVerifies {
            chain: "nvidia-gpu/nvtrust/hopperCertChain.txt",
            driver: "550.90.07",
        },
        "nvidia-gpu/trustee/hopper_coco_report1.txt" => GpuHexVerifies {
            chain: "nvidia-gpu/trustee/hopper_coco_certs1.txt",
            driver: "580.95.05",
        },
        "nvidia-gpu/attestation-sdk/hopper_evidence.json"
        | "nvidia-gpu/attestation-sdk/evidence_hopper_590_12.json" => GpuJsonVerifies {
            devices: 1,
            driver: "590.12",
        },
        "nvidia-gpu/attestation-sdk/multi_gpu_hopper.json" => GpuJsonVerifies {
            devices: 4,
            driver: "590.12",
        },
        "nvidia-gpu/attestation-sdk/hopper_evidence_cert_hold.json" => GpuJsonVerifies {
            devices: 1,
            driver: "570.86.10",
        },
        "nvidia-gpu/nvtrust/ppcie_gpu_evidence.json" => GpuJsonVerifies {
            devices: 8,
            driver: "590.12",
        },
        "nvidia-gpu/nvtrust/ppcie_switch_evidence.json" => SwitchUnsupported,
        "nvidia-gpu/trustee/hopper_cert_chain_case2.txt"
        | "nvidia-gpu/trustee/hopper_cert_chain_case3.txt"
        | "nvidia-gpu/trustee/hopper_cert_chain_case4.txt" => BrokenChain,
        "nvidia-gpu/attestation-sdk/NV_GPU_DRIVER_GH100_550.144.03.xml" => RimVerifies {
            at: "2025-06-01T00:00:00Z",
            version: "550.144.03",
        },
        "nvidia-gpu/nvtrust/1010_0200_882_96005E0001_PROD.swidtag"
        | "nvidia-gpu/nvtrust/1010_0200_882_96005E0001_test_no_gpu.swidtag" => RimVerifies {
            at: "2024-06-01T00:00:00Z",
            version: "96.00.5E.00.01",
        },
        "nvidia-gpu/nvtrust/Driver_RIM_test_no_gpu.swidtag" => RimVerifies {
            at: "2024-06-01T00:00:00Z",
            version: "545.00",
        },
        "nvidia-gpu/attestation-sdk/incorrect_signature_driver_rim.xml" => RimBadSignature,
        "nvidia-gpu/attestation-sdk/incorrect_cert_chain_driver_rim.xml" => RimWrongRoot,
        rel if rel.starts_with("amd-snp/") => OutOfScope,
        rel if rel.ends_with("LICENSE")
            || rel.contains("LICENSE-")
            || rel.ends_with("License-DCAP-BSD.txt") =>
        {
            OutOfScope
        }
        "README.md"
        | "nvidia-gpu/attestation-sdk/hopperClaimsv3_decoded.json"
        | "nvidia-gpu/attestation-sdk/hopperClaimsv3_detached_eat.json"
        | "nvidia-gpu/attestation-sdk/spdm_parsed_output.json"
        | "nvidia-gpu/attestation-sdk/spdm_req_parsed_output.json"
        | "intel-tdx/trustee/parse_tdx_claims_expected.json" => OutOfScope,
        rel if rel.ends_with("_collateral.json")
            || rel.starts_with("intel-tdx/intel-qvl-synthetic/tdx/")
            || rel.ends_with(".pem")
            || rel.ends_with(".crt")
            || rel.ends_with(".der")
            || rel.ends_with("hopperCertChain.txt")
            || rel.ends_with("hopper_coco_certs1.txt")
            || rel.ends_with("-claims.txt")
            || rel == "intel-tdx/trustee/tcbInfo.json"
            || rel == "intel-tdx/trustee/enclaveIdentity.json" =>
        {
            Companion
        }
        _ => return None,
    })
}

fn quote_bytes(rel: &str, hex: bool) -> Vec<u8> {
    if hex { read_hex(rel) } else { read(rel) }
}

fn check(rel: &str, expect: Expect) {
    match expect {
        TdxVerifies {
            collateral,
            at,
            status,
            advisories,
            hex,
        } => {
            let c = Collateral::from_json(&read(collateral)).unwrap();
            let v = tdx::verify(&quote_bytes(rel, hex), &c, utc(at)).unwrap();
            assert_eq!(v.tcb_status, status, "{rel}");
            assert_eq!(v.advisory_ids, advisories, "{rel}");
            assert!(v.collateral.at_within_window(), "{rel}");
        }
        TdxRejected {
            collateral,
            at,
            kind,
            hex,
        } => {
            let c = Collateral::from_json(&read(collateral)).unwrap();
            match tdx::verify(&quote_bytes(rel, hex), &c, utc(at)) {
                Err(TdxError::Rejected { kind: got, .. }) => assert_eq!(got, kind, "{rel}"),
                other => panic!("{rel}: {other:?}"),
            }
        }
        TdxParses { tee, version } => {
            let q = tdx::parse_unverified(&read(rel)).unwrap();
            assert_eq!((q.report.tee(), q.version), (tee, version), "{rel}");
        }
        SyntheticQuote => super::tdx_vectors::synthetic_fails_against_genuine_root(),
        GpuHexVerifies { chain, driver } => {
            let v = nvidia::verify(&read_hex(rel), &read(chain), None).unwrap();
            assert_eq!(v.driver_version.as_deref(), Some(driver), "{rel}");
            assert_eq!(v.measurements.len(), 64, "{rel}");
        }
        GpuJsonVerifies { devices, driver } => {
            let entries = parse_serialized(&read(rel)).unwrap();
            assert_eq!(entries.len(), devices, "{rel}");
            for e in entries {
                let nonce: [u8; 32] = e.nonce.as_slice().try_into().unwrap();
                let v = nvidia::verify(&e.evidence, &e.certificate_chain_pem, Some(nonce)).unwrap();
                assert!(v.nonce_checked);
                assert_eq!(v.driver_version.as_deref(), Some(driver), "{rel}");
            }
        }
        SwitchUnsupported => {
            for e in parse_serialized(&read(rel)).unwrap() {
                assert_eq!(e.arch, "LS10");
                let err = nvidia::verify(&e.evidence, &e.certificate_chain_pem, None).unwrap_err();
                assert!(
                    matches!(err, GpuError::FwidMissing("evidence")),
                    "{rel}: {err}"
                );
            }
        }
        BrokenChain => {
            let report = read_hex("nvidia-gpu/nvtrust/hopperAttestationReport.txt");
            let err = nvidia::verify(&report, &read(rel), None).unwrap_err();
            let expected = match rel.rsplit('_').next() {
                Some("case2.txt") => {
                    matches!(err, GpuError::Chain(ChainError::TooShort { got: 1 }))
                }
                Some("case3.txt") => matches!(
                    err,
                    GpuError::Chain(ChainError::IssuerMismatch { index: 1, .. })
                ),
                Some("case4.txt") => matches!(err, GpuError::Chain(ChainError::LeafIsCa { .. })),
                _ => false,
            };
            assert!(expected, "{rel}: {err}");
        }
        RimVerifies { at, version } => {
            let v = rim::verify(&read(rel), utc(at)).unwrap();
            assert_eq!(v.version.as_deref(), Some(version), "{rel}");
            assert!(!v.measurements.entries().is_empty(), "{rel}");
        }
        RimBadSignature => {
            let err = rim::verify(&read(rel), utc("2025-06-01T00:00:00Z")).unwrap_err();
            assert_eq!(err, rim::RimError::BadSignature, "{rel}");
        }
        RimWrongRoot => {
            let err = rim::verify(&read(rel), utc("2025-06-01T00:00:00Z")).unwrap_err();
            assert!(
                matches!(err, rim::RimError::Chain(ChainError::UntrustedRoot { .. })),
                "{rel}: {err}"
            );
        }
        Companion | OutOfScope => {}
    }
}

fn walk(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out);
        } else {
            let rel = path
                .strip_prefix(vectors())
                .unwrap()
                .to_string_lossy()
                .into_owned();
            out.push(rel);
        }
    }
}

#[test]
fn every_vector_file_gives_its_readme_result() {
    let mut files = Vec::new();
    walk(&vectors(), &mut files);
    files.sort();
    assert!(
        files.len() > 60,
        "vectors folder looks incomplete: {} files",
        files.len()
    );
    let mut checked = 0;
    for rel in &files {
        let expect =
            expectation(rel).unwrap_or_else(|| panic!("no expectation for vector `{rel}`"));
        check(rel, expect);
        if !matches!(expect, Companion | OutOfScope) {
            checked += 1;
        }
    }
    assert!(checked >= 27, "only {checked} vectors carried a check");
    let _unused: Option<SpdmError> = None;
}
